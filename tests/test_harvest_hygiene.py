"""Harvested cases that expect what the run did: deferred runs, incident twins, seen counted once,
mutating_tools that name nothing, and accept refusing a case its own notes call broken."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from harvester.case import CaseFolder, load_case, save_case
from harvester.cli import main as cli
from harvester.config import Config
from harvester.errors import InputError
from harvester.harvest import case_from_run, harvest
from harvester.model import ToolCall
from tests.builders.runs import call, run

CONFIG = Config(mutating_tools=["issue_refund"])


class Store:
    def __init__(self, *runs):
        self._runs = runs

    def runs(self, failed=None, agent=None, since=None, until=None, limit=None, newest_first=True):
        yield from self._runs


# -- deferred runs ------------------------------------------------------------------------------
def _awaiting_run(**kw):
    return run(
        call("get_order", args={"order_id": "A1001"}),
        ToolCall(name="issue_refund", args={"order_id": "A1001", "amount": 40}, status="awaiting"),
        prompt="Refund order A1001",
        answer=None,
        stop="deferred",
        **kw,
    )


def test_a_run_awaiting_approval_is_a_deferred_case_not_a_denial():
    case = case_from_run(_awaiting_run(), config=CONFIG)
    assert case.source.failure_kind is None  # waiting for a human is not a failure
    assert case.checks == [
        {"check": "stopped_with", "stop": "deferred"},
        {"check": "awaiting", "tools": ["issue_refund"]},
        {
            "check": "trajectory_match",
            "reference": [{"name": "get_order", "args": {"order_id": "A1001"}}],
            "mode": "superset",
            "args": "ignore",
        },
    ]
    assert "deferred" in case.tags and "typical" in case.tags
    assert case.recorded.awaiting == ["issue_refund"] and case.recorded.denied == []
    assert [f.tool for f in case.fixtures] == ["get_order"]  # nothing ran for the awaiting call
    assert "waiting for approval of issue_refund" in case.why and "denied" not in case.why


def test_the_deferred_case_passes_on_the_run_that_made_it_and_fails_one_that_answers():
    from harvester.replay import evaluate

    case = case_from_run(_awaiting_run(), config=CONFIG).to_case()
    assert all(c.passed for c in evaluate(case, _awaiting_run())), evaluate(case, _awaiting_run())
    answered = run(call("get_order", args={"order_id": "A1001"}), prompt="Refund order A1001", answer="Done.")
    failed = {c.name: c.detail for c in evaluate(case, answered) if not c.passed}
    assert "stopped_with(deferred)" in failed and "awaiting(issue_refund)" in failed


def test_a_denied_request_is_still_a_blocked_action():
    denied = run(call("issue_refund", status="blocked"), prompt="Refund order A1001", answer="I can't do that.")
    case = case_from_run(denied, config=CONFIG)
    assert case.source.failure_kind == "blocked_action" and case.recorded.denied == ["issue_refund"]


def test_an_awaiting_mutating_call_is_not_an_unintended_action_of_an_incident():
    case = case_from_run(_awaiting_run(), config=CONFIG, incident=True)
    assert case.source.failure_kind != "unintended_action"  # nothing executed: the refund only waits


# -- seen, twins, mutating tools ------------------------------------------------------------------
def _refund_run(trace: str, started: str = "2026-11-30T01:02:03Z"):
    r = run(
        call("get_order", args={"order_id": "A1001"}),
        call("issue_refund", args={"order_id": "A1001"}),
        prompt="Where is my order A1001?",
        trace=trace,
    )
    return r.model_copy(update={"started_at": started})


def test_an_incidents_own_run_is_never_counted_again(tmp_path):
    """The incident's source run, met again by a harvest, is not a second sighting of its situation."""
    # a failed call: the same failure kind whether reported or harvested, so the same signature
    source = run(call("get_order", status="error"), prompt="Where is my order A1001?", trace="a" * 32)
    source = source.model_copy(update={"started_at": None})
    incident = case_from_run(source, config=Config(), incident=True)
    save_case(incident, tmp_path / "pending")
    result = harvest(Store(source, source), tmp_path, config=Config())
    assert result.new == 0 and load_case(tmp_path / "pending" / f"{incident.id}.json").source.seen == 1


def test_a_run_repeating_an_accepted_incident_is_its_twin_and_never_lists_the_harm_as_appropriate(tmp_path):
    incident = case_from_run(_refund_run("a" * 32), config=CONFIG, incident=True)
    incident.status = "accepted"
    save_case(incident, tmp_path)
    result = harvest(Store(_refund_run("b" * 32)), tmp_path, config=Config())  # a config without mutating tools
    assert result.new == 1 and result.twins == 1
    [twin] = CaseFolder(tmp_path).ids() - {incident.id}
    case = load_case(tmp_path / "pending" / f"{twin}.json")
    assert "issue_refund" not in case.appropriate_tools and "issue_refund" in case.forbidden_tools
    assert "twin" in case.tags and any(incident.id in n for n in case.review_notes)
    assert case.blocking_notes() == []  # the twin note informs; it does not stop accept


def test_a_mutating_tool_that_matches_no_stored_tool_is_a_warning_with_the_closest(tmp_path):
    r = run(call("email.send"), call("get_order"), prompt="Mail me the invoice")
    result = harvest(Store(r), tmp_path, config=Config(mutating_tools=["send_email", "get_*"]))
    assert result.warnings == [
        "mutating_tools: 'send_email' matches no tool the harvested runs called (closest: email.send)"
    ]


def test_incident_without_mutating_tools_says_how_to_forbid(tmp_path, monkeypatch):
    from harvester.spans import to_otlp
    from tests.builders.store import agent_trace

    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.json").write_bytes(json.dumps(to_otlp(agent_trace("c" * 32))).encode())
    res = CliRunner().invoke(cli, ["incident", "c" * 32, "--why", "wrong", "--file", "t.json"])
    assert res.exit_code == 0, res.output
    assert "if a tool did harm, run again with --forbid TOOL (it executed: kb_search)" in res.stderr


# -- accept refuses a broken case -----------------------------------------------------------------
def _broken_case(tmp_path):
    r = run(call("kb_search", truncated=True), prompt="What is the refund policy?")
    case = case_from_run(r, config=CONFIG)
    save_case(case, tmp_path / "pending")
    return case


def test_accept_refuses_a_case_its_notes_call_broken_unless_forced(tmp_path):
    case = _broken_case(tmp_path)
    folder = CaseFolder(tmp_path)
    with pytest.raises(InputError, match="is not ready: fixture 0 .* truncated"):
        folder.accept(case.id)
    assert (tmp_path / "pending" / f"{case.id}.json").is_file()  # nothing moved
    folder.accept(case.id, force=True)
    assert load_case(tmp_path / f"{case.id}.json").status == "accepted"


def test_the_accept_command_prints_the_notes_and_exits_2(tmp_path):
    case = _broken_case(tmp_path)
    res = CliRunner().invoke(cli, ["accept", case.id, "--cases", str(tmp_path)])
    assert res.exit_code == 2 and "truncated" in res.output and "--force" in res.output
    assert "Traceback" not in res.output
    forced = CliRunner().invoke(cli, ["accept", case.id, "--cases", str(tmp_path), "--force"])
    assert forced.exit_code == 0 and "warning:" in forced.stderr


def test_review_asks_before_accepting_a_broken_case(tmp_path):
    case = _broken_case(tmp_path)
    res = CliRunner().invoke(cli, ["review", case.id, "--cases", str(tmp_path)], input="a\nn\ns\n")
    assert "broken: fixture 0" in res.output and "accept it anyway?" in res.output
    assert (tmp_path / "pending" / f"{case.id}.json").is_file()
