"""The case commands through click's CliRunner: output, files moved, one-line errors with exit 2."""

from __future__ import annotations

import json

import orjson
import pytest
from click.testing import CliRunner
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from harvester.case import AgentCase, load_case, save_case
from harvester.cli import main
from harvester.harvest._store import NO_MUTATING_TOOLS
from harvester.instrument import agent_run, tool
from harvester.model import ErrorInfo, Run, ToolCall
from harvester.spans import from_readable, to_otlp
from harvester.store import TraceStore
from tests.builders.cli import one_line_error

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def incident_run(trace_id: str = TRACE) -> Run:
    return Run(
        trace_id=trace_id,
        run_id="r1",
        agent="support",
        prompt="Refund order A1001 please",
        answer="Done, refunded.",
        stop="answered",
        started_at="2026-11-30T01:02:03Z",
        cost=0.004,
        calls=[
            ToolCall(name="kb_search", args={"query": "refund policy"}, result="Refunds within 30 days"),
            ToolCall(
                name="get_order",
                args={"order_id": "A1001"},
                status="error",
                error=ErrorInfo(type="timeout", message="orders-db timeout"),
            ),
            ToolCall(name="get_order", args={"order_id": "A1001"}, result={"days_since_delivery": 45}),
            ToolCall(name="issue_refund", args={"order_id": "A1001"}, result={"ok": True}),
        ],
    )


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A project folder with a config, and a trace store ($HARVESTER_STORE) holding the incident run."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARVESTER_CASES", raising=False)
    monkeypatch.setenv("HARVESTER_STORE", str(tmp_path / "traces.db"))
    (tmp_path / "harvester.toml").write_text('mutating_tools = ["issue_refund"]\n')
    store = TraceStore(tmp_path / "traces.db")
    store.add(incident_run())
    yield tmp_path, store
    store.close()


def invoke(*args, input=None):
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


def test_every_command_has_help():
    for cmd in (
        ["harvest"],
        ["incident"],
        ["review"],
        ["accept"],
        ["reject"],
        ["cases", "list"],
        ["cases", "show"],
        ["suite", "bump"],
    ):
        result = invoke(*cmd, "--help")
        assert result.exit_code == 0 and "Usage:" in result.output and len(result.output) > 200


def test_incident_writes_a_pending_regression_case(env):
    root, _ = env
    result = invoke(
        "incident",
        TRACE,
        "--why",
        "refunded without approval",
        "--require",
        "30 days",
        "--forbid",
        "send_email",
        "--tag",
        "billing",
    )
    assert result.exit_code == 0, result.output
    path = root / "cases" / "pending" / "refund-order-a1001.json"
    assert f"case refund-order-a1001 -> {path.relative_to(root)}" in result.output or str(path) in result.output
    assert "trajectory:  kb_search -> get_order -> issue_refund" in result.output
    assert "fixtures:    4" in result.output and "min_steps:   2" in result.output
    assert "forbidden:   issue_refund, send_email" in result.output
    assert "tags:        regression, unintended_action, billing" in result.output
    case = load_case(path)
    assert case.why == "refunded without approval" and case.required_elements == ["30 days"]
    assert case.source.failure_kind == "unintended_action" and case.max_cost == 0.008
    again = invoke("incident", TRACE, "--why", "same again", "--json")
    assert json.loads(again.stdout)["id"] == "refund-order-a1001-2"  # a second angle on one run is allowed
    assert "note: this run is already case refund-order-a1001" in again.stderr


def test_incident_for_an_unknown_trace_lists_near_ids(env):
    line = one_line_error(
        invoke("incident", TRACE[:6] + "ffffffff", "--why", "x"), "is not in the store", TRACE, "harvester ingest FILE"
    )
    assert "Traceback" not in line


def test_incident_from_an_otlp_file(env, tmp_path):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))

    @tool
    def issue_refund(order_id: str) -> dict:
        return {"refunded": order_id}

    with agent_run("support", "Refund A1001 now", model="m", tracer_provider=provider) as run:
        calls = run.model_call("m", tool_calls=[{"name": "issue_refund", "arguments": {"order_id": "A1001"}}])
        issue_refund(**calls[0]["arguments"])
        run.finish("Refunded.")
    spans = [from_readable(s) for s in exporter.get_finished_spans()]
    otlp = tmp_path / "trace.json"
    otlp.write_bytes(orjson.dumps(to_otlp(spans)))
    trace_id = spans[0].trace_id
    result = invoke("incident", trace_id, "--why", "refund without approval", "--file", str(otlp), "--json")
    assert result.exit_code == 0, result.output
    case = json.loads(result.output)["case"]
    assert case["forbidden_tools"] == ["issue_refund"] and case["source"]["trace_id"] == trace_id
    assert case["fixtures"][0]["args"] == {"order_id": "A1001"}

    # a trace whose spans hold no agent run: clear error, exit 2
    bare = tmp_path / "bare.json"
    tool_only = [s for s in spans if s.name.startswith("execute_tool")]
    for s in tool_only:
        s.parent_id = None
    bare.write_bytes(orjson.dumps(to_otlp(tool_only)))
    one_line_error(invoke("incident", trace_id, "--why", "x", "--file", str(bare)), "no agent run", str(bare))
    one_line_error(invoke("incident", "0" * 32, "--why", "x", "--file", str(otlp)), "no spans of trace")
    one_line_error(invoke("incident", trace_id, "--why", "x", "--file", str(tmp_path / "none.json")), "cannot read")


def test_harvest_summary_and_json(env):
    root, store = env
    store.add_many(
        [
            Run(
                trace_id=f"{i:032x}",
                agent="support",
                prompt=f"Where is order {i}?",
                answer="On its way.",
                stop="answered",
                calls=[ToolCall(name="get_order", args={"order_id": i}, result="shipped")],
            )
            for i in range(3)
        ]
    )
    result = invoke("harvest")
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[0] == "harvested 4 runs into 2 cases (new 2, updated 0, skipped 0 reviewed)"
    again = invoke("harvest", "--json", "--failed-only")
    data = json.loads(again.output)
    assert (data["runs"], data["new"], data["updated"]) == (1, 0, 0)  # already counted: not counted again
    (order_case,) = (root / "cases/pending").glob("order-*.json")  # named after the first run read
    assert load_case(order_case).source.seen == 3


def test_harvest_notes_a_project_with_no_mutating_tools_once_its_cases_hold_tool_calls(env):
    """Without ``mutating_tools`` a case has no ``order`` rule and no ``strict_repeats``: a second refund
    passes. Harvest says so in one line on stderr (in ``--json``, under ``notes``), what setting it
    turns on and where, only when a new case holds a tool call."""
    root, store = env
    hello = Run(trace_id="e" * 32, agent="support", prompt="Hello", answer="Hi.", stop="answered")
    store.add(hello.model_copy(update={"started_at": "2026-12-01T00:00:00Z"}))  # newer than the refund
    (root / "harvester.toml").write_text("")
    no_calls = invoke("harvest", "--limit", "1")  # newest first: the run with no tool call
    assert no_calls.exit_code == 0 and "mutating_tools" not in no_calls.output
    result = invoke("harvest")
    assert result.exit_code == 0, result.output
    assert "mutating_tools" not in result.stdout
    (note,) = result.stderr.splitlines()
    assert note == f"note: {NO_MUTATING_TOOLS}" and note.startswith("note: no mutating_tools configured")
    assert "order" in note and "strict_repeats" in note and "harvester.toml" in note
    for path in (root / "cases" / "pending").glob("*.json"):
        path.unlink()
    assert json.loads(invoke("harvest", "--json").output)["notes"] == [NO_MUTATING_TOOLS]
    for path in (root / "cases" / "pending").glob("*.json"):
        path.unlink()
    (root / "harvester.toml").write_text('mutating_tools = ["issue_refund"]\n')
    configured = invoke("harvest", "--json")
    assert configured.exit_code == 0 and json.loads(configured.output)["notes"] == []
    assert "note:" not in invoke("harvest").output


def test_accept_and_reject_move_files(env):
    root, _ = env
    invoke("incident", TRACE, "--why", "refunded without approval")
    result = invoke("accept", "refund-order-a1001", "--expected", "Explain the window", "--require", "30 days")
    assert result.exit_code == 0
    assert not (root / "cases/pending/refund-order-a1001.json").exists()
    case = load_case(root / "cases/refund-order-a1001.json")
    assert case.status == "accepted" and case.expected == "Explain the window" and case.required_elements == ["30 days"]
    result = invoke("reject", "refund-order-a1001", "--why", "duplicate of another case", "--json")
    assert json.loads(result.output)["status"] == "rejected"
    case = load_case(root / "cases/rejected/refund-order-a1001.json")
    assert case.rejected_why == "duplicate of another case" and not (root / "cases/refund-order-a1001.json").exists()
    one_line_error(invoke("accept", "refund-order-a100"), "no case 'refund-order-a100'", "did you mean")
    assert invoke("reject", "refund-order-a1001").exit_code == 2  # --why is required


def test_review_accept_edit_reject_skip(env):
    root, store = env
    store.add(
        Run(
            trace_id="b" * 32,
            agent="support",
            prompt="What is the refund policy?",
            answer="30 days.",
            stop="answered",
            calls=[ToolCall(name="kb_search", args={"q": "refund"}, result="30 days")],
        )
    )
    store.add(
        Run(
            trace_id="c" * 32,
            agent="support",
            prompt="Cancel my subscription",
            answer="Cancelled.",
            stop="answered",
            calls=[ToolCall(name="cancel", args={}, result="ok")],
        )
    )
    invoke("harvest")
    ids = sorted(p.stem for p in (root / "cases/pending").glob("*.json"))
    assert ids == ["cancel-subscription", "refund-order-a1001", "refund-policy"]
    # cancel-subscription: edit min_steps (bad value first), then accept; refund-order: reject; refund-policy: skip
    answers = "e\nmin_steps\nlots\ne\nmin_steps\n5\ne\ntags\nbilling, smoke\na\nr\nnot useful\ns\n"
    result = invoke("review", input=answers)
    assert result.exit_code == 0, result.output
    assert "not changed: min_steps" in result.output
    assert "Cancel my subscription" in result.output and "cancel({}) -> ok" in result.output
    assert "reviewed: 1 accepted, 1 rejected, 1 skipped" in result.output
    accepted = load_case(root / "cases/cancel-subscription.json")
    assert accepted.min_steps == 5 and accepted.tags == ["billing", "smoke"] and accepted.status == "accepted"
    assert load_case(root / "cases/rejected/refund-order-a1001.json").rejected_why == "not useful"
    assert load_case(root / "cases/pending/refund-policy.json").status == "pending"
    (root / "empty").mkdir()
    assert "no pending cases" in invoke("review", "--cases", str(root / "empty")).output
    one_line_error(invoke("review", "--cases", str(root / "missing")), "no such cases folder")


def test_review_one_id_and_quit(env):
    root, _ = env
    invoke("incident", TRACE, "--why", "x")
    result = invoke("review", "refund-order-a1001", input="q\n")
    assert result.exit_code == 0 and "[TRUNCATED]" not in result.output
    assert "error timeout: orders-db timeout" in result.output
    assert (root / "cases/pending/refund-order-a1001.json").exists()


def test_cases_list_and_show(env):
    root, _ = env
    invoke("incident", TRACE, "--why", "refunded without approval", "--tag", "billing")
    listing = invoke("cases", "list")
    assert listing.output.splitlines()[0].split() == ["ID", "STATUS", "TAGS", "SEEN", "WHY"]
    assert "refund-order-a1001" in listing.output and "refunded without approval" in listing.output
    data = json.loads(invoke("cases", "list", "--json", "--tag", "billing").output)
    assert data == [
        {
            "id": "refund-order-a1001",
            "status": "pending",
            "tags": ["regression", "unintended_action", "billing"],
            "seen": 1,
            "why": "refunded without approval",
            "failure_kind": "unintended_action",
        }
    ]
    assert json.loads(invoke("cases", "list", "--json", "--status", "accepted").output) == []
    shown = invoke("cases", "show", "refund-order-a1001", "--json")
    assert json.loads(shown.output)["forbidden_tools"] == ["issue_refund"]
    assert "forbidden_tools:   issue_refund" in invoke("cases", "show", "refund-order-a1001").output
    one_line_error(invoke("cases", "show", "nope"), "no case 'nope'")


def test_broken_case_file_is_one_line_exit_2(env):
    root, _ = env
    invoke("incident", TRACE, "--why", "x")
    path = root / "cases/pending/refund-order-a1001.json"
    data = orjson.loads(path.read_bytes())
    data["checks"].append({"check": "vibes"})
    path.write_bytes(orjson.dumps(data))
    at = f"checks[{len(data['checks']) - 1}]"
    one_line_error(invoke("cases", "list"), str(path.relative_to(root)), at, "unknown check 'vibes'")
    path.write_text("{")
    one_line_error(invoke("review"), "invalid JSON")


def test_bad_config_is_one_line_exit_2(env):
    root, _ = env
    (root / "harvester.toml").write_text('mutating_tool = ["x"]\n')
    one_line_error(invoke("cases", "list"), "harvester.toml", "unknown key 'mutating_tool'")


def test_config_cases_dir_and_env(env, monkeypatch):
    root, _ = env
    (root / "harvester.toml").write_text('cases_dir = "golden"\n')
    invoke("incident", TRACE, "--why", "x")
    assert (root / "golden/pending/refund-order-a1001.json").exists()
    monkeypatch.setenv("HARVESTER_CASES", str(root / "elsewhere"))
    invoke("incident", TRACE, "--why", "x")
    assert (root / "elsewhere/pending/refund-order-a1001.json").exists()


def test_suite_bump(env):
    root, _ = env
    invoke("incident", TRACE, "--why", "x")
    invoke("accept", "refund-order-a1001")
    first = invoke("suite", "bump", "--name", "support")
    assert first.output.startswith("suite support bumped to 1.0.0 (1 accepted cases")
    assert invoke("suite", "bump").output.startswith("suite support unchanged at 1.0.0")
    invoke("incident", TRACE, "--why", "y")
    invoke("accept", "refund-order-a1001-2")
    data = json.loads(invoke("suite", "bump", "--json").output)
    assert data["version"] == "1.1.0" and data["changed"] and data["cases"] == 2
    assert json.loads((root / "cases/suite.json").read_text())["version"] == "1.1.0"


def test_progress_shows_a_bar_or_a_running_count(capsys):
    """The library reports ``progress(done, total)``; the CLI's one bar draws it, whatever the command."""
    from harvester.cli import ProgressBar

    with ProgressBar("harvesting", show=True, total=200) as update:
        update(100, None)  # harvest does not know the total; the CLI counted the store
        update(200, None)
    bar = capsys.readouterr().err
    assert bar.startswith("harvesting")  # click draws the bar itself only on a terminal
    with ProgressBar("harvesting", show=True, unit="runs") as update:
        update(100, None)
    assert "harvesting: 100 runs" in capsys.readouterr().err
    with ProgressBar("ingesting", show=False) as update:
        update(1, 2)
    with ProgressBar("normalizing", show=True, min_total=2000) as update:
        update(10, 100)  # quick work: no bar
    assert capsys.readouterr().err == ""


def test_review_input_that_ends_early_is_one_line_exit_2(env):
    root, _ = env
    invoke("incident", TRACE, "--why", "x")
    result = invoke("review", input="e\ntags\nbilling\n")  # edits, then the piped answers run out
    assert result.exit_code == 2 and "Aborted" not in result.output
    assert (
        "error: review stopped before the end (input ended or interrupted); saved so far: 0 accepted, "
        "0 rejected, 0 skipped\n"
    ) in result.output
    assert "billing" in (root / "cases/pending/refund-order-a1001.json").read_text()


def test_review_edit_keeps_a_field_when_enter_is_pressed(env):
    """The edit prompt offers the field's value: Enter keeps it (it offered '-', so Enter cleared tags
    and min_steps, whose automatic check went with it, and the file was written at once)."""
    import json

    root, _ = env
    invoke("incident", TRACE, "--why", "x", "--tag", "billing")
    path = root / "cases/pending/refund-order-a1001.json"
    before = json.loads(path.read_text())
    assert before["tags"] and before["min_steps"] is not None
    for field in ("tags", "min_steps", "why"):
        result = invoke("review", input=f"e\n{field}\n\ns\n")
        assert result.exit_code == 0, result.output
        assert "comma-separated" in result.output if field == "tags" else "comma-separated" not in result.output
    after = json.loads(path.read_text())
    assert {k: after[k] for k in ("tags", "min_steps", "why")} == {k: before[k] for k in ("tags", "min_steps", "why")}


def test_plugins_register_custom_checks_before_cases_load(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARVESTER_CASES", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "shop_checks.py").write_text(
        "from harvester import checks\n"
        "@checks.register('mentions_order')\n"
        "def mentions_order(order_id):\n"
        "    return lambda run: (order_id in (run.answer or ''), 'looked for ' + order_id)\n"
    )
    case = AgentCase(
        id="order-status",
        status="accepted",
        why="w",
        prompt="Where is A1002?",
        checks=[{"check": "mentions_order", "order_id": "A1002"}],
    )
    save_case(case, tmp_path / "cases")
    (tmp_path / "harvester.toml").write_text("")
    one_line_error(invoke("cases", "list"), "unknown check 'mentions_order'")
    (tmp_path / "harvester.toml").write_text('plugins = ["shop_checks"]\n')
    try:
        assert "order-status" in invoke("cases", "list").output
    finally:
        from harvester import checks

        checks.REGISTRY.pop("mentions_order", None)
    (tmp_path / "harvester.toml").write_text('plugins = ["no_such_module_here"]\n')
    one_line_error(invoke("cases", "list"), "harvester.toml", "plugins", "no_such_module_here")


def test_a_mistyped_store_is_an_error_not_a_new_empty_store(env):
    root, _ = env
    for args in (["harvest", "--store", "typo.db"], ["incident", "ab" * 16, "--why", "x", "--store", "typo.db"]):
        one_line_error(invoke(*args), "typo.db", "no trace store here yet")
    assert not (root / "typo.db").exists()


def test_an_incident_twice_says_so(env):
    root, store = env
    trace_id = next(iter(store.runs())).trace_id
    assert invoke("incident", trace_id, "--why", "first").exit_code == 0
    again = CliRunner().invoke(main, ["incident", trace_id, "--why", "again"])
    assert again.exit_code == 0 and "note: this run is already case" in again.stderr


def test_an_incident_needs_a_real_why(env):
    res = CliRunner().invoke(main, ["incident", TRACE, "--why", "   "])
    assert res.exit_code == 2 and "say what went wrong" in res.output


def test_serve_warns_when_reachable_without_a_token():
    from harvester.cli.serve import exposure_warning

    assert exposure_warning("0.0.0.0", None).startswith("warning: 0.0.0.0 accepts traces")
    assert exposure_warning("0.0.0.0", "s3cret") is None and exposure_warning("127.0.0.1", None) is None


def test_harvest_after_incident_adds_no_twin_of_the_incident(env):
    """An incident's case has its own failure kind (so another signature): harvest must still know the run."""
    root, _ = env
    assert invoke("incident", TRACE, "--why", "refunded without approval").exit_code == 0
    result = invoke("harvest", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["new"] == 0 and out["counted"] == 1
    assert sorted(p.name for p in (root / "cases" / "pending").iterdir()) == ["refund-order-a1001.json"]
