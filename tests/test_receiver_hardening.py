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
import subprocess
import sys
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


class Swarm:
    """``n`` clients trickling headers without a token, each connecting again as soon as the server
    closes it or answers (an attacker who keeps every slot it can). ``closed``: connections the server
    closed without a word; ``answered``: those it answered (a 503 when no slot was free)."""

    def __init__(self, port: int, n: int) -> None:
        self.port, self.closed, self.answered = port, 0, 0
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self.threads = [threading.Thread(target=self._client, daemon=True) for _ in range(n)]
        for t in self.threads:
            t.start()

    def _client(self) -> None:
        padding = _headers(10, "X-Padding: " + "x" * 10_000 + "\r\n")
        while not self.stop.is_set():
            trickler = Trickler(self.port, b"P", padding[1:], every=0.05)
            trickler.stop = self.stop
            trickler.run()
            with self._lock:
                if trickler.answer:
                    self.answered += 1
                elif trickler.closed:
                    self.closed += 1
            self.stop.wait(0.05)

    def end(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(5)


@pytest.mark.slow
def test_sixty_header_tricklers_without_the_token_leave_a_real_exporter_with_it_served(store: str):
    """Sixty clients trickle headers without a token and reconnect as soon as they are dropped, so
    they hold every slot of their address; an exporter with the token, from the same address, still
    gets at least 18 of 20 exports through: a connection that has not sent a whole request with the
    token yields its slot to a newcomer (before: 3 of 20, the slots held until the header deadline)."""
    rec = Receiver(store, port=0, token="s3cret", idle_seconds=60)
    rec.start()
    swarm = Swarm(rec.port, 60)
    try:
        _until(lambda: rec.health()["open_connections"] >= rec.max_client_connections)
        exporter = OTLPSpanExporter(endpoint=rec.url, headers={"Authorization": "Bearer s3cret"}, timeout=1)
        results = [exporter.export(_finished_run()) for _ in range(20)]
        exporter.shutdown()
    finally:
        swarm.end()
        rec.stop(timeout=1)
    ok = results.count(SpanExportResult.SUCCESS)
    print(f"{ok} of 20 exports succeeded beside 60 header tricklers")
    assert ok >= 18, f"{ok} of 20 exports succeeded beside 60 header tricklers"
    assert swarm.closed >= 1  # tricklers were dropped without a word
    assert rec.health()["errors"].get("401", 0) == 0  # no trickler ever finished its headers


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


def _proven(port: int, source: str = "127.0.0.1") -> socket.socket:
    """A keep-alive connection that has sent a whole request: it keeps its slot."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(source, 0))
    sock.sendall(_headers(0))
    assert sock.recv(4096).startswith(b"HTTP/1.1 200 ")
    return sock


def test_connections_are_limited_per_client_address(store: str):
    """One address cannot take every connection slot: past its share it gets a retryable 503 while
    another address is still served (before: no per-address limit)."""
    rec = Receiver(store, port=0, max_client_connections=2)
    rec.start()
    try:
        held = [_proven(rec.port) for _ in range(2)]
        status, headers = _post(rec, b"{}")
        assert status == 503 and headers["Retry-After"] == "1"
        assert rec.health()["errors"] == {"503": 1}
        other = _proven(rec.port, "127.0.0.2")
        for sock in [*held, other]:
            sock.close()
    finally:
        rec.stop(timeout=1)


def test_a_connection_that_has_sent_no_request_yields_its_slot_to_a_newcomer(store: str):
    """Connections that never send a whole request (with the token) hold every slot of their address
    for nothing: a newcomer takes the oldest one's, which is closed (before: the newcomer got a 503)."""
    rec = Receiver(store, port=0, token="s3cret", max_client_connections=2)
    rec.start()
    try:
        held = [socket.create_connection(("127.0.0.1", rec.port), timeout=10) for _ in range(2)]
        _until(lambda: rec.health()["open_connections"] == 2)
        assert _post(rec, b"{}", headers={"Authorization": "Bearer s3cret"})[0] == 200
        assert held[0].recv(4096) == b""  # the oldest, closed without a word
        assert rec.health()["errors"] == {"evicted": 1}
        for sock in held:
            sock.close()
    finally:
        rec.stop(timeout=1)


@pytest.mark.slow
def test_a_connection_that_sends_nothing_is_closed_at_the_header_deadline(store: str):
    """A new connection's first headers are due from when it was accepted, not from its first byte
    (before: a silent connection held its slot for the 30 s a keep-alive connection may idle)."""
    rec = Receiver(store, port=0, header_timeout=0.5)
    rec.start()
    try:
        with socket.create_connection(("127.0.0.1", rec.port), timeout=10) as silent:
            assert silent.recv(4096) == b""
        _until(lambda: rec.health()["errors"].get("header_timeout") == 1)
    finally:
        rec.stop(timeout=1)


# -- framing ------------------------------------------------------------------------------------
def _framed(rec: Receiver, framing: str, body: bytes) -> bytes:
    """The answer to a POST framed by ``framing``: read until the server closes, or a success kept open."""
    with socket.create_connection(("127.0.0.1", rec.port), timeout=10) as sock:
        head = f"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: {JSON}\r\n{framing}\r\n"
        sock.sendall(head.encode() + body)
        answer = b""
        while chunk := sock.recv(4096):  # until the server closes
            answer += chunk
            if b"Connection: close" not in answer and answer.endswith(b"{}"):
                break  # a success, the connection kept open
        return answer


@pytest.mark.parametrize(
    "framing",
    [
        "Content-Length: 2\r\nContent-Length: 12\r\n",
        "Content-Length: 2, 12\r\n",
        "Content-Length: +2\r\n",
        "Transfer-Encoding: chunked, identity\r\n",
        "Transfer-Encoding: identity\r\nContent-Length: 2\r\n",
        "Transfer-Encoding: gzip\r\n",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
        "Transfer-Encoding: chunked\r\nContent-Length: 2\r\n",
    ],
    ids=[
        "two-lengths",
        "listed-lengths",
        "signed-length",
        "chunked-identity",
        "identity",
        "gzip",
        "chunked-twice",
        "both",
    ],
)
def test_framing_two_parsers_could_read_differently_is_a_400(
    store: str, framing: str, caplog: pytest.LogCaptureFixture
):
    """Request smuggling: a proxy and the receiver must read one request from the bytes, so differing
    Content-Length values and any Transfer-Encoding but exactly ``chunked`` are refused, the connection
    closed after the answer, and at most one line logged (before: the first length or the chunked
    body was taken, 200)."""
    rec = Receiver(store, port=0, idle_seconds=0.05)
    rec.start()
    try:
        answer = _framed(rec, framing, b"2\r\n{}\r\n0\r\n\r\n" if "chunked" in framing else b"{}")
        assert answer.startswith(b"HTTP/1.1 400 ") and b"Connection: close" in answer
        health = rec.health()
    finally:
        rec.stop(timeout=1)
    assert health["errors"] == {"400": 1} and health["export_requests"] == 0
    assert len([r for r in caplog.records if r.name.startswith("harvester")]) <= 1


@pytest.mark.parametrize(
    "framing, body",
    [
        ("Content-Length: 2\r\nContent-Length: 2\r\n", b"{}"),
        ("Content-Length: 2, 2\r\n", b"{}"),
        ("Transfer-Encoding: Chunked\r\n", b"2\r\n{}\r\n0\r\n\r\n"),
    ],
    ids=["same-length-twice", "same-length-listed", "chunked"],
)
def test_framing_only_one_reading_allows_is_served(store: str, framing: str, body: bytes):
    """RFC 9110 lets repeated identical lengths stand; a coding's name is case-insensitive."""
    rec = Receiver(store, port=0)
    rec.start()
    try:
        assert _framed(rec, framing, body).startswith(b"HTTP/1.1 200 ")
        assert rec.health()["errors"] == {}
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


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(child) for child in f.read().split()]


def _running(pid: int) -> bool:
    """Alive and not a zombie (a dead child its new parent has not reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/task"), reason="finds the store process in /proc (Linux)")
def test_the_store_process_ends_when_serve_is_killed_with_sigkill(store: str):
    """``harvester serve`` killed with SIGKILL cannot stop its store process: the child sees its pipe
    end and leaves, its store whole (before: it inherited the parent's end of the pipe, so the pipe
    never ended, and it lived on for minutes holding the store, ignoring SIGTERM)."""
    cmd = [sys.executable, "-u", "-c", "from harvester.cli import main; main()", "serve", "--port", "0"]
    serve = subprocess.Popen(
        [*cmd, "--store", store, "--idle-seconds", "0.05"],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    children: list[int] = []
    try:
        line = serve.stdout.readline()  # type: ignore[union-attr]
        assert line.startswith("listening on http://127.0.0.1:"), line
        req = urllib.request.Request(
            line.split()[-1], data=_json(agent_trace("a" * 32)), headers={"Content-Type": JSON}
        )
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200
        assert serve.stdout.readline().startswith("completed 1 trace")  # type: ignore[union-attr]
        (child,) = children = _children(serve.pid)
        serve.kill()
        serve.wait()
        _until(lambda: not _running(child), deadline=2.0)
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()
        for pid in children:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
    # The store opens and reads, whole: the trace handed over before the kill was written on the way out.
    assert [run.trace_id for run in stored(store)] == ["a" * 32]


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
