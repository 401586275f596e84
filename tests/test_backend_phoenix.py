"""The Phoenix reader against a real Phoenix server: runs sent to it over OTLP/HTTP beside harvester's
own processor, read back through its REST API, give the same cases; search, errors, exports.

The server is the ``phoenix`` executable of its own virtualenv (``HARVESTER_PHOENIX``, else ``phoenix``
on PATH), started once on 127.0.0.1 with free ports, a temporary working dir and telemetry and
external resources off. Without it these tests skip, unless ``HARVESTER_REQUIRE_BACKENDS=1``. The
undo logic's unit tests need no server.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import orjson
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from harvester import HarvestingSpanProcessor, TraceStore
from harvester.config import Config
from harvester.conventions import runs_from_spans
from harvester.errors import NotFoundError, OtlpFormatError
from harvester.harvest import case_from_run
from harvester.intake.backends import _phoenix
from harvester.intake.backends._client import Client
from harvester.intake.backends._files import spans_of_export
from harvester.intake.backends._target import parse_target
from harvester.spans import SpanData, from_readable, spans_from_otlp
from tests.builders.servers import wait_healthy
from tests.frameworks import langchain_agent, pydantic_ai_agent

ROOT = Path(__file__).resolve().parents[1]
PROJECT = "harvester tests"
FRAMEWORKS = {"pydantic_ai": pydantic_ai_agent, "langchain": langchain_agent}
SCENARIOS = ("happy", "tool_error", "retry", "denied")
RECORDED = sorted(glob.glob(str(ROOT / "traces" / "frameworks" / "*.json"))) + sorted(
    glob.glob(str(ROOT / "traces" / "example" / "*.json"))
)


# -- the server ------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The base URL of a Phoenix server of our own, stopped at the end of the session."""
    exe = os.environ.get("HARVESTER_PHOENIX") or shutil.which("phoenix")
    if not exe or not os.access(exe, os.X_OK):
        if os.environ.get("HARVESTER_REQUIRE_BACKENDS") == "1":
            pytest.fail("HARVESTER_REQUIRE_BACKENDS=1 but no phoenix executable (set HARVESTER_PHOENIX)")
        pytest.skip("no phoenix executable (set HARVESTER_PHOENIX to one in its own virtualenv)")
    work = tmp_path_factory.mktemp("phoenix")
    port, grpc = _free_port(), _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PHOENIX_", "OTEL_"))}
    env.update(
        PHOENIX_WORKING_DIR=str(work),
        PHOENIX_HOST="127.0.0.1",
        PHOENIX_PORT=str(port),
        PHOENIX_GRPC_PORT=str(grpc),
        PHOENIX_TELEMETRY_ENABLED="false",
        PHOENIX_ALLOW_EXTERNAL_RESOURCES="false",
        PHOENIX_DISABLE_AGENT_ASSISTANT="true",
        PHOENIX_ENABLE_MCP_SERVER="false",
        NO_PROXY="127.0.0.1,localhost",
    )
    log = open(work / "server.log", "wb")  # closed at the end of the session
    proc = subprocess.Popen([exe, "serve"], env=env, cwd=work, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(f"{url}/healthz", proc, work / "server.log", timeout=180)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def client(url: str, project: str | None = PROJECT) -> Client:
    target = parse_target(f"phoenix://{url.removeprefix('http://')}" + (f"/{project}" if project else ""))
    return Client(target, headers=_phoenix.headers(), credentials=_phoenix.BACKEND.credentials)


def stored(url: str, trace_id: str, count: int, project: str = PROJECT) -> list[SpanData]:
    """The trace once Phoenix has ingested all ``count`` spans of it (it inserts in the background)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            spans = _phoenix.fetch(client(url, project), trace_id)
        except NotFoundError:
            spans = []
        if len(spans) >= count or time.monotonic() > deadline:
            return spans
        time.sleep(0.1)


def by_trace(spans: list[SpanData]) -> dict[str, list[SpanData]]:
    out: dict[str, list[SpanData]] = {}
    for s in spans:
        out.setdefault(s.trace_id, []).append(s)
    return out


@pytest.fixture(scope="session")
def runs(phoenix: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Each framework scenario run once, into harvester's processor and to Phoenix on one provider:
    ``{"framework/scenario": (store path, {trace id: original spans})}``, in the order they ran."""
    tmp = tmp_path_factory.mktemp("runs")
    out: dict[str, Any] = {}
    for fw, mod in FRAMEWORKS.items():
        for scenario in SCENARIOS:
            path = str(tmp / f"{fw}-{scenario}.db")
            proc = HarvestingSpanProcessor(store=path)
            provider = TracerProvider(
                resource=Resource({"service.name": "harvester-tests", "openinference.project.name": PROJECT}),
                shutdown_on_exit=False,
            )
            provider.add_span_processor(proc)
            provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{phoenix}/v1/traces")))
            spans = mod.run_scenario(scenario, tracer_provider=provider)
            proc.force_flush()
            provider.shutdown()
            out[f"{fw}/{scenario}"] = (path, by_trace([from_readable(s) for s in spans]))
    for _, traces in out.values():
        for tid, spans in traces.items():
            assert len(stored(phoenix, tid, len(spans))) == len(spans), tid
    return out


def case_of(run: Any) -> dict[str, Any]:
    return case_from_run(run, config=Config(), why="x", incident=True).model_dump()


def dumped(run: Any) -> dict[str, Any]:
    """A run's JSON form but for ``instrumentation``: its spans' scopes, which Phoenix does not keep."""
    data = run.model_dump()
    data.pop("instrumentation")
    return data


def plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


# -- what is read back -----------------------------------------------------------------------------
@pytest.mark.parametrize("name", [f"{fw}/{s}" for fw in FRAMEWORKS for s in SCENARIOS])
def test_a_run_read_back_from_phoenix_gives_the_case_harvesters_capture_gives(phoenix, runs, name):
    path, traces = runs[name]
    for tid in traces:
        with TraceStore(path) as store:
            mine = store.get(tid)
        theirs = runs_from_spans(_phoenix.fetch(client(phoenix), tid))
        assert mine and len(theirs) == len(mine), tid
        for a, b in zip(mine, theirs):
            assert case_of(b) == case_of(a)
            da, db = dumped(a), dumped(b)
            # Phoenix keeps times in microseconds: a duration may differ in its last (microsecond) digit
            assert abs((da.pop("duration_ms") or 0) - (db.pop("duration_ms") or 0)) <= 0.002
            assert db == da


def test_import_stores_the_runs_the_processor_stored(phoenix, runs, tmp_path):
    """``import_traces`` (read, redact, store through ``ingest``'s path) over the same traces."""
    from harvester.intake.backends._importer import import_traces

    for name in ("pydantic_ai/tool_error", "langchain/denied"):
        path, traces = runs[name]
        with TraceStore(str(tmp_path / "imported.db")) as store:
            got = import_traces(client(phoenix).target, store, list(traces))
            assert set(got.traces) == set(traces)
        for tid in traces:
            with TraceStore(path) as mine, TraceStore(str(tmp_path / "imported.db")) as theirs:
                a, b = mine.get(tid), theirs.get(tid)
            assert a and [case_of(r) for r in b] == [case_of(r) for r in a]


@pytest.mark.parametrize("name", [f"{fw}/{s}" for fw in FRAMEWORKS for s in ("happy", "tool_error")])
def test_spans_read_back_hold_what_the_app_emitted_but_the_kind_scope_and_resource(phoenix, runs, name):
    for tid, spans in runs[name][1].items():
        back = {s.span_id: s for s in _phoenix.fetch(client(phoenix), tid)}
        assert set(back) == {s.span_id for s in spans}
        for o in spans:
            b = back[o.span_id]
            assert (b.trace_id, b.parent_id, b.name, b.status, b.status_message) == (
                o.trace_id, o.parent_id, o.name, o.status, o.status_message)  # fmt: skip
            assert {k: plain(v) for k, v in b.attributes.items()} == {k: plain(v) for k, v in o.attributes.items()}
            assert [(e["name"], e["attributes"]) for e in b.events] == [(e["name"], e["attributes"]) for e in o.events]
            assert all(abs(x["time_ns"] - y["time_ns"]) <= 1000 for x, y in zip(b.events, o.events))
            assert abs(b.start_ns - o.start_ns) <= 1000 and abs(b.end_ns - o.end_ns) <= 1000
            # not stored by Phoenix at all (see the module's docstring)
            assert (b.kind, b.scope, b.resource) == ("INTERNAL", "", {"openinference.project.name": PROJECT})


def _readable(s: SpanData, project: str) -> ReadableSpan:
    def ctx(span_id: str) -> SpanContext:
        return SpanContext(int(s.trace_id, 16), int(span_id, 16), False, TraceFlags(1))

    return ReadableSpan(
        name=s.name,
        context=ctx(s.span_id),
        parent=ctx(s.parent_id) if s.parent_id else None,
        resource=Resource({**s.resource, "openinference.project.name": project}),
        attributes=s.attributes,
        events=[Event(e["name"], e.get("attributes") or {}, e["time_ns"]) for e in s.events],
        kind=SpanKind[s.kind] if s.kind in SpanKind.__members__ else SpanKind.INTERNAL,
        status=Status(StatusCode[s.status], s.status_message if s.status == "ERROR" and s.status_message else None),
        start_time=s.start_ns,
        end_time=s.end_ns,
        instrumentation_scope=InstrumentationScope(s.scope or "unknown"),
    )


def test_every_recorded_trace_reads_back_the_same_runs_from_phoenix(phoenix):
    """Every recorded framework trace, sent as it was recorded: the same runs, but for ``source`` where
    only the instrumentation scope (which Phoenix drops) told it: OpenLLMetry's agent span and
    harvester's own spans read as plain GenAI semconv (the same reader, so nothing else differs)."""
    exporter = OTLPSpanExporter(endpoint=f"{phoenix}/v1/traces")
    traces: dict[str, list[SpanData]] = {}
    for path in RECORDED:
        spans = list(spans_from_otlp(orjson.loads(Path(path).read_bytes())))
        exporter.export([_readable(s, "recorded") for s in spans])
        for tid, of_trace in by_trace(spans).items():
            traces[tid] = of_trace
    exporter.shutdown()
    assert len(traces) >= 20
    for tid, spans in traces.items():
        want = [dumped(r) for r in runs_from_spans(spans)]
        got = [dumped(r) for r in runs_from_spans(stored(phoenix, tid, len(spans), "recorded"))]
        assert len(got) == len(want), tid
        for a, b in zip(want, got):
            assert abs((a.pop("duration_ms") or 0) - (b.pop("duration_ms") or 0)) <= 0.002
            if a["source"] in ("openllmetry", "harvester"):
                assert b.pop("source") == "genai" and a.pop("source")
            assert b == a, tid


# -- search and errors -----------------------------------------------------------------------------
def test_find_is_newest_first_with_since_failed_and_limit(phoenix, runs, monkeypatch):
    c = client(phoenix)
    ours = {tid: spans for _, traces in runs.values() for tid, spans in traces.items()}
    start = {tid: min(s.start_ns for s in spans) for tid, spans in ours.items()}
    everything = _phoenix.find(c, since_ns=None, failed=False, limit=1000)
    assert set(everything) == set(ours)
    assert everything == sorted(everything, key=lambda t: -start[t])
    failed = _phoenix.find(c, since_ns=None, failed=True, limit=1000)
    assert set(failed) == {t for t, spans in ours.items() if any(s.status == "ERROR" for s in spans)}
    assert failed and len(failed) < len(everything)
    assert failed == [t for t in everything if t in failed]
    assert _phoenix.find(c, since_ns=None, failed=False, limit=3) == everything[:3]
    cut = start[everything[4]]  # the fifth newest trace's start: it and the four after it are kept
    assert _phoenix.find(c, since_ns=cut, failed=False, limit=1000) == everything[:5]
    assert _phoenix.find(c, since_ns=cut, failed=True, limit=1000) == [t for t in failed if start[t] >= cut]
    assert _phoenix.find(c, since_ns=time.time_ns() + 10**12, failed=False, limit=10) == []
    # every page is read (next_cursor), for traces and for a trace's spans
    monkeypatch.setattr(_phoenix, "PAGE", 2)
    monkeypatch.setattr(_phoenix, "_CHECK", 1)  # failed traces checked one id per request
    assert _phoenix.find(c, since_ns=None, failed=False, limit=7) == everything[:7]
    assert _phoenix.find(c, since_ns=None, failed=True, limit=1000) == failed
    tid, spans = max(ours.items(), key=lambda kv: len(kv[1]))
    assert len(spans) > 4
    paged = _phoenix.fetch(c, tid)
    monkeypatch.undo()
    assert [s.to_dict() for s in paged] == [s.to_dict() for s in _phoenix.fetch(c, tid)]


def test_an_unknown_trace_or_project_is_one_line_not_found(phoenix, runs):
    with pytest.raises(NotFoundError, match=r"holds no trace '0{31}1'") as exc:
        _phoenix.fetch(client(phoenix), "0" * 31 + "1")
    assert "\n" not in str(exc.value)
    some = next(iter(runs["pydantic_ai/happy"][1]))
    with pytest.raises(NotFoundError, match="holds no trace"):  # the default project does not hold ours
        _phoenix.fetch(client(phoenix, None), some)
    for call in (lambda c: _phoenix.fetch(c, some), lambda c: _phoenix.find(c, since_ns=None, failed=False, limit=5)):
        with pytest.raises(NotFoundError, match="no project 'nope'") as exc:
            call(client(phoenix, "nope"))
        assert "\n" not in str(exc.value)


# -- exports ---------------------------------------------------------------------------------------
def test_a_saved_spans_answer_reads_as_the_api_does(phoenix, runs, tmp_path):
    c = client(phoenix)
    tid = next(iter(runs["langchain/tool_error"][1]))
    answer = c.get(f"/v1/projects/{quote(PROJECT)}/spans", {"trace_id": tid, "limit": 1000})
    want = [{**s.to_dict(), "resource": {}} for s in _phoenix.fetch(c, tid)]

    def key(spans: list[SpanData]) -> list[dict[str, Any]]:
        return sorted((s.to_dict() for s in spans), key=lambda d: (d["start_ns"], d["span_id"]))

    assert key(_phoenix.from_export(answer, "x.json") or []) == want
    assert key(_phoenix.from_export(answer["data"], "x.json") or []) == want  # the Python client's get_spans
    path = tmp_path / "spans.json"
    path.write_bytes(orjson.dumps(answer))
    assert key(spans_of_export(path.read_bytes(), str(path))) == want
    lines = b"\n".join(orjson.dumps(s) for s in answer["data"])  # JSON lines of span objects
    assert key(spans_of_export(lines, "spans.jsonl")) == want
    assert runs_from_spans(spans_of_export(lines, "spans.jsonl"))
    for other in ({"resourceSpans": []}, {"data": []}, {"data": [{"traceID": "ab", "spans": []}]}, [1], "x"):
        assert _phoenix.from_export(other, "x.json") is None


# -- the undo logic, no server ---------------------------------------------------------------------
def test_derived_openinference_keys_are_dropped_from_genai_spans_only():
    genai = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "get_order",
        "gen_ai.tool.call.arguments": '{"order_id":"A1"}',
        "tool.name": "get_order",
        "tool.id": "c1",
        "tool.parameters.order_id": "A1",
        "output.value": "ok",
        "session.id": "s",
        "llm.input_messages.0.message.role": "user",
        "llm.token_count.prompt": 3,
        "logfire.msg": "running tool",
    }
    assert _phoenix.undo_attributes(genai, "TOOL") == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "get_order",
        "gen_ai.tool.call.arguments": '{"order_id":"A1"}',
        "logfire.msg": "running tool",
    }
    oi = {"tool.name": "get_order", "input.value": '{"order_id": "A1"}', "llm.token_count.prompt": 3}
    assert _phoenix.undo_attributes(oi, "TOOL") == {**oi, "openinference.span.kind": "TOOL"}
    assert _phoenix.undo_attributes(oi, "UNKNOWN") == oi  # Phoenix's word for "no kind"
    assert _phoenix.undo_attributes({"http.method": "GET"}, None) == {"http.method": "GET"}


def test_json_string_attributes_phoenix_unpacked_are_packed_back():
    flat = {
        "metadata.thread_id": "t1",
        "metadata.langgraph_step": 2,
        "metadata.tags": ["a", "b"],
        "metadata.docs.0.id": "d1",
        "metadata.docs.1.id": "d2",
        "metadata.by_n.0": "zero",
        "tool.parameters.order_id": "A1",
        "retrieval.documents.0.document.metadata.source": "kb",
        "retrieval.documents.0.document.content": "text",
        "llm.prompt_template.variables": 5,  # the JSON string "5", parsed to a number
        "input.value": '{"a": 1}',
        "llm.input_messages.0.message.content": "hi",
    }
    out = _phoenix.undo_attributes(flat, "CHAIN")
    assert orjson.loads(out.pop("metadata")) == {
        "thread_id": "t1",
        "langgraph_step": 2,
        "tags": ["a", "b"],
        "docs": [{"id": "d1"}, {"id": "d2"}],
        "by_n": {"0": "zero"},  # Phoenix makes lists of objects only
    }
    assert out == {
        "tool.parameters": '{"order_id": "A1"}',  # OpenInference's json.dumps, as Phoenix parsed it
        "retrieval.documents.0.document.metadata": '{"source": "kb"}',
        "retrieval.documents.0.document.content": "text",
        "llm.prompt_template.variables": "5",
        "input.value": '{"a": 1}',
        "llm.input_messages.0.message.content": "hi",
        "openinference.span.kind": "CHAIN",
    }


def test_a_phoenix_span_object_reads_as_span_data():
    obj = {
        "id": "U3Bhbjox",
        "name": "tools",
        "context": {"trace_id": "AB" * 16, "span_id": "cd" * 8},
        "span_kind": "TOOL",
        "parent_id": "ef" * 8,
        "start_time": "2026-01-02T03:04:05.123456+00:00",
        "end_time": "2026-01-02T03:04:05.5Z",
        "status_code": "ERROR",
        "status_message": "boom",
        "attributes": {"tool.name": "x"},
        "events": [{"name": "exception", "timestamp": "2026-01-02T03:04:05.2+00:00",
                    "attributes": {"exception.type": "E", "exception.message": "boom"}}],
    }  # fmt: skip
    s = _phoenix.span_from_phoenix(obj, project="p")
    assert (s.trace_id, s.span_id, s.parent_id, s.status, s.status_message) == ("ab" * 16, "cd" * 8, "ef" * 8,
                                                                                "ERROR", "boom")  # fmt: skip
    assert s.start_ns == 1767323045123456000 and s.end_ns == 1767323045500000000
    assert s.events == [{"name": "exception", "time_ns": 1767323045200000000,
                         "attributes": {"exception.type": "E", "exception.message": "boom"}}]  # fmt: skip
    assert s.attributes == {"tool.name": "x", "openinference.span.kind": "TOOL"}
    assert s.resource == {"openinference.project.name": "p"}
    with pytest.raises(OtlpFormatError, match=r"not a Phoenix span .*bad id 'zz'"):
        _phoenix.from_export({"data": [{**obj, "context": {"trace_id": "zz", "span_id": "1"}}]}, "f")


def test_credentials_are_phoenixs_own_variables(monkeypatch):
    monkeypatch.delenv("PHOENIX_API_KEY", raising=False)
    monkeypatch.delenv("PHOENIX_CLIENT_HEADERS", raising=False)
    assert _phoenix.headers() == {}
    monkeypatch.setenv("PHOENIX_CLIENT_HEADERS", "api_key=k%201,X-Org=acme")
    assert _phoenix.headers() == {"api_key": "k 1", "X-Org": "acme"}
    monkeypatch.setenv("PHOENIX_API_KEY", " secret ")
    assert _phoenix.headers() == {"api_key": "k 1", "X-Org": "acme", "Authorization": "Bearer secret"}
    assert "PHOENIX_API_KEY" in _phoenix.BACKEND.credentials


@pytest.mark.parametrize("name", ["pydantic_ai/tool_error", "langchain/happy"])
def test_incident_from_phoenix_makes_the_case_the_processor_capture_makes(phoenix, runs, tmp_path, name):
    """The issue's promise, through the CLI: a trace that lives only in Phoenix becomes, with
    ``incident ID --from phoenix://...``, the case ``incident ID`` makes from harvester's own capture."""
    from click.testing import CliRunner

    from harvester.cli import main

    path, traces = runs[name]
    tid = next(iter(traces))
    url = f"phoenix://{phoenix.removeprefix('http://')}/{PROJECT}"

    def incident(*args: str) -> dict[str, Any]:
        res = CliRunner().invoke(main, ["incident", tid, "--why", "w", "--json", *args], catch_exceptions=False)
        assert res.exit_code == 0, res.output
        return orjson.loads(res.stdout)["case"]

    want = incident("--store", path, "--cases", str(tmp_path / "mine"))
    got = incident("--from", url, "--store", str(tmp_path / "imported.db"), "--cases", str(tmp_path / "theirs"))
    assert got["review_notes"].pop().startswith("phoenix held: prompt, answer, tool args")
    assert got == want
