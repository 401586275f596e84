"""``harvester serve`` against hostile and unlucky clients (issue #16): slow clients, gzip bombs,
retried exports, the token on every path, and the exposure warning.

Each test is a finding of the chaos review that failed before the receiver was hardened. Servers bind
127.0.0.1 on an ephemeral port with short deadlines, so nothing here takes more than a few seconds,
and nothing asserts how fast anything is: only what the server answers and what it stores.
"""

from __future__ import annotations

import gzip
import http.client
import os
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import orjson
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from harvester.cli.serve import exposure_warning
from harvester.errors import StoreError
from harvester.intake import Receiver
from harvester.spans import SpanData, to_otlp
from harvester.store import TraceStore
from tests.builders.capture import agent_run, stored
from tests.builders.store import agent_trace, make_span

PROTOBUF = "application/x-protobuf"
JSON = "application/json"


@pytest.fixture
def store(tmp_path: Path) -> str:
    return str(tmp_path / "traces.db")


def _finished_run() -> Sequence[ReadableSpan]:
    """The SDK's spans of one agent run, for the real exporter to send."""
    provider = TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    agent_run(provider.get_tracer("receiver-hardening"))
    return memory.get_finished_spans()


def _json(spans: list[SpanData]) -> bytes:
    return orjson.dumps(to_otlp(spans))


def _post(
    rec: Receiver, body: bytes, content_type: str = JSON, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str]]:
    conn = http.client.HTTPConnection("127.0.0.1", rec.port, timeout=10)
    try:
        conn.request("POST", "/v1/traces", body=body, headers={"Content-Type": content_type, **(headers or {})})
        resp = conn.getresponse()
        resp.read()
        return resp.status, dict(resp.getheaders())
    finally:
        conn.close()


def _returns(fn: Callable[..., object], **kwargs: object) -> None:
    """Call ``fn`` on another thread and fail if it hangs; the deadline only stops a broken test from hanging."""
    caller = threading.Thread(target=fn, kwargs=kwargs, daemon=True)
    caller.start()
    caller.join(60)
    assert not caller.is_alive(), f"{fn.__qualname__} never returned"


def _until(condition: Callable[[], bool], deadline: float = 20.0) -> None:
    """Wait for something the server's threads do; the deadline only stops a broken test from hanging."""
    end = time.monotonic() + deadline
    while not condition():
        assert time.monotonic() < end, "condition never became true"
        time.sleep(0.01)


def _headers(length: int, extra: str = "") -> bytes:
    return (
        f"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: {PROTOBUF}\r\nContent-Length: {length}\r\n{extra}\r\n"
    ).encode()


class Trickler(threading.Thread):
    """A slow client: sends ``sent`` at once, then ``trickled`` (and zeros after it) one byte every
    ``every`` seconds until the server answers or closes, or ``stop`` is set. ``answer`` is the first
    bytes the server sent back; ``closed``, that it closed without a word."""

    def __init__(self, port: int, sent: bytes, trickled: bytes = b"", every: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.settimeout(every)
        self.sent, self.trickled = sent, trickled
        self.stop = threading.Event()
        self.answer = b""
        self.closed = False

    def run(self) -> None:
        try:
            self.sock.sendall(self.sent)
            rest = self.trickled
            while not self.stop.is_set():
                try:
                    data = self.sock.recv(4096)
                    self.answer, self.closed = data, not data
                    return
                except TimeoutError:
                    pass
                self.sock.sendall(rest[:1] or b"\0")
                rest = rest[1:]
        except OSError:
            self.closed = True
        finally:
            self.sock.close()

    def done(self, timeout: float = 10) -> Trickler:
        """Wait until the server has answered or closed (``stop`` it first to give up)."""
        self.join(timeout)
        return self


@pytest.fixture
def tricklers() -> Iterator[list[Trickler]]:
    started: list[Trickler] = []
    yield started
    for t in started:
        t.stop.set()
    for t in started:
        t.join(5)


# -- slow clients ------------------------------------------------------------------------------
@pytest.mark.slow
def test_four_slow_clients_do_not_lock_a_real_exporter_out(store: str, tricklers: list[Trickler]):
    """Four clients declare a 16 MiB body and send a byte at a time: they hold what they sent, not what
    they declared, so the real exporter beside them is still served (before: 503 for every export)."""
    rec = Receiver(store, port=0, idle_seconds=60)  # the defaults: 16 MiB bodies, 64 MiB in flight
    rec.start()
    try:
        for _ in range(4):
            tricklers.append(Trickler(rec.port, _headers(16 << 20)))
            tricklers[-1].start()
        _until(lambda: rec.health()["inflight_requests"] == 4)
        exporter = OTLPSpanExporter(endpoint=rec.url, timeout=1)
        results = [exporter.export(_finished_run()) for _ in range(20)]
        exporter.shutdown()
        assert rec.health()["inflight_requests"] >= 4  # the slow clients were still there throughout
    finally:
        rec.stop(timeout=1)
    ok = results.count(SpanExportResult.SUCCESS)
    assert ok >= 18, f"{ok} of 20 exports succeeded beside 4 slow clients"
    assert len(stored(store)) == ok


@pytest.mark.slow
def test_headers_trickled_a_byte_at_a_time_are_cut_off_at_the_header_deadline(store: str, tricklers: list[Trickler]):
    """The token is a header, so headers are read before it is checked: they get a deadline for the
    whole of them, not per byte, or slots are held without a token (before: held for as long as bytes came)."""
    rec = Receiver(store, port=0, token="s3cret", header_timeout=0.5)
    rec.start()
    try:
        tricklers.append(Trickler(rec.port, b"P", _headers(10, "X-Padding: " + "x" * 1000 + "\r\n")[1:]))
        tricklers[0].start()
        assert tricklers[0].done().closed and tricklers[0].answer == b""
        _until(lambda: rec.health()["errors"].get("header_timeout") == 1)
        _until(lambda: rec.health()["open_connections"] == 0)
    finally:
        rec.stop(timeout=1)


@pytest.mark.slow
def test_a_keep_alive_connection_quiet_between_exports_is_not_cut(store: str):
    """The header deadline starts at a request's first byte, not when the last response went out:
    an exporter's keep-alive connection may be quiet longer than it between batches."""
    rec = Receiver(store, port=0, header_timeout=0.2)
    rec.start()
    try:
        exporter = OTLPSpanExporter(endpoint=rec.url, timeout=5)
        assert exporter.export(_finished_run()) == SpanExportResult.SUCCESS
        time.sleep(0.5)
        assert rec.health()["open_connections"] == 1
        assert exporter.export(_finished_run()) == SpanExportResult.SUCCESS
        exporter.shutdown()
    finally:
        rec.stop(timeout=1)
    assert rec.health()["errors"] == {}


@pytest.mark.slow
def test_a_body_trickled_a_byte_at_a_time_gets_a_408_at_the_body_deadline(store: str, tricklers: list[Trickler]):
    """A socket timeout is per recv: a byte a second would hold the connection forever. The body has
    one deadline for the whole of it (before: no answer while bytes kept coming)."""
    rec = Receiver(store, port=0, body_timeout=0.5)
    rec.start()
    try:
        tricklers.append(Trickler(rec.port, _headers(1000)))
        tricklers[0].start()
        assert tricklers[0].done().answer.startswith(b"HTTP/1.1 408 ")
        assert rec.health()["errors"] == {"408": 1}
    finally:
        rec.stop(timeout=1)


@pytest.mark.slow
def test_a_body_slower_than_the_minimum_rate_gets_a_408_long_before_the_body_deadline(
    store: str, tricklers: list[Trickler], monkeypatch: pytest.MonkeyPatch
):
    """Past its grace a body must average ``min_body_rate``: a client declaring 16 MiB and sending a
    byte at a time is answered in about the grace, not at the minute-long body deadline, while a
    real exporter's body is served (before: the trickler held its connection for the whole deadline)."""
    monkeypatch.setattr("harvester.intake._http.RATE_GRACE_S", 0.3)
    rec = Receiver(store, port=0, body_timeout=3600)  # the body deadline: never what answers here
    rec.start()
    try:
        tricklers.append(Trickler(rec.port, _headers(16 << 20), every=0.02))
        tricklers[0].start()
        assert tricklers[0].done(30).answer.startswith(b"HTTP/1.1 408 ")  # 30 s: only so that a broken rule fails
        exporter = OTLPSpanExporter(endpoint=rec.url, timeout=5)
        assert exporter.export(_finished_run()) == SpanExportResult.SUCCESS
        exporter.shutdown()
    finally:
        rec.stop(timeout=1)
    assert rec.health()["errors"] == {"408": 1}


@pytest.mark.slow
def test_without_a_minimum_rate_only_the_body_deadline_cuts_a_trickler(
    store: str, tricklers: list[Trickler], monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr("harvester.intake._http.RATE_GRACE_S", 0.3)
    rec = Receiver(store, port=0, body_timeout=30, min_body_rate=0)
    rec.start()
    try:
        tricklers.append(Trickler(rec.port, _headers(16 << 20), every=0.02))
        tricklers[0].start()
        time.sleep(1.5)
        assert tricklers[0].is_alive() and rec.health()["inflight_requests"] == 1
    finally:
        rec.stop(timeout=1)


def test_connections_are_limited_per_client_address(store: str, tricklers: list[Trickler]):
    """One address cannot take every connection slot: past its share it gets a retryable 503 while
    another address is still served (before: no per-address limit)."""
    rec = Receiver(store, port=0, max_client_connections=2)
    rec.start()
    try:
        held = [socket.create_connection(("127.0.0.1", rec.port), timeout=10) for _ in range(2)]
        _until(lambda: rec.health()["open_connections"] == 2)
        try:
            status, headers = _post(rec, b"{}")
            assert status == 503 and headers["Retry-After"] == "1"
        except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected):
            # The 503 is written as the connection is accepted; a request that arrives after the close
            # meets a reset instead. Either way the exporter retries: refused, never served.
            pass
        assert rec.health()["errors"].get("503", 0) >= 1
        other = socket.create_connection(("127.0.0.1", rec.port), timeout=10, source_address=("127.0.0.2", 0))
        other.sendall(_headers(0))
        assert other.recv(4096).startswith(b"HTTP/1.1 200 ")
        for sock in [*held, other]:
            sock.close()
    finally:
        rec.stop(timeout=1)


# -- memory ------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_gzip_body_is_charged_what_it_inflates_to(store: str, tricklers: list[Trickler]):
    """2 KB of gzip inflating to 2 MiB does not fit a 1 MiB budget another request holds part of
    (before: charged its 2 KB on the wire, so twenty of them held gigabytes)."""
    rec = Receiver(store, port=0, max_body_bytes=1 << 20, max_inflight_bytes=1 << 20)
    rec.start()
    try:
        tricklers.append(Trickler(rec.port, _headers(1000), every=1))  # holds part of the budget
        tricklers[0].start()
        _until(lambda: rec.health()["inflight_requests"] == 1)
        bomb = gzip.compress(b"\0" * (2 << 20))
        assert len(bomb) < 4096
        status, headers = _post(rec, bomb, PROTOBUF, headers={"Content-Encoding": "gzip"})
        assert status == 503 and headers["Retry-After"] == "1"
        assert _post(rec, _json(agent_trace("a" * 32)))[0] == 200  # a plain body that fits still does
    finally:
        rec.stop(timeout=1)


# -- a retried export --------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("store_process", [False, True], ids=["in-process", "store-process"])
def test_an_export_retried_after_its_trace_was_stored_merges_into_the_stored_run(store: str, store_process: bool):
    """An exporter resends a request after the trace completed: its part joins the stored run, as
    ``harvester ingest`` merges a trace split over files (before: the run was replaced by the part,
    its tool call lost)."""
    spans = agent_trace("a" * 32)
    rec = Receiver(store, port=0, idle_seconds=0.05, redact=False, store_process=store_process)
    rec.start()
    try:
        assert _post(rec, _json(spans))[0] == 200
        _until(lambda: rec.health()["traces_written"] == 1)
        (whole,) = stored(store)
        assert len(whole.calls) == 1
        no_tool = [s for s in spans if s.attributes["gen_ai.operation.name"] != "execute_tool"]
        assert _post(rec, _json(no_tool))[0] == 200  # the retried request: the run without its tool
        _until(lambda: rec.health()["completed_traces"] == 2)
    finally:
        rec.stop(timeout=1)
    (run,) = stored(store)
    assert run == whole
    with TraceStore(store) as ts:
        assert len(ts.spans(run.trace_id)) == len(spans)


@pytest.mark.slow
@pytest.mark.parametrize("store_process", [False, True], ids=["in-process", "store-process"])
def test_a_late_part_without_the_agent_span_merges_into_the_stored_trace(store: str, store_process: bool):
    """Another service's spans of a stored trace (the tool's HTTP backend, exported by its own batch
    processor after the run was written) hold no agent span and nothing a run is read from, so they
    wait out the orphan timeout; then, their trace being stored, they join it (before: dropped as
    no_agent_span). An orphan of a trace nobody stored is still dropped, and counted."""
    spans = agent_trace("b" * 32)
    backend = make_span("b" * 32, "4" * 16, "3" * 16, **{"http.request.method": "GET", "url.path": "/kb"})
    stray = make_span("c" * 32, "5" * 16, "6" * 16, **{"http.request.method": "GET"})
    rec = Receiver(store, port=0, idle_seconds=0.05, orphan_seconds=0.2, redact=False, store_process=store_process)
    rec.start()
    try:
        assert _post(rec, _json(spans))[0] == 200
        _until(lambda: rec.health()["traces_written"] == 1)
        (before,) = stored(store)
        assert _post(rec, _json([backend, stray]))[0] == 200
        _until(lambda: rec.health()["completed_traces"] == 2 and "no_agent_span" in rec.health()["dropped_spans"])
        health = rec.health()
    finally:
        rec.stop(timeout=1)
    (run,) = stored(store)
    assert run == before
    with TraceStore(store) as ts:
        assert {s.span_id for s in ts.spans(run.trace_id)} == {s.span_id for s in spans} | {"4" * 16}
    assert health["dropped_spans"] == {"no_agent_span": 1}


# -- the store process -------------------------------------------------------------------------
def test_a_store_the_store_process_cannot_open_fails_at_construction(tmp_path: Path):
    with pytest.raises(StoreError):
        Receiver(str(tmp_path), port=0, store_process=True)  # a directory, not a store


@pytest.mark.slow
def test_a_store_process_started_without_fork_gets_the_redaction_pickled(store: str, monkeypatch):
    """With threads running, the store process is not forked (forkserver): its redactor travels pickled."""
    import harvester.intake._store_process as store_process

    monkeypatch.setattr(store_process, "start_method", lambda: "forkserver")
    rec = Receiver(store, port=0, idle_seconds=0.05, store_process=True)
    rec.start()
    try:
        assert _post(rec, _json(agent_trace("f" * 32, secret="jane@example.com")))[0] == 200
        _until(lambda: rec.health()["traces_written"] == 1)
    finally:
        rec.stop(timeout=5)
    (run,) = stored(store)
    assert "jane@example.com" not in str(run.model_dump()) and "<email:" in str(run.model_dump())


@pytest.mark.slow
def test_a_dead_store_process_counts_what_it_loses_and_never_hangs(store: str):
    rec = Receiver(store, port=0, idle_seconds=0.05, redact=False, store_process=True)
    rec.start()
    try:
        assert _post(rec, _json(agent_trace("d" * 32)))[0] == 200
        _until(lambda: rec.health()["traces_written"] == 1)
        os.kill(rec.writer.pid, signal.SIGKILL)
        rec.writer._proc.join(5)
        assert _post(rec, _json(agent_trace("e" * 32)))[0] == 200  # still answering
        _until(lambda: rec.health()["dropped_runs"].get("store_process") == 1)
        assert "store process died" in rec.health()["status"]
        assert _get(f"http://127.0.0.1:{rec.port}/healthz", {}) == 503  # a probe restarts it (before: "ok")
    finally:
        _returns(rec.stop, timeout=5)
    assert [r.trace_id for r in stored(store)] == ["d" * 32]


def test_traces_in_the_pipe_when_the_store_process_dies_are_counted_lost(store: str):
    """Handed over, never read: a child stopped and then killed took them with it (before: uncounted)."""
    rec = Receiver(store, port=0, idle_seconds=0.05, redact=False, store_process=True)
    rec.start()
    try:
        os.kill(rec.writer.pid, signal.SIGSTOP)
        for i in range(3):
            assert _post(rec, _json(agent_trace(f"{i + 1:032x}")))[0] == 200
        _until(lambda: rec.health()["completed_traces"] == 3)  # handed to the stopped child's pipe
        os.kill(rec.writer.pid, signal.SIGKILL)
        rec.writer._proc.join(5)
        assert rec.health()["dropped_runs"].get("store_process") == 3
    finally:
        rec.stop(timeout=5)
    assert stored(store) == []


@pytest.mark.slow
def test_stop_is_bounded_when_the_store_process_is_stuck(store: str):
    """Its last word used to wait on a full pipe for ever: a child that reads nothing more."""
    rec = Receiver(store, port=0, idle_seconds=0.05, redact=False, store_process=True)
    rec.start()
    os.kill(rec.writer.pid, signal.SIGSTOP)
    big = "x" * 200_000
    for i in range(12):  # more than the pipe holds
        assert _post(rec, _json(agent_trace(f"{i + 1:032x}", tool_result=big)))[0] == 200
    _returns(rec.stop, timeout=1, store_timeout=2)
    assert not rec.writer._proc.is_alive()
    assert rec.health()["dropped_runs"]["store_process"] == 12


# -- the token ---------------------------------------------------------------------------------
def _get(url: str, headers: dict[str, str]) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_healthz_needs_the_token_when_one_is_set(store: str):
    """The counters say what is sent and by how many: behind the token like the traces (before: open)."""
    rec = Receiver(store, port=0, token="s3cret")
    rec.start()
    try:
        url = f"http://127.0.0.1:{rec.port}/healthz"
        assert _get(url, {}) == 401
        assert _get(url, {"Authorization": "Bearer wrong"}) == 401
        assert _get(url, {"Authorization": "Bearer s3cret"}) == 200
    finally:
        rec.stop(timeout=1)


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "Bearer"])
def test_the_bearer_scheme_is_case_insensitive(store: str, scheme: str):
    """RFC 9110: an auth scheme is case-insensitive (before: 'bearer' was refused)."""
    rec = Receiver(store, port=0, token="s3cret")
    rec.start()
    try:
        assert _post(rec, b"{}", headers={"Authorization": f"{scheme} s3cret"})[0] == 200
        assert _post(rec, b"{}", headers={"Authorization": f"{scheme}s3cret"})[0] == 401
    finally:
        rec.stop(timeout=1)


def test_a_missing_token_is_refused_before_the_body_is_read(store: str):
    """A 401 comes at once, with the declared body never sent: nothing was reserved or read for it."""
    rec = Receiver(store, port=0, token="s3cret")
    rec.start()
    try:
        with socket.create_connection(("127.0.0.1", rec.port), timeout=10) as sock:
            sock.sendall(_headers(16 << 20))
            assert sock.recv(4096).startswith(b"HTTP/1.1 401 ")
        assert rec.health()["inflight_requests"] == 0
    finally:
        rec.stop(timeout=1)


# -- the exposure warning ----------------------------------------------------------------------
@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.9", "::1", "[::1]", "::ffff:127.0.0.1", "localhost"])
def test_no_exposure_warning_on_loopback(host: str):
    assert exposure_warning(host, None) is None


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "10.0.0.5", "127.example.com", "127.0.0.1.nip.io"])
def test_exposure_warning_for_anything_else_without_a_token(host: str):
    """Parsed as an address: a name that starts with '127.' is not loopback (before: trusted)."""
    warning = exposure_warning(host, None)
    assert warning is not None and "--token" in warning
    assert exposure_warning(host, "s3cret") is None


def test_open_traces_are_bounded_in_bytes_and_healthz_says_how_many(store: str):
    rec = Receiver(store, port=0, max_open_bytes=12_345)
    rec.start()
    try:
        assert rec.assembler.max_bytes == 12_345  # the receiver's bound reaches the assembler
        assert rec.health()["open_bytes"] == 0
    finally:
        rec.stop(timeout=1)
