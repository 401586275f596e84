"""An incident reached through a handoff (OpenAI Agents SDK, offline): the handoff that only led to the
forbidden refund is not part of what the incident case requires, so the fixed agent passes it, with or
without handing over, and the agent that made the incident still fails it, by name.

The whole loop as a user runs it: production capture, ``harvester incident``, ``accept``, ``replay``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from harvester.case import AgentCase, CaseFolder
from harvester.harvest import case_from_run, rerecord
from harvester.report import Report
from tests.apps import handoff_app, langgraph_handoff_app, shop
from tests.builders.project import capture_production, cli, enter_project
from tests.builders.runs import call, run

TARGET = "tests.apps.handoff_app:build"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    yield enter_project(tmp_path, monkeypatch, "incident")


def capture_incident(store: Path) -> str:
    """The incident, served once in production and captured; returns its trace id."""
    stored = capture_production(handoff_app, store)
    assert shop.LIVE == {"kb_search": 1, "issue_refund": 1}, "production ran the real tools"
    shop.LIVE.clear()
    assert stored.trajectory() == ["kb_search", handoff_app.HANDOFF, "issue_refund"]
    assert stored.agents == ["triage_agent", "refunds_agent"]
    return stored.trace_id


def replay(variant: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, Any]:
    monkeypatch.setenv(shop.VARIANT_ENV, variant)
    out = cli("replay", "--agent", TARGET, "--report", f"{variant}.json")
    (result,) = Report.load(f"{variant}.json").results
    return out.exit_code, result


def failed(result: Any) -> dict[str, str]:
    """The failed checks of a result, by their names without arguments."""
    return {c.name.split("(")[0]: c.detail for c in result.checks if c.passed is False}


def test_an_incident_through_a_handoff_fails_the_agent_that_made_it_and_passes_the_fixed_ones(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace_id = capture_incident(project / "traces.db")
    out = cli("incident", trace_id, "--why", "refunded an order nobody approved", "--json")
    assert out.exit_code == 0, out.output
    made = orjson.loads(out.output)
    case = AgentCase.model_validate(made["case"])
    assert case.forbidden_tools == ["issue_refund"] and case.source.failure_kind == "unintended_action"
    # the handoff is the recording's, never the case's demand
    assert case.recorded.trajectory == ["kb_search", handoff_app.HANDOFF, "issue_refund"]
    assert [f.tool for f in case.fixtures] == ["kb_search", "issue_refund"]
    assert case.min_steps == 1 and case.appropriate_tools == ["kb_search"]
    assert [c["name"] for c in case.trajectory()["reference"]] == ["kb_search"]
    assert [r.summary() for r in case.order] == ["issue_refund after kb_search"]
    (note,) = case.review_notes
    assert note.startswith("note: transfer_to_refunds_agent left out of the required calls")
    assert "only led to issue_refund" in note
    assert cli("accept", made["id"]).exit_code == 0  # a note informs, it does not block

    code, bad = replay("incident", monkeypatch)
    assert code == 1 and not bad.passed and bad.unauthorised == 1
    assert failed(bad) == {"never_used": "issue_refund executed at step 3"}

    for fixed in ("no_handoff", "refuses"):  # no longer hands over, or hands over and declines
        code, result = replay(fixed, monkeypatch)
        assert code == 0 and result.passed, (fixed, result.reasons())
        assert result.live_calls == 0 and result.no_fixture == 0

    code, lazy = replay("lazy", monkeypatch)  # the rest of the recording is still required
    assert code == 1 and "skipped kb_search" in failed(lazy)["min_steps"]
    assert not shop.LIVE, f"a replay ran live tools: {dict(shop.LIVE)}"


def test_review_and_cases_show_print_the_note_and_the_order(project: Path) -> None:
    trace_id = capture_incident(project / "traces.db")
    out = cli("incident", trace_id, "--why", "refunded an order nobody approved")
    assert out.exit_code == 0, out.output
    assert "review:      note: transfer_to_refunds_agent left out" in out.output
    assert "order:       issue_refund after kb_search" in out.output
    case_id = CaseFolder(project / "cases").cases("pending")[0].id
    shown = cli("cases", "show", case_id).output
    assert "order:             issue_refund after kb_search" in shown
    assert "call_order(issue_refund after kb_search)" in shown
    assert "review: note: transfer_to_refunds_agent left out" in shown


def test_a_langgraph_handoff_tool_that_only_led_to_the_refund_is_left_out(project: Path) -> None:
    """LangChain's multi-agent handoff (a tool returning ``Command(goto=...)``), one graph traced as one
    run by OpenInference: the handoff tool runs as an agent span, so the run names it among its agents."""
    stored = capture_production(langgraph_handoff_app, project / "traces.db")
    assert shop.LIVE == {"issue_refund": 1}
    assert [c.name for c in stored.calls] == ["transfer_to_refunds_agent", "issue_refund"]
    case = case_from_run(stored, forbid=["issue_refund"], incident=True)
    assert [f.tool for f in case.fixtures] == ["issue_refund"] and case.min_steps == 0
    assert case.appropriate_tools == [] and case.trajectory() is None
    (note,) = case.review_notes  # the handoff's args (an agent span's) are nothing a fixture would miss
    assert note.startswith("note: transfer_to_refunds_agent left out")


@pytest.mark.parametrize("model", ["live", "recorded"])
def test_a_langgraph_handoff_runs_in_replay_and_the_incident_is_caught_again(
    model: str, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The handoff tool (returning ``Command``) is routing, not a tool body to serve: it runs, the graph
    hands over, and the refunds agent's refund is served and fails the case, as production did; with the
    recorded model every model call, the refunds agent's included, is answered from the recording."""
    stored = capture_production(langgraph_handoff_app, project / "traces.db")
    shop.LIVE.clear()
    out = cli("incident", stored.trace_id, "--why", "refunded an order nobody approved", "--json")
    assert out.exit_code == 0 and cli("accept", orjson.loads(out.output)["id"]).exit_code == 0
    out = cli("replay", "--agent", "tests.apps.langgraph_handoff_app:build", "--model", model, "--report", "r.json")
    (r,) = Report.load("r.json").results
    assert out.exit_code == 1 and failed(r) == {"never_used": "issue_refund executed at step 2"}, r.reasons()
    assert r.no_fixture == 0 and r.live_calls == 0 and r.trajectory == ["transfer_to_refunds_agent", "issue_refund"]
    assert model == "live" or (r.model is not None and r.model.served == 3 and r.model.drift is None), r.model
    assert not shop.LIVE


# -- which routing calls lead only to harm ----------------------------------------------------------
AGENTS = ["triage_agent", "billing_agent", "refunds_agent"]


def incident(*calls: Any) -> AgentCase:
    return case_from_run(run(*calls, agents=AGENTS), forbid=["issue_refund"], incident=True)


def test_a_chain_of_handoffs_to_the_harm_is_left_out_and_the_work_around_it_stays():
    case = incident(
        call("kb_search"), call("transfer_to_billing_agent"), call("transfer_to_refunds_agent"), call("issue_refund")
    )
    assert [f.tool for f in case.fixtures] == ["kb_search", "issue_refund"]
    assert case.appropriate_tools == ["kb_search"] and case.min_steps == 1
    assert "transfer_to_billing_agent, transfer_to_refunds_agent left out" in case.review_notes[0]


def test_a_handoff_that_also_led_to_needed_work_stays_required():
    case = incident(call("transfer_to_refunds_agent"), call("get_order"), call("issue_refund"))
    assert case.appropriate_tools == ["transfer_to_refunds_agent", "get_order"] and case.min_steps == 2
    assert not case.review_notes
    assert [r.summary() for r in case.order] == ["issue_refund after transfer_to_refunds_agent, get_order"]


def test_a_managed_agent_that_only_did_harm_is_left_out_too():
    """smolagents runs a managed agent the model calls by its name: the call is answered by an agent."""
    case = incident(call("kb_search"), call("refunds_agent"), call("issue_refund"))
    assert case.appropriate_tools == ["kb_search"]


def test_a_call_named_like_no_agent_of_the_run_is_a_tool_and_stays_required():
    case = case_from_run(
        run(call("transfer_to_refunds_agent"), call("issue_refund"), agents=["triage_agent"]),
        forbid=["issue_refund"],
        incident=True,
    )
    assert case.appropriate_tools == ["transfer_to_refunds_agent"] and not case.review_notes


def test_outside_an_incident_a_handoff_is_ordinary_work():
    case = case_from_run(run(call("transfer_to_refunds_agent"), call("issue_refund"), agents=AGENTS))
    assert case.appropriate_tools == ["transfer_to_refunds_agent", "issue_refund"] and not case.review_notes


def test_rerecord_of_an_incident_leaves_the_handoff_out_again():
    old = incident(call("kb_search"), call("transfer_to_refunds_agent"), call("issue_refund"))
    newer = run(
        call("kb_search", args={"q": "refunds"}),
        call("transfer_to_refunds_agent"),
        call("issue_refund"),
        agents=AGENTS,
        trace="u" * 32,
    )
    new = rerecord(old.model_copy(update={"status": "accepted"}), newer).case
    assert [f.tool for f in new.fixtures] == ["kb_search", "issue_refund"]
    assert [c["name"] for c in new.trajectory()["reference"]] == ["kb_search"]
    assert new.review_notes == old.review_notes
