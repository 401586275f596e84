"""``incident --from``, ``import`` and ``--file`` for Jaeger and Tempo, against loopback servers that
answer as their documented APIs do, with real recorded framework traces; URL parsing, credentials,
errors (each one line, exit 2, nothing stored), fidelity lines."""

from __future__ import annotations

import glob
import time
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from harvester.cli import main
from harvester.conventions import runs_from_spans
from harvester.errors import BackendError, InputError
from harvester.intake.backends import Client, _jaeger, _tempo, fidelity, parse_target
from harvester.spans import SpanData, spans_from_otlp, to_otlp
from tests.builders.backends import Backend, jaeger_trace, loopback, reply, routes, serving, tempo_answer
from tests.builders.cli import one_line_error
from tests.builders.files import readable

ROOT = Path(__file__).resolve().parents[1]
RECORDED = sorted(glob.glob(str(ROOT / "traces" / "frameworks" / "*.json"))) + sorted(
    glob.glob(str(ROOT / "traces" / "example" / "*.json"))
)


def traces_of(path: str) -> dict[str, list[SpanData]]:
    out: dict[str, list[SpanData]] = {}
    for span in spans_from_otlp(orjson.loads(Path(path).read_bytes())):
        out.setdefault(span.trace_id, []).append(span)
    return out


def dumped(spans: list[SpanData]) -> list[dict]:
    return [r.model_dump() for r in runs_from_spans(spans)]


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, list(args), catch_exceptions=False, env=env)


def listed(store) -> list[dict]:
    res = invoke("traces", "list", "--store", str(store), "--json")
    assert res.exit_code == 0, res.output
    return [orjson.loads(line) for line in res.stdout.splitlines()]


def case_of(result) -> dict:
    assert result.exit_code == 0, result.output
    return orjson.loads(result.stdout)["case"]


# -- readers: what each backend does to a trace, undone ------------------------------------------
@pytest.mark.parametrize("path", RECORDED, ids=lambda p: Path(p).stem)
def test_every_recorded_trace_reads_back_the_same_runs_from_jaeger_and_tempo(path):
    traces = traces_of(path)
    assert any(dumped(spans) for spans in traces.values()), path
    for spans in traces.values():
        want = dumped(spans)
        assert dumped(_jaeger.from_export({"data": [jaeger_trace(spans)]}, path)) == want
        for form in ("batches", "v2", "plain"):
            assert dumped(_tempo.from_export(tempo_answer(spans, form), path) or []) == want, form


def test_jaeger_tags_become_the_span_fields_they_were():
    (spans,) = traces_of(str(ROOT / "traces" / "frameworks" / "pydantic-ai-tool_error.json")).values()
    back = {s.span_id: s for s in _jaeger.spans_of_trace(jaeger_trace(spans), file="x")}
    for s in spans:
        got = back[s.span_id]
        assert (got.kind, got.status, got.status_message, got.scope) == (s.kind, s.status, s.status_message, s.scope)
        assert (got.parent_id, got.start_ns // 1000, got.end_ns // 1000) == (
            s.parent_id,
            s.start_ns // 1000,
            s.end_ns // 1000,
        )
        assert got.resource == s.resource and got.events == s.events
        assert got.attributes == s.attributes  # no span.kind, otel.*, error tags left behind
    assert any(s.status == "ERROR" for s in spans)


def test_jaeger_short_ids_arrays_and_payload_strings():
    span = SpanData(
        trace_id="0" * 16 + "00000000000000ab",
        span_id="00000000000000cd",
        parent_id=None,
        name="chat m",
        attributes={"gen_ai.response.finish_reasons": ["stop"], "gen_ai.tool.call.result": '["a", "b"]', "n": 2**40},
    )
    trace = jaeger_trace([span])
    assert trace["traceID"] == "00000000000000ab"  # Jaeger prints 16 digits when the high half is zero
    (back,) = _jaeger.from_export(trace, "x")
    assert back.trace_id == span.trace_id
    assert back.attributes == span.attributes  # the list comes back a list; the payload string stays a string


def test_replay_spans_are_not_imported():
    (spans,) = traces_of(str(ROOT / "traces" / "frameworks" / "pydantic-ai-happy.json")).values()
    trace = jaeger_trace(spans)
    for s in trace["spans"]:
        s["tags"].append({"key": "w3c.tracestate", "type": "string", "value": "harvester=replay"})
    assert _jaeger.from_export(trace, "x") == []


def test_an_unreadable_jaeger_span_names_its_place():
    with pytest.raises(InputError, match=r"spans\[0\]"):
        _jaeger.from_export({"traceID": "ab", "spans": [{"spanID": "1"}], "processes": {}}, "dl.json")


# -- URLs ---------------------------------------------------------------------------------------
def test_backend_urls():
    t = parse_target("phoenix://127.0.0.1:6006/my%20project")
    assert (t.backend, t.base_url, t.scope) == ("phoenix", "http://127.0.0.1:6006", "my project")
    assert parse_target("mlflow://mlflow.internal").base_url == "http://mlflow.internal:5000"
    assert parse_target("tempo+https://tempo.example:443").base_url == "https://tempo.example:443"
    assert parse_target("jaeger://[::1]").base_url == "http://[::1]:16686"
    for bad, needle in [
        ("http://127.0.0.1:6006", "name the backend in the scheme"),
        ("zipkin://h", "unknown backend"),
        ("phoenix://user:secret@h", "credentials do not go in the URL"),
        ("jaeger://h/proj", "jaeger has no projects"),
        ("tempo://h:99999", "Port out of range"),
    ]:
        with pytest.raises(InputError, match=needle):
            parse_target(bad)


# -- the commands ---------------------------------------------------------------------------------
SCENARIOS = ["pydantic-ai-tool_error", "langchain-openinference-denied", "openai-agents-happy", "smolagents-happy"]


@pytest.mark.parametrize("kind", ["jaeger", "tempo"])
def test_incident_from_a_backend_makes_the_case_ingest_would(tmp_path, kind):
    for name in SCENARIOS:
        path = str(ROOT / "traces" / "frameworks" / f"{name}.json")
        traces = traces_of(path)
        tid = next(iter(traces))
        here = tmp_path / name
        here.mkdir()
        ref_store, store = str(here / "ref.db"), str(here / "b.db")
        assert invoke("ingest", path, "--store", ref_store).exit_code == 0
        want = case_of(
            invoke("incident", tid, "--why", "w", "--store", ref_store, "--cases", str(here / "a"), "--json")
        )
        with serving(Backend(kind, traces)) as backend:
            got = case_of(
                invoke(
                    "incident",
                    tid,
                    "--from",
                    backend.url,
                    "--why",
                    "w",
                    "--store",
                    store,
                    "--cases",
                    str(here / "b"),
                    "--json",
                )  # fmt: skip
            )
        note = got["review_notes"].pop()
        assert note.startswith(f"{kind} held: prompt, answer"), note
        assert got == want, name
        assert invoke("traces", "list", "--store", store, "--json").exit_code == 0  # stored, as an import


def test_incident_from_jaeger_prints_what_the_trace_held(tmp_path):
    path = str(ROOT / "traces" / "frameworks" / "pydantic-ai-happy.json")
    traces = traces_of(path)
    tid = next(iter(traces))
    with serving(Backend("jaeger", traces)) as backend:
        res = invoke("incident", tid, "--from", backend.url, "--why", "w", "--store", str(tmp_path / "s.db"),
                     "--cases", str(tmp_path / "c"))  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "  from:        jaeger held: prompt, answer, tool args (2/2), tool results (2/2), token counts" in res.output


def test_fidelity_names_what_content_capture_left_out():
    (spans,) = traces_of(str(ROOT / "traces" / "frameworks" / "pydantic-ai-happy.json")).values()
    bare = [
        SpanData(**{**s.to_dict(), "attributes": {k: v for k, v in s.attributes.items()
                                                  if "messages" not in k and "arguments" not in k
                                                  and "result" not in k and "usage" not in k}})
        for s in spans
    ]  # fmt: skip
    (run,) = runs_from_spans(bare)
    fid = fidelity(run)
    assert "prompt" in fid.missing and "token counts" in fid.missing and "tool results" in fid.missing
    assert fid.line("phoenix").startswith("phoenix held: ")


@pytest.mark.parametrize("kind", ["jaeger", "tempo"])
def test_import_finds_the_newest_failed_traces_since(tmp_path, kind):
    traces: dict[str, list[SpanData]] = {}
    for path in RECORDED[:12]:
        traces.update(traces_of(path))
    failed = {t for t, spans in traces.items() if any(s.status == "ERROR" for s in spans)}
    assert failed and len(failed) < len(traces)
    store = str(tmp_path / "s.db")
    with serving(Backend(kind, traces)) as backend:
        res = invoke("import", backend.url, "--store", store, "--since", "3650d", "--failed", "--json")
        assert res.exit_code == 0, res.output
        out = orjson.loads(res.stdout)
        assert {r["trace_id"] for r in out["imported"]} == failed
        res = invoke("import", backend.url, "--store", str(tmp_path / "l.db"), "--since", "3650d", "--limit", "2")
        assert res.exit_code == 0, res.output
        assert res.output.startswith("imported 2 traces"), res.output
        res = invoke("import", backend.url, "--store", str(tmp_path / "n.db"), "--since", "1h")
        assert res.output.startswith("imported 0 traces"), res.output  # recorded long ago: nothing that new


def test_import_named_traces_and_the_credentials_env(tmp_path):
    traces = traces_of(RECORDED[0])
    tid = next(iter(traces))
    store = tmp_path / "s.db"
    with serving(Backend("jaeger", traces)) as backend:
        res = invoke("import", backend.url, tid, "--store", str(store), env={"HARVESTER_JAEGER_TOKEN": "tok-s3cr3t-42"})
        assert res.exit_code == 0, res.output
        assert backend.headers_seen["Authorization"] == "Bearer tok-s3cr3t-42"
    assert b"tok-s3cr3t-42" not in readable(store)
    assert invoke("traces", "show", tid, "--store", str(store)).exit_code == 0


@pytest.mark.parametrize(
    ("status", "headers", "body", "needles"),
    [
        (401, {}, b"", ["401 unauthorized", "set HARVESTER_JAEGER_TOKEN"]),
        (429, {"Retry-After": "60"}, b"", ["429 rate limited", "retry after 60 s"]),
        (500, {}, b"boom", ["500", "boom"]),
        (200, {"Content-Type": "text/html"}, b"<html>login</html>", ["not JSON", "is this jaeger?"]),
    ],
)
def test_backend_failures_are_one_line_and_store_nothing(tmp_path, status, headers, body, needles):
    traces = traces_of(RECORDED[0])
    tid = next(iter(traces))
    store = tmp_path / "s.db"
    assert invoke("ingest", RECORDED[1], "--store", str(store)).exit_code == 0
    before = listed(store)
    with serving(Backend("jaeger", traces)) as backend:
        backend.fail = (status, headers, body)
        one_line_error(invoke("import", backend.url, tid, "--store", str(store)), *needles)
        one_line_error(invoke("incident", tid, "--from", backend.url, "--why", "w", "--store", str(store),
                              "--cases", str(tmp_path / "c")), *needles)  # fmt: skip
    assert listed(store) == before and before
    assert not (tmp_path / "c").exists()


def test_a_short_rate_limit_is_waited_out(tmp_path):
    traces = traces_of(RECORDED[0])
    tid = next(iter(traces))
    with serving(Backend("tempo", traces)) as backend:
        backend.fail, backend.fail_times = (429, {"Retry-After": "0.2"}, b""), 2
        res = invoke("import", backend.url, tid, "--store", str(tmp_path / "s.db"))
        assert len(backend.requests) == 3
    assert res.exit_code == 0, res.output
    assert res.output.startswith("imported 1 trace")


def test_unknown_trace_unreachable_backend_and_half_an_import(tmp_path):
    traces = traces_of(RECORDED[0])
    tid = next(iter(traces))
    store = tmp_path / "s.db"
    for kind in ("jaeger", "tempo"):
        with serving(Backend(kind, traces)) as backend:
            one_line_error(invoke("import", backend.url, "f" * 32, "--store", str(store)), "holds no trace", "f" * 32)
            # the first trace is there, the second is not: nothing of either is stored
            one_line_error(invoke("import", backend.url, tid, "e" * 32, "--store", str(store)), "holds no trace")
            url = backend.url
    assert not store.exists()  # nothing read whole: the store is not even created
    one_line_error(invoke("import", url, tid, "--store", str(store)), "unreachable", "is the backend running")
    one_line_error(invoke("import", "zipkin://127.0.0.1:9411", "--store", str(store)), "unknown backend")
    one_line_error(invoke("import", url, "--limit", "0", "--store", str(store)), "--limit")
    one_line_error(invoke("import", url, "--since", "yesterday", "--store", str(store)), "--since")


# -- exported files -------------------------------------------------------------------------------
def test_incident_file_reads_every_backend_form(tmp_path):
    path = str(ROOT / "traces" / "frameworks" / "langchain-openinference-tool_error.json")
    traces = traces_of(path)
    tid = next(iter(traces))
    spans = traces[tid]
    ref = case_of(invoke("incident", tid, "--file", path, "--why", "w", "--cases", str(tmp_path / "ref"), "--json"))
    forms = {
        "jaeger-download.json": {"data": [jaeger_trace(spans)], "total": 0, "limit": 0, "offset": 0, "errors": None},
        "jaeger-trace.json": jaeger_trace(spans),
        "jaeger-v3.json": {"result": to_otlp(spans)},
        "tempo-v1.json": tempo_answer(spans, "batches"),
        "tempo-v2.json": tempo_answer(spans, "v2"),
    }
    for name, doc in forms.items():
        f = tmp_path / name
        f.write_bytes(orjson.dumps(doc))
        got = case_of(
            invoke("incident", tid, "--file", str(f), "--why", "w", "--cases", str(tmp_path / f"c-{name}"), "--json")
        )
        assert got == ref, name
    odd = tmp_path / "odd.json"
    odd.write_bytes(b'{"spans": []}')
    one_line_error(
        invoke("incident", tid, "--file", str(odd), "--why", "w", "--cases", str(tmp_path / "x")),
        "odd.json",
        "not a trace export harvester knows",
        "Jaeger download",
        "MLflow trace",
    )


def test_each_backend_page_names_its_credentials():
    pages = ROOT / "docs" / "backends"
    for page, env in [("phoenix", "PHOENIX_API_KEY"), ("mlflow", "MLFLOW_TRACKING_TOKEN"),
                      ("jaeger", "HARVESTER_JAEGER_TOKEN"), ("tempo", "HARVESTER_TEMPO_TOKEN")]:  # fmt: skip
        from harvester.intake.backends import reader

        assert env in (pages / f"{page}.md").read_text() and env in (pages / "index.md").read_text()
        assert env in reader(page).BACKEND.credentials


def test_imported_traces_harvest_and_rerecord_from_the_backend(tmp_path):
    traces: dict[str, list[SpanData]] = {}
    for name in SCENARIOS:
        traces.update(traces_of(str(ROOT / "traces" / "frameworks" / f"{name}.json")))
    store, cases = str(tmp_path / "s.db"), str(tmp_path / "cases")
    with serving(Backend("jaeger", traces)) as backend:
        res = invoke("import", backend.url, "--since", "3650d", "--store", store)
        assert res.exit_code == 0, res.output
        again = invoke("import", backend.url, "--since", "3650d", "--store", store)  # merged: nothing doubles
        assert len(listed(store)) == res.output.count("held:") == again.output.count("held:")
        res = invoke("harvest", "--store", store, "--cases", cases)
        assert res.exit_code == 0, res.output
        made = sorted((tmp_path / "cases" / "pending").glob("*.json"))
        assert len(made) >= len(SCENARIOS) - 1, res.output
        case_id = made[0].stem
        tid = orjson.loads(made[0].read_bytes())["source"]["trace_id"]
        res = invoke("rerecord", case_id, "--trace", tid, "--from", backend.url, "--store", store, "--cases", cases)
        assert res.exit_code == 0, res.output
        assert "no change in the recording" in res.output
    res = invoke("rerecord", case_id, "--from", backend.url, "--cases", cases)
    assert res.exit_code == 2 and "name the run to record from with --trace" in res.output


# -- a backend that misbehaves: one line, exit 2, no credential shown or sent elsewhere ---------
TID = "ab" * 16
TOKEN = {"HARVESTER_JAEGER_TOKEN": "tok-s3cr3t-42"}


def test_a_redirect_to_another_origin_is_refused_and_the_token_stays_home(tmp_path):
    traces = traces_of(RECORDED[0])
    tid = next(iter(traces))
    with serving(Backend("jaeger", traces)) as other:
        there = other.url.replace("jaeger://", "http://")

        def away(request, _):
            reply(request, 302, b"", {"Location": f"{there}{request.path}?sig=s3cr3t"})

        with loopback(away) as backend:
            res = invoke("import", backend.url("jaeger"), tid, "--store", str(tmp_path / "s.db"), env=TOKEN)
        assert other.requests == []  # the other host never heard from us, so never saw the token
    line = one_line_error(res, "302", "another origin", there, f"use {other.url}")
    assert "s3cr3t" not in line


def test_a_redirect_within_the_backend_is_followed_with_its_credentials(tmp_path):
    traces = traces_of(RECORDED[0])
    tid = next(iter(traces))
    held = Backend("jaeger", traces)

    def moved(request, _):
        if request.path.startswith("/v2/"):
            reply(request, *held.answer(request.path[3:], {}))
        else:
            reply(request, 308, b"", {"Location": f"/v2{request.path}"})

    with loopback(moved) as backend:
        res = invoke("import", backend.url("jaeger"), tid, "--store", str(tmp_path / "s.db"), env=TOKEN)
    assert res.exit_code == 0, res.output
    assert [s.path[:4] for s in backend.seen] == ["/api", "/v2/"]
    assert all(s.headers["Authorization"] == "Bearer tok-s3cr3t-42" for s in backend.seen)


@pytest.mark.parametrize(
    ("kind", "env"),
    [
        ("jaeger", {"HARVESTER_JAEGER_TOKEN": "s3cr3t\nX-Evil: 1"}),
        ("tempo", {"HARVESTER_TEMPO_TENANT": "s3cr3t\r\nX-Evil: 1"}),
        ("phoenix", {"PHOENIX_API_KEY": "s3cr3t\nX-Evil: 1"}),
        ("phoenix", {"PHOENIX_CLIENT_HEADERS": "api_key=s3cr3t%0AX-Evil:%201"}),
        ("mlflow", {"MLFLOW_TRACKING_TOKEN": "s3cr3t\x1b[2J"}),
    ],
)
def test_a_credential_a_header_cannot_carry_is_one_line_naming_its_variable(tmp_path, kind, env):
    with loopback(routes({})) as server:
        res = invoke("import", server.url(kind), TID, "--store", str(tmp_path / "s.db"), env=env)
    line = one_line_error(res, next(iter(env)), "set it again")
    assert "s3cr3t" not in line and "Evil" not in line
    assert server.seen == []  # nothing sent


def test_a_header_http_cannot_send_is_one_line_without_its_value():
    with loopback(routes({"/x": {}})) as server:
        target = parse_target(server.url("jaeger"))
        with pytest.raises(InputError, match="Authorization") as err:
            Client(target, headers={"Authorization": "Bearer s3cr3t\nX-Evil: 1"}, credentials="HARVESTER_JAEGER_TOKEN")
        assert "s3cr3t" not in str(err.value)
        client = Client(target)
        client.headers["Authorization"] = "Bearer s3cr3t\nX-Evil: 1"  # past the check: http.client refuses it
        with pytest.raises(BackendError) as err:
            client.get("/x")
    assert "s3cr3t" not in str(err.value) and "\n" not in str(err.value)
    assert server.seen == []


def _not_http(request, _):
    request.wfile.write(b"SSH-2.0-OpenSSH_9.6\r\n")
    request.close_connection = True


def _cut_short(request, _):
    request.send_response(200)
    request.send_header("Content-Length", "100")
    request.end_headers()
    request.wfile.write(b'{"data": [')
    request.close_connection = True


@pytest.mark.parametrize("answer", [_not_http, _cut_short], ids=["not-http", "cut-short"])
def test_an_answer_that_is_not_http_or_breaks_off_is_one_line(tmp_path, answer):
    with loopback(answer) as server:
        res = invoke("import", server.url("jaeger"), TID, "--store", str(tmp_path / "s.db"))
    one_line_error(res, "not HTTP or broke off", "is this jaeger?")


@pytest.mark.parametrize("kind", ["jaeger", "tempo", "phoenix"])
@pytest.mark.parametrize("bad", ["../../api/services", "ab cd", "zz" * 16, "ab/cd", "a" * 33, "ab\x1b[2J"])
def test_a_trace_id_that_is_not_one_is_refused_before_any_request(tmp_path, kind, bad):
    with loopback(routes({})) as server:
        res = invoke("import", server.url(kind), bad, "--store", str(tmp_path / "s.db"))
    one_line_error(res, repr(bad), "is not a")
    assert server.seen == []


def test_mlflow_trace_ids_of_every_form_reach_it_quoted(tmp_path):
    store = str(tmp_path / "s.db")
    with loopback(routes({})) as server:
        for asked in (f"tr-{TID}", TID.upper(), "nonsense", "a/../b"):
            one_line_error(invoke("import", server.url("mlflow"), asked, "--store", store), "holds no trace", asked)
        one_line_error(invoke("import", server.url("mlflow"), "tr-\x1b[2J", "--store", store), "not an MLflow trace id")
    paths = [s.path for s in server.seen]
    assert f"/api/3.0/mlflow/traces/tr-{TID}" in paths and f"/api/3.0/mlflow/traces/{TID}" in paths
    assert "/api/3.0/mlflow/traces/a%2F..%2Fb" in paths and not any("/../" in p or "\x1b" in p for p in paths)


_ARTIFACT = "/ajax-api/2.0/mlflow/get-trace-artifact"
_EXPERIMENTS = {"/api/2.0/mlflow/experiments/search": {"experiments": [{"experiment_id": "1"}]}}
SHAPES = [
    ("jaeger", {"/api/services": ["svc"]}, [], ["GET /api/services", "a list where an object was expected"]),
    ("jaeger", {"/api/services": {"data": "svc"}}, [], ["GET /api/services", "'data' is a string where a list"]),
    ("jaeger", {"/api/services": {"data": ["svc"]}, "/api/traces": {"data": [{"traceID": "zz", "spans": []}]}}, [],
     ["GET /api/traces", "traceID 'zz' is not a trace id"]),
    ("tempo", {"/api/search": [1]}, [], ["GET /api/search", "a list where an object was expected"]),
    ("tempo", {"/api/search": {"traces": [{"traceID": "xyz"}]}}, [], ["GET /api/search", "traceID 'xyz'"]),
    ("tempo", {"/api/search": {"traces": [{"traceID": "ab", "startTimeUnixNano": "soon"}]}}, [], ["GET /api/search"]),
    ("mlflow/exp", {"/api/2.0/mlflow/experiments/get-by-name": {"experiment": {"name": "exp"}}}, [],
     ["GET /api/2.0/mlflow/experiments/get-by-name", "experiment_id"]),
    ("mlflow", {"/api/2.0/mlflow/experiments/search": {"experiments": [{"name": "x"}]}}, [],
     ["POST /api/2.0/mlflow/experiments/search", "experiment_id"]),
    ("mlflow", {**_EXPERIMENTS, "/api/3.0/mlflow/traces/search": [1]}, [],
     ["POST /api/3.0/mlflow/traces/search", "a list where an object was expected"]),
    ("mlflow", {f"/api/3.0/mlflow/traces/tr-{TID}": [1], _ARTIFACT: {"spans": []}}, [TID],
     [f"GET /api/3.0/mlflow/traces/tr-{TID}", "a list where an object was expected"]),
    ("mlflow", {f"/api/3.0/mlflow/traces/tr-{TID}": {"trace": {"trace_info": {"tags": [1]}}}, _ARTIFACT: {}}, [TID],
     ["holds no trace"]),
    ("phoenix", {"/v1/projects/default/traces": {"data": [{"trace_id": "zz"}]}}, [],
     ["GET /v1/projects/default/traces", "trace_id 'zz' is not a trace id"]),
]  # fmt: skip


@pytest.mark.parametrize(("url", "answers", "ids", "needles"), SHAPES)
def test_an_answer_of_the_wrong_shape_is_one_line_naming_the_request(tmp_path, url, answers, ids, needles):
    kind, _, scope = url.partition("/")
    with loopback(routes(answers)) as server:
        res = invoke("import", server.url(kind) + f"/{scope}" * bool(scope), *ids, "--store", str(tmp_path / "s.db"))
    one_line_error(res, *needles)


@pytest.mark.parametrize("since", ["99999999w", "9" * 400 + "d", "0001-01-01"])
def test_a_since_before_1970_is_a_usage_error(tmp_path, since):
    with loopback(routes({"/v1/projects/default/traces": {"data": []}})) as server:
        res = invoke("import", server.url("phoenix"), "--since", since, "--store", str(tmp_path / "s.db"))
    one_line_error(res, "--since", "before 1970")
    assert server.seen == []


@pytest.mark.slow
def test_a_backend_trickling_its_answer_is_given_up_on_at_the_timeout(tmp_path):
    def trickle(request, _):
        request.send_response(200)
        request.send_header("Content-Length", "40")
        request.end_headers()
        for _ in range(40):  # 3 s in all; each byte well within the timeout of one read
            request.wfile.write(b" ")
            time.sleep(0.075)

    with loopback(trickle) as server:
        res = invoke("import", server.url("jaeger"), TID, "--timeout", "0.5", "--store", str(tmp_path / "s.db"))
    one_line_error(res, "took longer than 0.5 s", "--timeout")  # read whole, the 40 spaces are no JSON


def test_phoenix_answering_a_cursor_it_gave_before_is_one_line(tmp_path):
    def same_cursor(request, server):
        if len(server.seen) > 20:
            reply(request, 500, b"looped")
        else:
            reply(request, 200, {"data": [{"trace_id": TID}], "next_cursor": "c1"})

    with loopback(same_cursor) as server:
        res = invoke("import", server.url("phoenix"), "--limit", "5", "--store", str(tmp_path / "s.db"))
    one_line_error(res, "GET /v1/projects/default/traces", "next_cursor it had given before")
    assert len(server.seen) == 2


def test_an_error_answer_is_shown_as_one_short_redacted_line(tmp_path):
    secret = "ghp_" + "a1B2c3D4e5" * 4
    body = f"oops\r\x1b[2J\x07 token {secret}\n".encode() + b"x" * 500
    with serving(Backend("jaeger", traces_of(RECORDED[0]))) as backend:
        backend.fail = (500, {}, body)
        line = one_line_error(invoke("import", backend.url, TID, "--store", str(tmp_path / "s.db")), "500", "oops")
    assert secret not in line and "\x1b" not in line and "\x07" not in line
    assert len(line) < 200, line
