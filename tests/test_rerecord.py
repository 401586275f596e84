"""Refreshing a stale accepted case from a newer run: ``rerecord``, ``refresh``, ``harvester rerecord``
and ``harvester harvest --refresh``. The recording is taken from the new run; what the reviewer decided
stays; bad input is one line and exit 2, and leaves every case file as it was."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from harvester import checks
from harvester.case import AgentCase, CaseFolder, load_case, save_case
from harvester.cli import main as cli
from harvester.config import Config
from harvester.errors import InputError
from harvester.harvest import Refreshed, case_from_run, refresh, rerecord
from harvester.model import ErrorInfo, ToolCall
from harvester.replay import replay
from harvester.spans import to_otlp
from harvester.store import TraceStore
from tests.builders.agents import scripted
from tests.builders.cli import one_line_error
from tests.builders.runs import call, run
from tests.builders.store import agent_trace

PROMPT = "Can I return A1001?"
OLD_TRACE, NEW_TRACE = "a" * 32, "b" * 32
OLD_KB = {"query": "refund policy"}
NEW_KB = {"query": "return policy A1001"}
ORDER = {"order_id": "A1001"}
NEW_ANSWER = "Yes: within 30 days, and A1001 is 12 days old."
REVIEWED_CHECKS = [
    {"check": "answered"},
    {
        "check": "trajectory_match",
        "mode": "unordered",
        "args": "exact",
        "reference": [{"name": "kb_search", "args": OLD_KB}],
    },
    {"check": "excludes", "needles": ["I cannot help"]},
]


def old_run():
    return run(call("kb_search", args=OLD_KB, result="Refunds within 30 days."), prompt=PROMPT, trace=OLD_TRACE)


def new_run(*calls, trace=NEW_TRACE, started="2026-12-01T09:00:00Z", answer=NEW_ANSWER, **kw):
    calls = calls or (
        call("kb_search", args=NEW_KB, result="Returns accepted within 30 days."),
        call("get_order", args=ORDER, result={"days_since_delivery": 12}),
    )
    r = run(*calls, prompt=kw.pop("prompt", PROMPT), answer=answer, trace=trace, **kw)
    return r.model_copy(update={"started_at": started})


def reviewed_case(**edits) -> AgentCase:
    """The old run's case as a reviewer accepted it: every reviewer-owned field set by hand."""
    case = case_from_run(old_run(), config=Config())
    fields = {
        "status": "accepted",
        "why": "A return question must be answered from the 30-day policy",
        "tags": ["typical", "billing"],
        "checks": [dict(c) for c in REVIEWED_CHECKS],
        "required_elements": ["30 days"],
        "expected": "Yes, within 30 days",
        "forbidden_tools": ["issue_refund"],
        "ignore_args": {"kb_search": ["request_id"]},
        "strict_consumption": True,
        **edits,
    }
    return case.model_copy(update=fields)


REVIEWER_FIELDS = (
    "id",
    "status",
    "why",
    "tags",
    "required_elements",
    "expected",
    "forbidden_tools",
    "ignore_args",
    "strict_consumption",
    "strict_repeats",
    "inject_failures",
)


def reviewer_view(case: AgentCase) -> dict:
    return {name: getattr(case, name) for name in REVIEWER_FIELDS}


# -- rerecord -----------------------------------------------------------------------------------
def test_rerecord_takes_the_recording_from_the_new_run_and_keeps_every_reviewer_field():
    stale = reviewed_case()
    refreshed = rerecord(stale, new_run())
    assert isinstance(refreshed, Refreshed)
    new = refreshed.case
    assert [(f.tool, f.args, f.result) for f in new.fixtures] == [
        ("kb_search", NEW_KB, "Returns accepted within 30 days."),
        ("get_order", ORDER, {"days_since_delivery": 12}),
    ]
    assert new.recorded.trajectory == ["kb_search", "get_order"]
    assert new.recorded.answer == NEW_ANSWER
    assert new.min_steps == 2 and new.appropriate_tools == ["kb_search", "get_order"]
    assert reviewer_view(new) == reviewer_view(stale)
    assert new.status == "accepted" and new.strict_consumption is True
    assert new.source.trace_id == NEW_TRACE and new.source.seen == stale.source.seen + 1
    assert new.source.last_seen == "2026-12-01T09:00:00Z"


def test_a_trajectory_check_keeps_its_mode_and_args_and_takes_the_new_reference():
    new = rerecord(reviewed_case(), new_run()).case
    answered, trajectory, excludes = new.checks
    assert answered == REVIEWED_CHECKS[0] and excludes == REVIEWED_CHECKS[2]
    assert trajectory == {
        "check": "trajectory_match",
        "mode": "unordered",
        "args": "exact",
        "reference": [{"name": "kb_search", "args": NEW_KB}, {"name": "get_order", "args": ORDER}],
    }


def test_changes_say_what_the_new_recording_changed():
    changes = rerecord(reviewed_case(), new_run()).changes
    assert "trajectory: kb_search  =>  kb_search -> get_order" in changes
    assert '+ fixture get_order({"order_id":"A1001"})' in changes
    assert '+ fixture kb_search({"query":"return policy A1001"})' in changes
    assert '- fixture kb_search({"query":"refund policy"})' in changes
    assert "min_steps: 1  =>  2" in changes
    assert "appropriate_tools: ['kb_search']  =>  ['kb_search', 'get_order']" in changes
    assert "trajectory_match reference: 2 calls (mode kept)" in changes


def test_rerecording_from_the_cases_own_run_changes_nothing():
    case = reviewed_case()
    same = rerecord(case, old_run())
    assert same.changes == [] and same.case.source.seen == case.source.seen


def updated_result_run():
    """The same call and answer as the case's run; only the tool's result is new (the document was rewritten)."""
    kb = call("kb_search", args=OLD_KB, result="Refunds within 14 days.")
    return new_run(kb, answer=old_run().answer)


def test_a_new_result_for_the_same_call_is_a_change():
    refreshed = rerecord(reviewed_case(), updated_result_run())
    assert refreshed.case.fixtures[0].result == "Refunds within 14 days."
    assert refreshed.changes == ['~ fixture kb_search({"query":"refund policy"}): result changed']


def test_a_failure_that_replaced_a_result_is_a_change():
    failed = call("kb_search", "error", args=OLD_KB, error=ErrorInfo(type="TimeoutError", message="slow"))
    refreshed = rerecord(reviewed_case(), new_run(failed, answer=old_run().answer))
    assert refreshed.case.fixtures[0].error.type == "TimeoutError"
    assert '~ fixture kb_search({"query":"refund policy"}): result changed' in refreshed.changes


def test_the_stale_case_fails_against_the_changed_agent_and_the_rerecorded_one_passes():
    agent = scripted(("kb_search", NEW_KB), ("get_order", ORDER))
    stale = reviewed_case()
    (before,) = replay([stale.to_case()], lambda: agent).results
    assert not before.passed and before.no_fixture == 2
    (after,) = replay([rerecord(stale, new_run()).case.to_case()], lambda: agent).results
    assert after.passed, after.reasons()
    assert after.unused == 0 and after.no_fixture == 0


@pytest.mark.parametrize("mode", ["strict", "unordered", "subset", "superset"])
def test_the_new_reference_matches_the_run_it_was_taken_from_in_every_mode(mode):
    """A retried call (the first attempt failed) is part of what the run executed."""
    retried = new_run(
        call("get_order", "error", args=ORDER, error=ErrorInfo(type="TimeoutError", message="slow")),
        call("get_order", args=ORDER, result={"days_since_delivery": 12}),
    )
    spec = {"check": "trajectory_match", "mode": mode, "args": "exact", "reference": []}
    new = rerecord(reviewed_case(checks=[spec]), retried).case
    (kept,) = new.checks
    assert kept["mode"] == mode and kept["args"] == "exact"
    passed, detail = checks.run_check(checks.from_spec(kept), retried)
    assert passed, detail


def test_a_tool_the_case_forbids_never_becomes_part_of_what_the_case_expects():
    """The newer run executed the forbidden refund: the case keeps forbidding it, and neither its
    appropriate tools, its step floor nor its trajectory reference ask the replay to do it."""
    harmful = new_run(
        call("kb_search", args=NEW_KB, result="Returns accepted within 30 days."),
        call("issue_refund", args=ORDER, result={"ok": True}),
    )
    spec = {"check": "trajectory_match", "mode": "superset", "args": "ignore", "reference": []}
    new = rerecord(reviewed_case(checks=[spec], strict_consumption=False), harmful).case
    assert new.forbidden_tools == ["issue_refund"]
    assert "issue_refund" not in new.appropriate_tools and new.min_steps == 1
    assert [r["name"] for r in new.checks[0]["reference"]] == ["kb_search"]
    (result,) = replay([new.to_case()], lambda: scripted(("kb_search", NEW_KB))).results
    assert result.passed, result.reasons()  # an agent that no longer refunds passes


def test_rerecord_refuses_a_run_of_another_agent_or_prompt():
    case = reviewed_case()
    other_agent = new_run().model_copy(update={"agent": "billing"})
    with pytest.raises(InputError, match="--trace.*agent 'billing'"):
        rerecord(case, other_agent)
    with pytest.raises(InputError, match="--trace.*another prompt"):
        rerecord(case, new_run(prompt="Where is my parcel?"))


def test_rerecord_keeps_a_rejected_cases_reason():
    rejected = reviewed_case(status="rejected", rejected_why="duplicate of return-a1002")
    new = rerecord(rejected, new_run()).case
    assert new.status == "rejected" and new.rejected_why == "duplicate of return-a1002"


# -- refresh ------------------------------------------------------------------------------------
class Store:
    def __init__(self, *runs):
        self._runs = runs

    def runs(self, newest_first=True, **kw):
        yield from sorted(self._runs, key=lambda r: r.started_at or "", reverse=newest_first)


def test_refresh_rewrites_the_cases_with_a_newer_run_and_leaves_the_others_untouched(tmp_path):
    stale = reviewed_case()
    other = reviewed_case(id="order-status").model_copy(update={"prompt": "Where is order A1001?"})
    save_case(stale, tmp_path)
    save_case(other, tmp_path)
    before = (tmp_path / "order-status.json").read_bytes()
    done = refresh(Store(old_run(), new_run()), tmp_path)
    assert [r.case.id for r in done] == [stale.id]
    assert load_case(tmp_path / f"{stale.id}.json").recorded.trajectory == ["kb_search", "get_order"]
    assert (tmp_path / "order-status.json").read_bytes() == before
    assert refresh(Store(old_run(), new_run()), tmp_path) == []  # refreshed already: nothing newer


def test_refresh_saves_a_case_whose_only_change_is_a_result(tmp_path):
    save_case(reviewed_case(), tmp_path)
    (done,) = refresh(Store(old_run(), updated_result_run()), tmp_path)
    saved = load_case(tmp_path / f"{done.case.id}.json")
    assert saved.fixtures[0].result == "Refunds within 14 days." and saved.source.trace_id == NEW_TRACE


def test_refresh_ignores_older_runs_and_pending_cases(tmp_path):
    save_case(reviewed_case(), tmp_path)
    pending = reviewed_case(status="pending", id="pending-one")
    save_case(pending, tmp_path / "pending")
    snapshot = {p: p.read_bytes() for p in tmp_path.rglob("*.json")}
    older = new_run(started="2026-11-29T00:00:00Z")
    assert refresh(Store(older, old_run()), tmp_path) == []
    assert {p: p.read_bytes() for p in tmp_path.rglob("*.json")} == snapshot


def test_a_newer_run_with_sub_second_time_counts_as_newer():
    """The case was recorded at 01:02:03Z; a run at 01:02:03.500Z started after it."""
    case = reviewed_case()
    assert case.source.last_seen == "2026-11-30T01:02:03Z"
    from harvester.harvest._refresh import matching_runs

    later = new_run(started="2026-11-30T01:02:03.500Z")
    assert [r.trace_id for _, r in matching_runs([later], [case])] == [NEW_TRACE]


TIMEOUT = ErrorInfo(type="TimeoutError", message="kb timed out")


def failed_kb_run(args=NEW_KB, trace="9" * 32, started="2026-12-02T00:00:00Z"):
    return new_run(call("kb_search", "error", args=args, error=TIMEOUT), trace=trace, started=started)


def test_refresh_never_turns_a_typical_case_into_a_failure(tmp_path):
    """A night of timeouts is not how the agent now works: the typical case keeps its recording."""
    save_case(reviewed_case(), tmp_path)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*.json")}
    assert refresh(Store(old_run(), failed_kb_run()), tmp_path) == []
    assert {p: p.read_bytes() for p in tmp_path.rglob("*.json")} == before
    # the newest run of its kind is taken, even behind a newer failure
    (done,) = refresh(Store(old_run(), new_run(), failed_kb_run()), tmp_path)
    assert done.case.source.trace_id == NEW_TRACE


def test_refresh_keeps_a_regression_case_on_its_failure(tmp_path):
    regression = case_from_run(failed_kb_run(OLD_KB, trace=OLD_TRACE, started="2026-11-30T01:02:03Z"))
    regression = regression.model_copy(update={"status": "accepted", "id": "kb-timeout"})
    assert regression.source.failure_kind == "tool_error"
    save_case(regression, tmp_path)
    assert refresh(Store(new_run()), tmp_path) == []  # nothing failed: not the situation it guards
    (done,) = refresh(Store(new_run(), failed_kb_run()), tmp_path)
    assert done.case.id == "kb-timeout" and done.case.fixtures[0].args == NEW_KB
    assert done.case.fixtures[0].error.type == "TimeoutError"


def test_each_case_of_one_prompt_is_refreshed_from_a_run_of_its_own_kind(tmp_path):
    typical = reviewed_case()
    regression = case_from_run(failed_kb_run(OLD_KB, trace="8" * 32, started="2026-11-30T01:02:03Z"))
    regression = regression.model_copy(update={"status": "accepted", "id": "kb-timeout"})
    save_case(typical, tmp_path)
    save_case(regression, tmp_path)
    done = {r.case.id: r.case for r in refresh(Store(old_run(), new_run(), failed_kb_run()), tmp_path)}
    assert set(done) == {typical.id, "kb-timeout"}
    assert done[typical.id].source.trace_id == NEW_TRACE
    assert done["kb-timeout"].source.trace_id == "9" * 32


# -- the CLI ------------------------------------------------------------------------------------
@pytest.fixture
def project(tmp_path, monkeypatch):
    """A cases folder with the reviewed stale case, and a store with its run and a newer one."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARVESTER_CASES", raising=False)
    monkeypatch.setenv("HARVESTER_STORE", str(tmp_path / "traces.db"))
    case = reviewed_case()
    CaseFolder(tmp_path / "cases").save(case)
    with TraceStore(tmp_path / "traces.db") as store:
        store.add(old_run())
        store.add(new_run())
    return tmp_path, case


def invoke(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def files(root):
    return {p: p.read_bytes() for p in (root / "cases").rglob("*.json")}


def test_rerecord_help():
    res = invoke("rerecord", "--help")
    assert res.exit_code == 0 and "--trace TRACE_ID" in res.output and "--file" in res.output


def test_the_rerecord_command_takes_the_newest_run_and_prints_the_diff(project):
    root, case = project
    res = invoke("rerecord", case.id, "--cases", "cases")
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0] == f"{case.id}: changed:"
    assert "  trajectory: kb_search  =>  kb_search -> get_order" in lines
    assert '  + fixture get_order({"order_id":"A1001"})' in lines
    assert '  - fixture kb_search({"query":"refund policy"})' in lines
    assert "  min_steps: 1  =>  2" in lines
    assert lines[-1].startswith(f"rerecorded {case.id} from trace {NEW_TRACE[:12]} -> ")
    saved = load_case(root / "cases" / f"{case.id}.json")
    assert saved.source.trace_id == NEW_TRACE and saved.min_steps == 2
    assert reviewer_view(saved) == reviewer_view(case)


def test_the_rerecord_command_with_a_trace_and_json(project):
    root, case = project
    res = invoke("rerecord", case.id, "--trace", NEW_TRACE[:10], "--cases", "cases", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["id"] == case.id and out["trace_id"] == NEW_TRACE
    assert out["path"].endswith(f"{case.id}.json") and "min_steps: 1  =>  2" in out["changes"]
    assert load_case(root / "cases" / f"{case.id}.json").source.trace_id == NEW_TRACE


def test_the_rerecord_command_reads_a_trace_file(project):
    root, _ = project
    other = case_from_run(old_run(), config=Config()).model_copy(
        update={"id": "hi", "prompt": "hi", "status": "accepted"}
    )
    CaseFolder(root / "cases").save(other)
    (root / "t.json").write_bytes(json.dumps(to_otlp(agent_trace("c" * 32))).encode())
    res = invoke("rerecord", "hi", "--trace", "c" * 32, "--file", "t.json", "--cases", "cases")
    assert res.exit_code == 0, res.output
    saved = load_case(root / "cases" / "hi.json")
    assert [(f.tool, f.args) for f in saved.fixtures] == [("kb_search", {"query": "refund"})]
    assert '+ fixture kb_search({"query":"refund"})' in res.output


def test_the_rerecord_command_picks_the_run_of_the_case_in_a_trace_of_several(project):
    root, case = project
    triage = new_run(trace="d" * 32, prompt="Route this ticket", started="2026-12-01T08:59:00Z").model_copy(
        update={"run_id": "r0", "agent": "triage"}
    )
    support = new_run(trace="d" * 32).model_copy(update={"run_id": "r2"})
    with TraceStore(root / "traces.db") as store:
        store.add_many([triage, support])
    res = invoke("rerecord", case.id, "--trace", "d" * 32, "--cases", "cases")
    assert res.exit_code == 0, res.output
    assert load_case(root / "cases" / f"{case.id}.json").source.run_id == "r2"


def test_rerecord_of_an_unknown_case_is_one_line(project):
    root, case = project
    before = files(root)
    one_line_error(invoke("rerecord", "no-such-case", "--cases", "cases"), "'no-such-case'")
    assert files(root) == before


def test_rerecord_with_a_trace_of_another_agent_is_one_line_naming_trace(project):
    root, case = project
    with TraceStore(root / "traces.db") as store:
        store.add(new_run(trace="e" * 32).model_copy(update={"agent": "billing"}))
    before = files(root)
    one_line_error(invoke("rerecord", case.id, "--trace", "e" * 32, "--cases", "cases"), "--trace", "'billing'")
    assert files(root) == before


def test_rerecord_with_a_trace_of_another_prompt_is_one_line_naming_trace(project):
    root, case = project
    with TraceStore(root / "traces.db") as store:
        store.add(new_run(trace="f" * 32, prompt="Where is my parcel?"))
    before = files(root)
    one_line_error(invoke("rerecord", case.id, "--trace", "f" * 32, "--cases", "cases"), "--trace", "another prompt")
    assert files(root) == before


def test_rerecord_with_a_trace_not_in_the_store_is_one_line(project):
    root, case = project
    before = files(root)
    one_line_error(invoke("rerecord", case.id, "--trace", "0" * 32, "--cases", "cases"), "is not in the store")
    assert files(root) == before


def test_rerecord_without_a_newer_run_is_one_line(project):
    root, case = project
    assert invoke("rerecord", case.id, "--cases", "cases").exit_code == 0
    before = files(root)
    one_line_error(invoke("rerecord", case.id, "--cases", "cases"), "no stored run", "--trace")
    assert files(root) == before


def test_rerecord_without_a_newer_run_of_the_cases_kind_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HARVESTER_STORE", str(tmp_path / "traces.db"))
    case = reviewed_case()
    CaseFolder(tmp_path / "cases").save(case)
    with TraceStore(tmp_path / "traces.db") as store:
        store.add(old_run())
        store.add(failed_kb_run())
    before = files(tmp_path)
    one_line_error(invoke("rerecord", case.id, "--cases", "cases"), "failure kind (none)", "--trace")
    assert files(tmp_path) == before
    # named explicitly, the failed run is the reviewer's choice
    assert invoke("rerecord", case.id, "--trace", "9" * 32, "--cases", "cases").exit_code == 0
    assert load_case(tmp_path / "cases" / f"{case.id}.json").fixtures[0].error.type == "TimeoutError"


def test_rerecord_file_without_trace_is_a_usage_error(project):
    root, case = project
    before = files(root)
    res = invoke("rerecord", case.id, "--file", "t.json", "--cases", "cases")
    assert res.exit_code == 2 and "--trace" in res.output and "Traceback" not in res.output
    assert files(root) == before


def test_harvest_refresh_rerecords_stale_cases_and_leaves_the_rest_byte_for_byte(project):
    root, case = project
    untouched = reviewed_case(id="order-status").model_copy(update={"prompt": "Where is order A1001?"})
    CaseFolder(root / "cases").save(untouched)
    before = (root / "cases" / "order-status.json").read_bytes()
    res = invoke("harvest", "--refresh", "--cases", "cases")
    assert res.exit_code == 0, res.output
    assert f"{case.id}: changed:" in res.output and "  min_steps: 1  =>  2" in res.output
    assert "order-status" not in res.output
    assert load_case(root / "cases" / f"{case.id}.json").source.trace_id == NEW_TRACE
    assert (root / "cases" / "order-status.json").read_bytes() == before
    again = invoke("harvest", "--refresh", "--cases", "cases", "--json")
    assert json.loads(again.stdout)["refreshed"] == {}


def test_harvest_refresh_json_lists_the_changes(project):
    _, case = project
    res = invoke("harvest", "--refresh", "--cases", "cases", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert list(out["refreshed"]) == [case.id] and "min_steps: 1  =>  2" in out["refreshed"][case.id]
    assert "refreshed" not in json.loads(invoke("harvest", "--cases", "cases", "--json").stdout)


def test_harvest_without_refresh_never_touches_an_accepted_case(project):
    root, case = project
    before = (root / "cases" / f"{case.id}.json").read_bytes()
    assert invoke("harvest", "--cases", "cases").exit_code == 0
    assert (root / "cases" / f"{case.id}.json").read_bytes() == before


def test_a_call_awaiting_approval_in_the_new_run_gets_no_fixture():
    """A call the newer run only asked for (awaiting a human) did not run: nothing to serve."""
    waiting = new_run(
        call("kb_search", args=NEW_KB, result="Returns accepted within 30 days."),
        ToolCall(name="issue_refund", args=ORDER, status="awaiting"),
        stop="deferred",
    )
    new = rerecord(reviewed_case(), waiting).case
    assert [f.tool for f in new.fixtures] == ["kb_search"] and new.recorded.awaiting == ["issue_refund"]


def test_the_old_run_of_a_refreshed_case_is_not_proposed_again(project):
    """After a rerecord the case has the new path's signature; its old runs are still its own."""
    root, case = project
    assert invoke("harvest", "--refresh", "--cases", "cases").exit_code == 0
    refreshed = load_case(root / "cases" / f"{case.id}.json")
    assert refreshed.source.earlier_signatures == [case.source.signature]
    assert invoke("harvest", "--cases", "cases").exit_code == 0
    assert list((root / "cases" / "pending").glob("*.json")) == []  # the old run came back as nothing
