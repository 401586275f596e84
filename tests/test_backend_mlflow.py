"""The MLflow reader against a real ``mlflow server``: GenAI-semconv runs sent over OTLP, read back by
either id, give the cases harvester's own capture gives; recorded framework traces read back the same
runs; search by time, status and limit; saved traces; what MLflow keeps no trace of.

The server comes from ``HARVESTER_MLFLOW`` (the ``mlflow`` executable of a venv with ``mlflow``
installed) or ``mlflow`` on the PATH; without one these tests skip, unless
``HARVESTER_REQUIRE_BACKENDS=1``. The undo logic's unit test needs no server.
"""

from __future__ import annotations

import copy
import glob
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from harvester import HarvestingSpanProcessor, TraceStore
from harvester.config import Config
from harvester.conventions import runs_from_spans
from harvester.errors import NotFoundError
from harvester.harvest import case_from_run
from harvester.intake.backends import _mlflow
from harvester.intake.backends._client import Client
from harvester.intake.backends._target import parse_target
from harvester.spans import SpanData, spans_from_otlp
from tests.builders.capture import agent_run
from tests.builders.servers import wait_healthy
from tests.frameworks import pydantic_ai_agent

ROOT = Path(__file__).resolve().parents[1]
RECORDED = sorted(glob.glob(str(ROOT / "traces" / "frameworks" / "*.json")))
START_TIMEOUT_S = 240  # a cold start on two busy cores (the first run also creates the database)


# -- the server ----------------------------------------------------------------------------------
def _mlflow_executable() -> str | None:
    return os.environ.get("HARVESTER_MLFLOW") or shutil.which("mlflow")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    exe = _mlflow_executable()
    if not exe or not Path(exe).exists():
        if os.environ.get("HARVESTER_REQUIRE_BACKENDS") == "1":
            pytest.fail("HARVESTER_REQUIRE_BACKENDS=1 but no mlflow executable (set HARVESTER_MLFLOW)")
        pytest.skip("no mlflow server (set HARVESTER_MLFLOW to a venv's mlflow executable)")
    tmp = tmp_path_factory.mktemp("mlflow")
    port = _free_port()
    # no telemetry, and no job runner (seven huey consumers, for scorers and prompt optimization)
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true", "DO_NOT_TRACK": "true",
           "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}  # fmt: skip
    env.pop("MLFLOW_TRACKING_URI", None)
    log = (tmp / "server.log").open("wb")
    proc = subprocess.Popen(
        [exe, "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", f"sqlite:///{tmp / 'mlflow.db'}", "--artifacts-destination", str(tmp / "artifacts")],
        cwd=tmp, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(f"{url}/health", proc, tmp / "server.log", timeout=START_TIMEOUT_S)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the group this fixture started: uvicorn and its workers
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever of that group outlived its leader
        except ProcessLookupError:
            pass
        proc.wait()
        log.close()


def client_of(server: str, experiment: str | None = None) -> Client:
    target = parse_target(server.replace("http://", "mlflow://") + (f"/{experiment}" if experiment else ""))
    return Client(target, headers=_mlflow.headers(), credentials=_mlflow.BACKEND.credentials)


def new_experiment(server: str) -> tuple[str, str]:
    name = f"harvester-{uuid.uuid4().hex[:8]}"
    return name, client_of(server).post("/api/2.0/mlflow/experiments/create", {"name": name})["experiment_id"]


def provider_to(server: str, experiment_id: str, *processors: Any) -> TracerProvider:
    provider = TracerProvider(resource=Resource({"service.name": "support-app", "deployment.environment": "prod"}))
    for p in processors:
        provider.add_span_processor(p)
    exporter = OTLPSpanExporter(endpoint=f"{server}/v1/traces", headers={"x-mlflow-experiment-id": experiment_id})
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


# -- runs sent to MLflow and to harvester's own processor at once --------------------------------
class Sent:
    def __init__(self, server: str, store: str, experiment: tuple[str, str]) -> None:
        self.server, self.store, (self.name, self.experiment_id) = server, store, experiment
        self.traces: list[str] = []  # in the order the runs started
        self.roots: dict[str, SpanData] = {}
        self.spans: dict[str, list[SpanData]] = {}


@pytest.fixture(scope="module")
def sent(mlflow_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sent]:
    from harvester.spans import from_readable

    out = Sent(mlflow_server, str(tmp_path_factory.mktemp("capture") / "t.db"), new_experiment(mlflow_server))
    proc = HarvestingSpanProcessor(out.store, redact=False)
    provider = provider_to(mlflow_server, out.experiment_id, proc)

    def keep(spans: list[Any]) -> None:
        for span in sorted((from_readable(s) for s in spans), key=lambda s: s.start_ns):
            if span.trace_id not in out.spans:
                out.traces.append(span.trace_id)
            out.spans.setdefault(span.trace_id, []).append(span)
            if span.parent_id is None:
                out.roots[span.trace_id] = span

    for scenario in pydantic_ai_agent.SCENARIOS:
        keep(pydantic_ai_agent.run_scenario(scenario, tracer_provider=provider))
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("support")
    agent_run(tracer, prompt="Can I return order B2002?")
    agent_run(tracer, prompt="Where is my refund?", tool_error=TimeoutError("kb timeout"))
    keep(memory.get_finished_spans())
    assert proc.force_flush(30_000)
    yield out
    proc.shutdown()
    provider.shutdown()


def cases(runs: list[Any]) -> list[dict[str, Any]]:
    return [case_from_run(r, config=Config()).model_dump() for r in runs]


def dumped(run: Any) -> dict[str, Any]:
    """A run's JSON form but for ``instrumentation``: its spans' scopes, which MLflow does not keep."""
    data = run.model_dump()
    data.pop("instrumentation")
    return data


def captured(sent: Sent, trace_id: str) -> list[Any]:
    with TraceStore(sent.store) as store:
        return store.get(trace_id)


def test_every_run_read_back_from_mlflow_makes_the_case_harvesters_capture_makes(sent):
    assert len(sent.traces) == 7  # four scenarios (denied is two traces: pause, resume), two hand-built
    client = client_of(sent.server)
    failing = 0
    for tid in sent.traces:
        want = captured(sent, tid)
        assert want, tid
        for asked in (tid, f"tr-{tid}", tid.upper()):
            spans = _mlflow.fetch(client, asked)
            assert {s.trace_id for s in spans} == {tid}
            got = runs_from_spans(spans)
            assert cases(got) == cases(want)
            assert [dumped(r) for r in got] == [dumped(r) for r in want]
        failing += any(r.failed for r in want)
    assert failing >= 2  # tool_error and the hand-built tool failure


def test_spans_read_back_as_sent_but_for_kind_and_scope(sent):
    """What MLflow did to every span is undone, field for field, except what it keeps no trace of."""
    client = client_of(sent.server)
    for tid in sent.traces:
        got = {s.span_id: s for s in _mlflow.fetch(client, tid)}
        assert set(got) == {s.span_id for s in sent.spans[tid]}
        for want in sent.spans[tid]:
            span = got[want.span_id]
            assert (span.kind, span.scope) == ("INTERNAL", "")  # LOST: span kinds, scopes
            assert span.resource == {"service.name": "support-app", "deployment.environment": "prod"}
            assert not [k for k in span.attributes if k.startswith("mlflow.")]
            kept = ("trace_id", "span_id", "parent_id", "name", "start_ns", "end_ns", "status", "status_message",
                    "attributes", "events")  # fmt: skip
            assert {k: getattr(span, k) for k in kept} == {k: getattr(want, k) for k in kept}, want.name
    assert len(_mlflow.LOST) >= 2


def test_a_json_string_attribute_comes_back_as_the_string_it_was(sent):
    client = client_of(sent.server)
    tid = sent.traces[0]
    chat = next(s for s in _mlflow.fetch(client, tid) if s.attributes.get("gen_ai.operation.name") == "chat")
    want = next(s for s in sent.spans[tid] if s.span_id == chat.span_id)
    assert isinstance(chat.attributes["gen_ai.input.messages"], str)
    assert chat.attributes["gen_ai.input.messages"] == want.attributes["gen_ai.input.messages"]  # byte for byte


# -- find ----------------------------------------------------------------------------------------
def test_find_newest_first_by_time_status_and_limit(sent):
    client = client_of(sent.server, sent.name)
    newest_first = sent.traces[::-1]
    assert _mlflow.find(client, since_ns=None, failed=False, limit=100) == newest_first
    assert _mlflow.find(client, since_ns=None, failed=False, limit=3) == newest_first[:3]
    since = sent.roots[sent.traces[3]].start_ns
    assert _mlflow.find(client, since_ns=since, failed=False, limit=100) == newest_first[:4]
    errored = [t for t in newest_first if sent.roots[t].status == "ERROR"]
    assert errored  # tool_error's agent span failed
    assert _mlflow.find(client, since_ns=None, failed=True, limit=100) == errored
    assert _mlflow.find(client, since_ns=since, failed=True, limit=100) == [t for t in errored if t in newest_first[:4]]
    assert _mlflow.find(client, since_ns=time.time_ns() + 10**12, failed=False, limit=100) == []


def test_find_pages_through_the_search(sent, monkeypatch):
    monkeypatch.setattr(_mlflow, "_PAGE", 2)
    client = client_of(sent.server, sent.name)
    assert _mlflow.find(client, since_ns=None, failed=False, limit=5) == sent.traces[::-1][:5]
    assert _mlflow.find(client, since_ns=None, failed=False, limit=100) == sent.traces[::-1]


def test_find_by_experiment_id_name_or_every_experiment(sent):
    by_id = _mlflow.find(client_of(sent.server, sent.experiment_id), since_ns=None, failed=False, limit=100)
    assert by_id == sent.traces[::-1]
    everywhere = _mlflow.find(client_of(sent.server), since_ns=None, failed=False, limit=1000)
    assert set(sent.traces) <= set(everywhere)
    with pytest.raises(NotFoundError, match="no experiment 'no-such-experiment'"):
        _mlflow.find(client_of(sent.server, "no-such-experiment"), since_ns=None, failed=False, limit=5)
    empty = new_experiment(sent.server)
    assert _mlflow.find(client_of(sent.server, empty[0]), since_ns=None, failed=False, limit=5) == []


def test_an_unknown_trace_is_not_found_in_one_line(mlflow_server):
    client = client_of(mlflow_server)
    for asked in ("0123456789abcdef0123456789abcdef", "tr-0123456789abcdef0123456789abcdef", "nonsense"):
        with pytest.raises(NotFoundError) as err:
            _mlflow.fetch(client, asked)
        assert "\n" not in str(err.value) and asked in str(err.value)


def test_a_replay_sent_to_mlflow_is_not_imported(mlflow_server):
    _, experiment_id = new_experiment(mlflow_server)
    provider = provider_to(mlflow_server, experiment_id)
    with provider.get_tracer("harvester").start_as_current_span(
        "harvester.replay case-1", attributes={"harvester.case": "case-1"}
    ) as root:
        agent_run(provider.get_tracer("support"))
    provider.shutdown()
    tid = format(root.get_span_context().trace_id, "032x")
    with pytest.raises(NotFoundError, match="replays"):
        _mlflow.fetch(client_of(mlflow_server), tid)


# -- saved traces --------------------------------------------------------------------------------
def _venv_python() -> Path | None:
    exe = _mlflow_executable()
    python = Path(exe).parent / "python" if exe else None
    return python if python is not None and python.exists() else None


def test_a_saved_trace_reads_back_the_same_runs(sent, tmp_path):
    client = client_of(sent.server)
    tid = next(t for t in sent.traces if sent.roots[t].status == "ERROR")
    want = [dumped(r) for r in captured(sent, tid)]
    docs = {
        "rest get": client.get("/api/3.0/mlflow/traces/get", {"trace_id": f"tr-{tid}"}),
        "rest batchGet": client.get("/api/3.0/mlflow/traces/batchGet", {"trace_ids": [f"tr-{tid}"]}),
        "artifact": client.get("/ajax-api/2.0/mlflow/get-trace-artifact", {"request_id": f"tr-{tid}"}),
    }
    python = _venv_python()
    if python is not None:  # what a user saves from MLflow's own client: mlflow.get_trace(id).to_json()
        code = "import mlflow, sys; sys.stdout.write(mlflow.get_trace(sys.argv[1]).to_json())"
        env = {**os.environ, "MLFLOW_TRACKING_URI": sent.server, "MLFLOW_DISABLE_TELEMETRY": "true"}
        out = subprocess.run([python, "-c", code, f"tr-{tid}"], env=env, capture_output=True, check=True, timeout=120)
        docs["to_json"] = orjson.loads(out.stdout)
        docs["to_json list"] = [docs["to_json"]]
    for form, doc in docs.items():
        spans = _mlflow.from_export(doc, f"{form}.json")
        assert spans is not None, form
        assert {s.trace_id for s in spans} == {tid}, form
        assert [dumped(r) for r in runs_from_spans(spans)] == want, form
    assert _mlflow.from_export({"resourceSpans": []}, "otlp.json") is None
    assert _mlflow.from_export({"data": [{"spans": [], "processes": {}}]}, "jaeger.json") is None
    assert _mlflow.from_export({"spans": [{"name": "x", "attributes": {}}]}, "other.json") is None
    assert _mlflow.from_export([], "empty.json") is None


# -- recorded framework traces: every convention harvester reads --------------------------------
@pytest.mark.parametrize("path", RECORDED, ids=lambda p: Path(p).stem)
def test_every_recorded_trace_reads_back_the_same_runs_from_mlflow(mlflow_server, path):
    """Sent as OTLP/JSON under fresh trace ids (the recordings share deterministic ones)."""
    doc = orjson.loads(Path(path).read_bytes())
    fresh: dict[str, str] = {}
    for rs in doc["resourceSpans"]:
        for ss in rs.get("scopeSpans") or ():
            for span in ss.get("spans") or ():
                span["traceId"] = fresh.setdefault(span["traceId"], uuid.uuid4().hex)
    spans = list(spans_from_otlp(copy.deepcopy(doc)))
    _, experiment_id = new_experiment(mlflow_server)
    headers = {"Content-Type": "application/json", "x-mlflow-experiment-id": experiment_id}
    req = urllib.request.Request(f"{mlflow_server}/v1/traces", data=orjson.dumps(doc), method="POST", headers=headers)
    with urllib.request.urlopen(req, timeout=60) as r:
        assert r.status == 200
    client = client_of(mlflow_server)
    for tid in fresh.values():
        want = [s for s in spans if s.trace_id == tid]
        got = _mlflow.fetch(client, tid)
        assert sorted(s.span_id for s in got) == sorted(s.span_id for s in want)
        got_runs, want_runs = runs_from_spans(got), runs_from_spans(want)
        assert cases(got_runs) == cases(want_runs)
        # MLflow keeps no instrumentation scope: a run known as OpenLLMetry's by its scope alone
        # reads as plain GenAI semconv (its content the same); nothing else differs.
        for span in want:
            span.scope, span.kind, span.resource = "", "INTERNAL", {}
        assert [r.model_dump() for r in got_runs] == [r.model_dump() for r in runs_from_spans(want)]
        assert [r.model_dump(exclude={"source", "instrumentation"}) for r in got_runs] == [
            r.model_dump(exclude={"source", "instrumentation"}) for r in want_runs
        ]


# -- the undo logic, no server -------------------------------------------------------------------
STORED = {  # one span as MLflow 3.17 stores an OTLP span (from a real get-trace-artifact answer, cut down)
    "trace_id": "e8TB1hfXLEpuCSDqYiuohg==",
    "span_id": "6L69vfg9A10=",
    "parent_span_id": "AAAAAAAAAAE=",
    "name": "chat m",
    "start_time_unix_nano": 1796193684837224958,
    "end_time_unix_nano": 1796193692376566691,
    "events": [
        {
            "name": "exception",
            "time_unix_nano": 1796193692000000000,
            "attributes": {"exception.type": "KeyError", "exception.escaped": "False"},
        }
    ],  # fmt: skip
    "status": {"code": "STATUS_CODE_ERROR", "message": "KeyError: 'x'"},
    "attributes": {
        "gen_ai.operation.name": '"chat"',
        "gen_ai.usage.input_tokens": "100",
        "gen_ai.request.temperature": "0.5",
        "gen_ai.request.stream": "false",
        "gen_ai.response.id": '"42"',  # a string of digits stays a string
        "gen_ai.input.messages": '[{"role":"user","parts":[{"type":"text","content":"hi"}]}]',
        "gen_ai.tool.call.arguments": '{"query":"refund policy"}',
        "gen_ai.response.finish_reasons": '["stop", "length"]',  # a list attribute, as json.dumps spells one
        "app.tags": '["a","b"]',  # a string holding a JSON list: not how MLflow spells a list
        "gen_ai.tool.call.result": '["x", "y"]',  # a payload: a string even if spelled like a list
        "gen_ai.agent.name": "plain text",  # not JSON: kept as it came
        "mlflow.traceRequestId": '"tr-7bc4c1d617d72c4a6e0920ea622ba886"',
        "mlflow.spanType": '"CHAT_MODEL"',
        "mlflow.spanInputs": '[{"role":"user","parts":[{"type":"text","content":"hi"}]}]',
        "mlflow.chat.tokenUsage": '{"input_tokens": 100}',
    },
    "links": [],
}


def test_undo_without_a_server():
    [span] = _mlflow.from_export({"spans": [STORED]}, "traces.json")
    assert (span.trace_id, span.span_id, span.parent_id) == (
        "7bc4c1d617d72c4a6e0920ea622ba886", "e8bebdbdf83d035d", "0000000000000001",
    )  # fmt: skip
    assert (span.name, span.start_ns, span.end_ns) == ("chat m", 1796193684837224958, 1796193692376566691)
    assert (span.status, span.status_message, span.kind, span.scope, span.resource) == (
        "ERROR", "KeyError: 'x'", "INTERNAL", "", {},
    )  # fmt: skip
    assert span.attributes == {
        "gen_ai.operation.name": "chat",
        "gen_ai.usage.input_tokens": 100,
        "gen_ai.request.temperature": 0.5,
        "gen_ai.request.stream": False,
        "gen_ai.response.id": "42",
        "gen_ai.input.messages": '[{"role":"user","parts":[{"type":"text","content":"hi"}]}]',
        "gen_ai.tool.call.arguments": '{"query":"refund policy"}',
        "gen_ai.response.finish_reasons": ["stop", "length"],
        "app.tags": '["a","b"]',
        "gen_ai.tool.call.result": '["x", "y"]',
        "gen_ai.agent.name": "plain text",
    }
    assert span.events == [{"name": "exception", "time_ns": 1796193692000000000,
                            "attributes": {"exception.type": "KeyError", "exception.escaped": "False"}}]  # fmt: skip

    # The same span as the REST API answers it (OTLP KeyValues, the JSON strings decoded), with its
    # trace's tags: the resource comes back from the tags, service.name leaves the root span.
    rest = {**STORED, "parent_span_id": "", "attributes": [
        {"key": "gen_ai.input.messages", "value": {"array_value": {"values": [{"kvlist_value": {"values": [
            {"key": "role", "value": {"string_value": "user"}}]}}]}}},
        {"key": "gen_ai.usage.input_tokens", "value": {"int_value": "100"}},
        {"key": "gen_ai.response.finish_reasons", "value": {"array_value": {"values": [{"string_value": "stop"}]}}},
        {"key": "service.name", "value": {"string_value": "claude-code"}},
        {"key": "mlflow.spanType", "value": {"string_value": "LLM"}},
    ]}  # fmt: skip
    doc = {"trace": {"trace_info": {"trace_id": "tr-7bc4c1d617d72c4a6e0920ea622ba886",
                                    "tags": {"service.name": "claude-code", "mlflow.artifactLocation": "x"}},
                     "spans": [rest]}}  # fmt: skip
    [span] = _mlflow.from_export(doc, "get.json")
    assert span.parent_id is None
    assert span.resource == {"service.name": "claude-code"}
    assert span.attributes == {
        "gen_ai.input.messages": '[{"role":"user"}]',
        "gen_ai.usage.input_tokens": 100,
        "gen_ai.response.finish_reasons": ["stop"],
    }


def test_a_replay_trace_is_not_read():
    root = {**STORED, "parent_span_id": None, "name": "harvester.replay case-1",
            "attributes": {"harvester.case": '"case-1"', "mlflow.traceRequestId": '"tr-1"'}}  # fmt: skip
    assert _mlflow.from_export({"spans": [root, STORED]}, "traces.json") == []


def test_credentials_from_the_mlflow_client_variables(monkeypatch):
    for var in ("MLFLOW_TRACKING_TOKEN", "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        monkeypatch.delenv(var, raising=False)
        assert var in _mlflow.BACKEND.credentials
    assert _mlflow.headers() == {}
    monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", "ann")
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "s3cret")
    assert _mlflow.headers() == {"Authorization": "Basic YW5uOnMzY3JldA=="}
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", "tok")
    assert _mlflow.headers() == {"Authorization": "Bearer tok"}


def test_incident_from_mlflow_makes_the_case_the_processor_capture_makes(sent, tmp_path):
    """Through the CLI, by MLflow's id: ``incident tr-... --from mlflow://host:port/experiment`` makes the
    case ``incident`` makes from harvester's own capture of the same run."""
    from click.testing import CliRunner

    from harvester.cli import main

    url = f"mlflow://{sent.server.removeprefix('http://')}/{sent.name}"
    for tid in sent.traces:
        if not captured(sent, tid):
            continue

        def incident(trace: str, *args: str) -> dict[str, Any]:
            res = CliRunner().invoke(main, ["incident", trace, "--why", "w", "--json", *args], catch_exceptions=False)
            assert res.exit_code == 0, res.output
            return orjson.loads(res.stdout)["case"]

        want = incident(tid, "--store", sent.store, "--cases", str(tmp_path / tid / "mine"))
        got = incident(f"tr-{tid}", "--from", url, "--store", str(tmp_path / "imported.db"),
                       "--cases", str(tmp_path / tid / "theirs"))  # fmt: skip
        assert got["review_notes"].pop().startswith("mlflow held: prompt, answer")
        assert got == want, tid
