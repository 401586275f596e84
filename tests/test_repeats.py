"""A mutating call made again is a second refund, not a redundant call: harvest lists the mutating tools
the recording called in ``strict_repeats``, and a replay that repeats one beyond its recorded times gets
``no_fixture`` (``already_played``) and fails; a repeated lookup is still served as redundant."""

from __future__ import annotations

import importlib
from pathlib import Path

import orjson
import pytest

from harvester.canonical import fixture_key
from harvester.case import AgentCase, CaseFolder
from harvester.config import Config
from harvester.fixtures import FixtureTools
from harvester.harvest import case_from_run, rerecord
from harvester.report import Report
from tests.apps import raw_openai_app, shop
from tests.builders.project import capture_production, cli, enter_project
from tests.builders.runs import call, run

ORDER = {"order_id": "A1001"}

APPS = {"pydantic_ai_app": "build", "raw_openai_app": "build_documented"}


@pytest.mark.parametrize("app_name", list(APPS))
def test_a_refund_issued_twice_fails_the_harvested_case(
    app_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw_openai_app.unwrap_leftovers()  # what an OpenLLMetry instrumentor turned off left on the client
    project = enter_project(tmp_path, monkeypatch, "refund")  # issue_refund is one of mutating_tools
    capture_production(importlib.import_module(f"tests.apps.{app_name}"), project / "traces.db")
    shop.LIVE.clear()
    assert cli("harvest").exit_code == 0
    (case,) = CaseFolder(project / "cases").cases("pending")
    assert case.strict_repeats == ["issue_refund"]  # in the case file, for a reviewer to see
    assert cli("accept", case.id).exit_code == 0

    monkeypatch.setenv(shop.VARIANT_ENV, "twice")
    out = cli("replay", "--agent", f"tests.apps.{app_name}:{APPS[app_name]}", "--report", "r.json")
    (r,) = Report.load("r.json").results
    assert out.exit_code == 1 and not r.passed and r.no_fixture == 1 and r.live_calls == 0, r.reasons()
    (call,) = r.no_fixture_calls
    assert call.tool == "issue_refund" and call.reason == "already_played"
    assert not shop.LIVE


def test_strict_repeats_names_the_tools_it_holds_to_their_recorded_times() -> None:
    fixtures = [
        {"tool": tool, "args": {"order_id": "A1001"}, "key": fixture_key(tool, {"order_id": "A1001"}), "result": result}
        for tool, result in (("get_order", {"status": "delivered"}), ("issue_refund", "refunded"))
    ]
    case = AgentCase.model_validate(
        {"id": "c", "prompt": "Refund A1001", "strict_repeats": ["issue_refund"], "fixtures": fixtures}
    )
    tools = FixtureTools(case)
    for _ in range(2):
        tools.execute("get_order", {"order_id": "A1001"})
        tools.execute("issue_refund", {"order_id": "A1001"})
    assert [e.outcome for e in tools.log] == ["served", "served", "repeat", "no_fixture"]
    assert tools.log[-1].reason == "already_played"
    assert "take issue_refund out of strict_repeats" in tools.log[-1].result["hint"]
    assert orjson.loads(case.model_dump_json(by_alias=True))["strict_repeats"] == ["issue_refund"]


def test_rerecord_after_configuring_mutating_tools_holds_the_refund_to_its_recorded_times() -> None:
    """A case harvested with no ``mutating_tools`` has ``strict_repeats: false``: the default then, not
    a reviewer's choice. Rerecorded once the refund is configured mutating, it gains the refund, as its
    ``order`` gains the rule, and a second refund fails it."""
    recording = run(call("get_order", args=ORDER), call("issue_refund", args=ORDER))
    old = case_from_run(recording, config=Config()).model_copy(update={"status": "accepted"})
    assert old.strict_repeats is False and old.order == []
    refreshed = rerecord(old, recording, config=Config(mutating_tools=["issue_refund"]))
    assert refreshed.case.strict_repeats == ["issue_refund"]
    assert "strict_repeats: False  =>  ['issue_refund']" in refreshed.changes
    assert "order: (none)  =>  issue_refund after get_order" in refreshed.changes
    tools = FixtureTools(refreshed.case)
    for _ in range(2):
        tools.execute("issue_refund", ORDER)
    assert [e.outcome for e in tools.log] == ["served", "no_fixture"] and tools.log[-1].reason == "already_played"


@pytest.mark.parametrize(
    ("reviewed", "kept"),
    [
        (["send_email"], ["send_email", "issue_refund"]),  # the reviewer's list, plus the new recording's
        (["issue_refund"], ["issue_refund"]),
        (True, True),  # every tool held: a reviewer's choice no config makes
    ],
)
def test_rerecord_keeps_the_reviewers_strict_repeats_and_adds_the_new_recordings(reviewed, kept) -> None:
    recording = run(call("get_order", args=ORDER), call("issue_refund", args=ORDER))
    mutating = Config(mutating_tools=["issue_refund"])
    case = case_from_run(recording, config=mutating).model_copy(update={"strict_repeats": reviewed})
    assert rerecord(case, recording, config=mutating).case.strict_repeats == kept


def test_rerecord_without_mutating_tools_leaves_strict_repeats_false() -> None:
    recording = run(call("get_order", args=ORDER), call("issue_refund", args=ORDER))
    case = case_from_run(recording, config=Config())
    refreshed = rerecord(case, recording, config=Config())
    assert refreshed.case.strict_repeats is False and refreshed.changes == []
