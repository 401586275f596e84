"""``harvester serve``: the OTLP/HTTP receiver, fed by the real OTLP exporter and by plain HTTP clients.

Every server binds 127.0.0.1 on an ephemeral port and is stopped by its test. Nothing waits on a
clock for an assertion: a run is read after ``stop()``, which completes every open trace.
"""

from __future__ import annotations

import gzip
import http.client
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest
from google.rpc.status_pb2 import Status
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from harvester.conventions import runs_from_spans
from harvester.instrument import agent_run, tool
from harvester.intake import HarvestingSpanProcessor, Receiver, decode_protobuf
from harvester.intake import IdleAssembler as TraceAssembler
from harvester.model import Run
from harvester.spans import OtlpStats, SpanData, from_readable, to_otlp
from harvester.store import TraceStore
from tests.frameworks import langchain_agent, pydantic_ai_agent

PROTOBUF = "application/x-protobuf"


@pytest.fixture
def store(tmp_path: Path) -> str:
    return str(tmp_path / "traces.db")


@pytest.fixture
def receiver(store: str) -> Iterator[Receiver]:
    rec = Receiver(store, port=0, idle_seconds=60, redact=False)
    rec.start()
    yield rec
    rec.stop(timeout=5)


def _stored(store: str) -> list[Run]:
    with TraceStore(store) as ts:
        return list(ts.runs(newest_first=False))


# -- spans to send ----------------------------------------------------------------------------
@tool
def kb_search(query: str) -> str:
    return "Refunds are accepted within 30 days of delivery."


def _agent_spans(n_runs: int = 1, prompt: str = "Can I still return order A1001?") -> list[ReadableSpan]:
    """Finished spans of ``n_runs`` harvester-instrumented runs (agent, chat, tool, chat)."""
    provider = TracerProvider(resource=Resource({"service.name": "receiver-tests"}))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    for i in range(n_runs):
        with agent_run("support_agent", f"{prompt} #{i}", model="m1", tracer_provider=provider) as run:
            run.model_call(
                "m1",
                input_tokens=10,
                output_tokens=2,
                tool_calls=[{"name": "kb_search", "arguments": {"query": "refund policy"}}],
            )
            kb_search(query="refund policy")
            run.model_call("m1", input_tokens=20, output_tokens=4, text="Yes, within 30 days.")
            run.finish("Yes, within 30 days.")
    return list(memory.get_finished_spans())


def _protobuf(spans: list[ReadableSpan]) -> bytes:
    return encode_spans(spans).SerializeToString()


def _json(spans: list[ReadableSpan]) -> bytes:
    return orjson.dumps(to_otlp(from_readable(s) for s in spans))


def _post(
    rec: Receiver,
    body: bytes,
    content_type: str = PROTOBUF,
    path: str = "/v1/traces",
    method: str = "POST",
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes, dict[str, str]]:
    conn = http.client.HTTPConnection("127.0.0.1", rec.port, timeout=10)
    try:
        conn.request(method, path, body=body, headers={"Content-Type": content_type, **(headers or {})})
        resp = conn.getresponse()
        return resp.status, resp.read(), dict(resp.getheaders())
    finally:
        conn.close()


def _until(condition: Any, deadline: float = 20.0) -> None:
    """Wait for something another thread does; the deadline only stops a broken test from hanging."""
    end = time.monotonic() + deadline
    while not condition():
        assert time.monotonic() < end, "condition never became true"
        time.sleep(0.01)


# -- the real exporter against the in-process processor ---------------------------------------
def _stored_with_spans(store: str) -> dict[tuple[str, str], tuple[dict, list[dict]]]:
    with TraceStore(store) as ts:
        return {
            (r.trace_id, r.run_id): (
                r.model_dump(mode="json"),
                sorted((s.to_dict() for s in ts.spans(r.trace_id)), key=lambda d: d["span_id"]),
            )
            for r in ts.runs()
        }


@pytest.mark.slow
def test_real_exporter_stores_what_the_in_process_processor_stores(tmp_path: Path):
    """Real frameworks and harvester's own spans, through OTLPSpanExporter and through the hook: same store."""
    remote, local = str(tmp_path / "remote.db"), str(tmp_path / "local.db")
    # as harvester serve runs it (storing in its own process); defaults otherwise: redaction on, as in the hook
    rec = Receiver(remote, port=0, idle_seconds=60, store_process=True)
    rec.start()
    try:
        provider = TracerProvider(resource=Resource({"service.name": "receiver-tests"}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=rec.url, timeout=10)))
        provider.add_span_processor(HarvestingSpanProcessor(local))
        for scenario in pydantic_ai_agent.SCENARIOS:
            pydantic_ai_agent.run_scenario(scenario, provider)
        for scenario in langchain_agent.SCENARIOS:
            for instrumentor in langchain_agent.INSTRUMENTORS:
                langchain_agent.run_scenario(scenario, provider, instrumentor=instrumentor)
        with agent_run(
            "support_agent", "Email me at jane@example.com about A1001", model="m1", tracer_provider=provider
        ) as run:
            run.model_call("m1", tool_calls=[{"name": "kb_search", "arguments": {"query": "refund policy"}}])
            kb_search(query="refund policy")
            run.finish("Sent to jane@example.com.")
        provider.shutdown()  # exports every batch, writes every in-process run
    finally:
        rec.stop()
    over_http, in_process = _stored_with_spans(remote), _stored_with_spans(local)
    assert len(in_process) == 4 + 1 + 8 + 2 + 1  # a denied run pauses and resumes: two traces
    assert over_http == in_process
    assert "jane@example.com" not in str(over_http)  # redacted on the way in, like the hook
    assert rec.health()["rejected_spans"] == 0


# -- the assembler ----------------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _span(trace: int, span: int, *, agent: bool = False, parent: int | None = None) -> SpanData:
    attrs = {"gen_ai.operation.name": "invoke_agent" if agent else "chat"}
    return SpanData(
        trace_id=f"{trace:032x}",
        span_id=f"{span:016x}",
        parent_id=f"{parent:016x}" if parent else None,
        name="s",
        attributes=attrs,
    )


def test_assembler_completes_a_trace_once_its_agent_span_is_in_and_it_is_idle():
    clock = Clock()
    asm = TraceAssembler(idle_seconds=2, orphan_seconds=10, clock=clock)
    asm.add([_span(1, 2, parent=1)])
    clock.now = 5
    assert asm.take_complete() == []  # no agent span yet: not a run, not yet an orphan
    asm.add([_span(1, 1, agent=True)])
    clock.now = 6
    assert asm.take_complete() == []  # busy one second ago
    clock.now = 7
    (trace,) = asm.take_complete()
    assert sorted(s.span_id for s in trace) == [f"{1:016x}", f"{2:016x}"]
    assert asm.open_traces == 0 and asm.open_spans == 0


def test_assembler_keeps_an_openinference_chain_trace_for_the_readers():
    """An unnamed LangGraph agent under OpenInference has no AGENT span, only CHAINs: still a run."""
    spans = [from_readable(s) for s in langchain_agent.run_scenario("happy", agent_name=None)]
    clock = Clock()
    asm = TraceAssembler(idle_seconds=1, orphan_seconds=10, clock=clock)
    asm.add(spans)
    clock.now = 2
    assert asm.take_complete() == []  # a CHAIN ends early (a graph node): only the orphan timeout is safe
    clock.now = 11
    (trace,) = asm.take_complete()
    (run,) = runs_from_spans(trace)
    assert run.trajectory() == ["kb_search", "get_order"] and run.stop == "answered"


def test_graph_nodes_ending_early_never_complete_a_run_before_its_agent_span():
    """OpenInference CHAIN spans (LangGraph nodes, smolagents steps, openai-agents turns) end long before
    the agent span; an exporter batch holding only them must not be read as a finished run."""
    spans = [from_readable(s) for s in langchain_agent.run_scenario("happy")]
    agent_ids = {s.span_id for s in spans if s.attributes.get("openinference.span.kind") == "AGENT"}
    first = [s for s in spans if s.span_id not in agent_ids]
    clock = Clock()
    asm = TraceAssembler(idle_seconds=1, orphan_seconds=10, clock=clock)
    asm.add(first)
    clock.now = 5
    assert asm.take_complete() == []
    asm.add([s for s in spans if s.span_id in agent_ids])
    clock.now = 7
    (trace,) = asm.take_complete()
    (run,) = runs_from_spans(trace)
    assert run.agent == "support_agent" and run.trajectory() == ["kb_search", "get_order"]


def test_assembler_drops_orphans_and_duplicates_and_counts_them():
    clock = Clock()
    asm = TraceAssembler(idle_seconds=1, orphan_seconds=10, clock=clock)
    asm.add([_span(1, 1), _span(1, 2), _span(1, 2)])
    clock.now = 10
    assert asm.take_complete() == []
    assert asm.dropped == {"duplicate": 1, "no_agent_span": 2}


def test_assembler_bounds_evict_least_recently_active_first():
    clock = Clock()
    asm = TraceAssembler(idle_seconds=1, max_traces=2, max_spans=100, clock=clock)
    asm.add([_span(1, 1, agent=True)])
    clock.now = 1
    asm.add([_span(2, 1)])
    clock.now = 2
    asm.add([_span(1, 2)])  # trace 1 active again: trace 2 is now the oldest
    early = asm.add([_span(3, 1)])
    assert early == [] and asm.dropped == {"evicted": 1} and asm.open_traces == 2
    early = asm.add([_span(4, 1), _span(4, 2)])  # trace 1 goes, complete with its agent span
    assert [len(t) for t in early] == [2] and asm.completed_early == 1
    asm = TraceAssembler(idle_seconds=1, max_traces=100, max_spans=3, clock=clock)
    asm.add([_span(1, 1), _span(1, 2)])
    asm.add([_span(2, 1), _span(2, 2)])
    assert asm.open_spans == 2 and asm.dropped == {"evicted": 2}


def test_take_all_completes_every_agent_trace_and_drops_the_rest():
    asm = TraceAssembler(idle_seconds=60)
    asm.add([_span(1, 1, agent=True), _span(2, 1)])
    assert [len(t) for t in asm.take_all()] == [1]
    assert asm.dropped == {"no_agent_span": 1} and asm.open_traces == 0


# -- decoding ---------------------------------------------------------------------------------
def test_protobuf_decodes_to_the_same_span_data_as_the_sdk():
    spans = _agent_spans()
    decoded = decode_protobuf(_protobuf(spans), OtlpStats())
    assert [d.to_dict() for d in decoded] == [from_readable(s).to_dict() for s in spans]


def test_protobuf_any_values_of_every_kind():
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = b"\x01" * 16, b"\x02" * 8, "s"
    values = {"s": "x", "b": True, "i": 7, "d": 1.5, "arr": [1, 2], "kv": {"k": "v"}, "bytes": "AAE="}
    for key in values:
        span.attributes.add(key=key)
    attrs = {kv.key: kv.value for kv in span.attributes}
    attrs["s"].string_value = "x"
    attrs["b"].bool_value = True
    attrs["i"].int_value = 7
    attrs["d"].double_value = 1.5
    attrs["arr"].array_value.values.add().int_value = 1
    attrs["arr"].array_value.values.add().int_value = 2
    attrs["kv"].kvlist_value.values.add(key="k").value.string_value = "v"
    attrs["bytes"].bytes_value = b"\x00\x01"
    span.attributes.add(key="empty")
    (decoded,) = decode_protobuf(request.SerializeToString(), OtlpStats())
    assert decoded.attributes == {**values, "empty": None}
    assert decoded.trace_id == "01" * 16 and decoded.span_id == "02" * 8 and decoded.parent_id is None


# -- over HTTP --------------------------------------------------------------------------------
def test_json_body_from_a_plain_http_client(receiver: Receiver, store: str):
    spans = _agent_spans()
    req = urllib.request.Request(
        receiver.url, data=_json(spans), method="POST", headers={"Content-Type": "application/json; charset=utf-8"}
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200 and resp.headers["Content-Type"] == "application/json"
        assert orjson.loads(resp.read()) == {}
    receiver.stop()
    (run,) = _stored(store)
    assert run.agent == "support_agent" and run.trajectory() == ["kb_search"] and run.stop == "answered"


def _post_chunked(rec: Receiver, pieces: list[bytes], headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """A body sent with Transfer-Encoding: chunked (proxies, streaming clients), no Content-Length."""
    conn = http.client.HTTPConnection("127.0.0.1", rec.port, timeout=10)
    try:
        conn.request(
            "POST",
            "/v1/traces",
            body=iter(pieces),
            encode_chunked=True,
            headers={"Content-Type": PROTOBUF, "Transfer-Encoding": "chunked", **(headers or {})},
        )
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_chunked_bodies(store: str):
    rec = Receiver(store, port=0, max_body_bytes=100_000)
    rec.start()
    try:
        body = _protobuf(_agent_spans())
        thirds = [body[: len(body) // 3], body[len(body) // 3 : 2 * len(body) // 3], body[2 * len(body) // 3 :]]
        assert _post_chunked(rec, thirds)[0] == 200
        other = _protobuf(_agent_spans(prompt="Where is order A1002?"))
        assert _post_chunked(rec, [gzip.compress(other)], {"Content-Encoding": "gzip"})[0] == 200
        # Refused on the chunk-size line, before its data: send no data, so no write races the close.
        with socket.create_connection(("127.0.0.1", rec.port), timeout=10) as sock:
            sock.sendall(
                b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n%x\r\n" % 200_000
            )
            assert sock.recv(4096).startswith(b"HTTP/1.1 413")
    finally:
        rec.stop()
    assert len(_stored(store)) == 2


def test_malformed_chunked_body_is_a_400(store: str):
    rec = Receiver(store, port=0)
    rec.start()
    try:
        with socket.create_connection(("127.0.0.1", rec.port), timeout=10) as sock:
            sock.sendall(
                b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
                b"Transfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n"
            )
            assert sock.recv(4096).startswith(b"HTTP/1.1 400")
    finally:
        rec.stop()
    assert _stored(store) == []


def test_gzip_bodies_protobuf_and_json(receiver: Receiver, store: str):
    spans = _agent_spans(2)
    first = [s for s in spans if s.context.trace_id == spans[0].context.trace_id]
    second = [s for s in spans if s not in first]
    status, body, _ = _post(receiver, gzip.compress(_protobuf(first)), headers={"Content-Encoding": "gzip"})
    assert status == 200 and ExportTraceServiceResponse.FromString(body) == ExportTraceServiceResponse()
    status, body, _ = _post(
        receiver, gzip.compress(_json(second)), "application/json", headers={"Content-Encoding": "gzip"}
    )
    assert status == 200 and body == b"{}"
    receiver.stop()
    assert sorted(r.prompt for r in _stored(store)) == [
        "Can I still return order A1001? #0",
        "Can I still return order A1001? #1",
    ]


def test_a_trace_split_over_three_requests_out_of_order(receiver: Receiver, store: str):
    spans = _agent_spans()
    root = next(s for s in spans if s.parent is None)
    children = [s for s in spans if s.parent is not None]
    for part in ([root], children[2:], children[:2]):  # the agent span first, then the rest backwards
        assert _post(receiver, _protobuf(part))[0] == 200
    assert receiver.health()["open_traces"] == 1
    receiver.stop()
    (run,) = _stored(store)
    (whole,) = runs_from_spans(spans)
    assert run == whole


def test_a_connection_killed_mid_body_stores_nothing_and_the_server_lives_on(receiver: Receiver, store: str):
    body = _protobuf(_agent_spans())
    with socket.create_connection(("127.0.0.1", receiver.port), timeout=10) as raw:
        raw.sendall(
            f"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: {PROTOBUF}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body[: len(body) // 2]
        )
    _until(lambda: receiver.health()["errors"] == {"aborted": 1})
    assert _post(receiver, _protobuf([]))[0] == 200  # still serving
    receiver.stop()
    assert _stored(store) == [] and receiver.health()["received_spans"] == 0


@pytest.mark.slow
def test_a_thousand_concurrent_small_requests(receiver: Receiver, store: str):
    spans = _agent_spans(1000)
    by_trace: dict[int, list[ReadableSpan]] = {}
    for s in spans:
        by_trace.setdefault(s.context.trace_id, []).append(s)
    bodies = [_protobuf(group) for group in by_trace.values()]
    with ThreadPoolExecutor(max_workers=32) as pool:
        statuses = list(pool.map(lambda b: _post(receiver, b)[0], bodies))
    assert statuses == [200] * 1000
    receiver.stop()
    health = receiver.health()
    assert health["export_requests"] == 1000 and health["received_spans"] == len(spans)
    assert health["traces_written"] == 1000 and len(_stored(store)) == 1000
    assert health["dropped_spans"] == {} and health["dropped_runs"] == {}


@pytest.mark.parametrize(
    "case",
    [
        "too_big",
        "gzip_bomb",
        "bad_protobuf",
        "bad_json",
        "not_otlp_json",
        "bad_gzip",
        "content_type",
        "content_encoding",
        "wrong_path",
        "wrong_method",
        "health_method",
    ],
)
def test_error_statuses(store: str, case: str):
    rec = Receiver(store, port=0, max_body_bytes=1000)
    rec.start()
    try:
        ctype, path, method, headers, body = PROTOBUF, "/v1/traces", "POST", {}, b""
        expected = 400
        if case == "too_big":
            body, expected = b"x" * 1001, 413
        elif case == "gzip_bomb":
            body, headers, expected = gzip.compress(b"\0" * 10_000), {"Content-Encoding": "gzip"}, 413
        elif case == "bad_protobuf":
            body = b"\xff\xff\xff"
        elif case == "bad_json":
            ctype, body = "application/json", b"{not json"
        elif case == "not_otlp_json":
            ctype, body = "application/json", b'{"trace_id": "abc"}'
        elif case == "bad_gzip":
            body, headers = b"\x1f\x8bnot gzip", {"Content-Encoding": "gzip"}
        elif case == "content_type":
            ctype, body, expected = "text/plain", b"hello", 415
        elif case == "content_encoding":
            body, headers, expected = b"x", {"Content-Encoding": "br"}, 415
        elif case == "wrong_path":
            path, expected = "/v1/metrics", 404
        elif case == "wrong_method":
            method, expected = "GET", 405
        elif case == "health_method":
            path, method, expected = "/healthz", "POST", 405
        status, reply, resp_headers = _post(rec, body, ctype, path, method, headers)
        assert status == expected
        if ctype == PROTOBUF:  # google.rpc.Status in the request's encoding
            assert resp_headers["Content-Type"] == PROTOBUF
            error = Status.FromString(reply)
            code, message = error.code, error.message
        else:
            assert resp_headers["Content-Type"] == "application/json"
            code, message = orjson.loads(reply).values()
        assert code != 0 and message
        assert rec.health()["errors"] == {str(expected): 1}
    finally:
        rec.stop()
    assert _stored(store) == []


def test_bearer_token(store: str):
    rec = Receiver(store, port=0, token="s3cret", idle_seconds=60)
    rec.start()
    try:
        body = _protobuf(_agent_spans())
        assert _post(rec, body)[0] == 401
        status, _, headers = _post(rec, body, headers={"Authorization": "Bearer wrong"})
        assert status == 401 and headers["WWW-Authenticate"] == "Bearer"
        assert _post(rec, body, headers={"Authorization": "Bearer s3cret"})[0] == 200
    finally:
        rec.stop()
    assert len(_stored(store)) == 1 and rec.health()["errors"] == {"401": 2}


def test_partial_success_names_the_rejected_spans(receiver: Receiver, store: str):
    request = encode_spans(_agent_spans())
    bad = request.resource_spans[0].scope_spans[0].spans.add()
    bad.trace_id, bad.span_id, bad.name = b"\x01" * 3, b"\x02" * 8, "broken"
    status, body, _ = _post(receiver, request.SerializeToString())
    assert status == 200
    partial = ExportTraceServiceResponse.FromString(body).partial_success
    assert partial.rejected_spans == 1 and "trace_id" in partial.error_message
    doc = to_otlp(from_readable(s) for s in _agent_spans(prompt="second"))
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"].append({"traceId": "zz", "spanId": "00", "name": "broken"})
    status, body, _ = _post(receiver, orjson.dumps(doc), "application/json")
    assert status == 200
    assert orjson.loads(body) == {
        "partialSuccess": {"rejectedSpans": "1", "errorMessage": "malformed span: bad traceId (1)"}
    }
    receiver.stop()
    assert len(_stored(store)) == 2 and receiver.health()["rejected_spans"] == 2


def test_healthz_counts(receiver: Receiver):
    spans = _agent_spans()
    _post(receiver, _protobuf([s for s in spans if s.parent is not None]))
    _post(receiver, b"junk")
    with urllib.request.urlopen(f"http://127.0.0.1:{receiver.port}/healthz", timeout=10) as resp:
        health = orjson.loads(resp.read())
    assert health["status"] == "ok" and health["received_spans"] == len(spans) - 1
    assert health["open_traces"] == 1 and health["open_spans"] == len(spans) - 1
    assert health["errors"] == {"400": 1} and health["runs_written"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("stop", ["sigterm", "ctrl-c to the group"])
def test_sigterm_stores_the_open_trace_then_exits_0(store: str, stop: str):
    """SIGTERM to serve, or Ctrl-C to its whole process group (its store process included): the open
    trace is completed, handed to the store process and written before it exits."""
    cmd = [
        sys.executable,
        "-u",
        "-c",
        "from harvester.cli import main; main()",
        "serve",
        "--port",
        "0",
        "--store",
        store,
        "--idle-seconds",
        "600",
    ]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
        start_new_session=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("listening on http://127.0.0.1:"), line + proc.stderr.read()
        url = line.split()[-1]
        req = urllib.request.Request(url, data=_protobuf(_agent_spans()), headers={"Content-Type": PROTOBUF})
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200
        with urllib.request.urlopen(url.replace("/v1/traces", "/healthz"), timeout=10) as resp:
            assert orjson.loads(resp.read())["open_traces"] == 1  # idle for 600 s: only SIGTERM completes it
        if stop == "sigterm":
            proc.send_signal(signal.SIGTERM)
        else:
            os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "stored 1 trace" in out and "stored 1 traces" not in out
    (run,) = _stored(store)
    assert run.agent == "support_agent" and run.stop == "answered"


def test_over_capacity_is_a_retryable_503(store: str):
    """Connections and bodies in flight are capped; the exporter is told to come back (503, Retry-After)."""
    rec = Receiver(store, port=0, max_connections=1, max_body_bytes=1000, max_inflight_bytes=1000)
    rec.start()
    try:
        with socket.create_connection(("127.0.0.1", rec.port), timeout=10) as held:  # the only connection slot
            held.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")  # keep-alive, its slot kept
            assert held.recv(4096).startswith(b"HTTP/1.1 200 ")
            status, _, headers = _post(rec, b"")
            assert status == 503 and headers["Retry-After"] == "1"
        _until(lambda: rec.health()["open_connections"] == 0)
        assert _post(rec, b"")[0] == 200
    finally:
        rec.stop()
    rec = Receiver(store, port=0, max_body_bytes=1000, max_inflight_bytes=1000)
    rec.start()
    try:
        with socket.create_connection(("127.0.0.1", rec.port), timeout=10) as raw:
            raw.sendall(
                f"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: {PROTOBUF}\r\n"
                f"Content-Length: 900\r\n\r\n".encode()
                + b"\0" * 10
            )  # 900 bytes promised, 10 sent
            _until(lambda: rec.health()["inflight_requests"] == 1)
            status, _, headers = _post(rec, b"\0" * 200)
            assert status == 503 and headers["Retry-After"] == "1"
            assert _post(rec, b"")[0] == 200  # an empty body fits
        _until(lambda: rec.health()["errors"] == {"503": 1, "aborted": 1})
    finally:
        rec.stop()
