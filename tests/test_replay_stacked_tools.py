"""``@harvester.tool`` stacked with another tracer's tool decorator (OpenInference's ``@tracer.tool``) in
either order, with ``spans=False``, or over a plain ``functools.wraps`` decorator, in an own loop traced
as OpenInference documents it: production records each call once, harvest makes an acceptable case, and
a replay sees each call, serves it from the fixtures, and runs no tool body."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harvester import tool
from harvester.canonical import fixture_key
from harvester.case import AgentCase
from harvester.replay import replay as replay_cases
from harvester.store import TraceStore
from tests.apps import shop, stacked_tools_app
from tests.builders.capture import capturing_globally
from tests.builders.project import enter_project, harvest_and_accept, replay

TARGET = "tests.apps.stacked_tools_app:build"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    stacked_tools_app.TRACED.clear()
    yield enter_project(tmp_path, monkeypatch)


@pytest.mark.parametrize("stacking", stacked_tools_app.STACKINGS)
def test_stacked_tool_decorators_record_once_and_replay(
    stacking: str, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(stacked_tools_app.STACKING_ENV, stacking)
    with capturing_globally(str(project / "traces.db")):
        stacked_tools_app.serve(None)
    assert shop.LIVE == {"kb_search": 1, "get_order": 1}, "production runs each tool once"
    shop.LIVE.clear()
    with TraceStore(str(project / "traces.db")) as ts:
        (run,) = ts.runs()
    assert [(c.name, c.args, c.status) for c in run.calls] == [
        ("kb_search", {"query": "refund policy"}, "ok"),
        ("get_order", {"order_id": "A1001"}, "ok"),
    ], "each call is recorded once"
    assert run.calls[1].result == shop.ORDERS["A1001"] and run.content_captured

    case = harvest_and_accept(project)
    assert [f["tool"] for f in case["fixtures"]] == ["kb_search", "get_order"]
    traced = dict(stacked_tools_app.TRACED)

    code, report = replay(TARGET, "baseline", monkeypatch, "baseline.json")
    (r,) = report.results
    assert code == 0 and r.passed, r.reasons()
    assert r.trajectory == ["kb_search", "get_order"] and r.tool_calls == 2
    assert r.live_calls == 0 and r.no_fixture == 0

    code, report = replay(TARGET, "new_args", monkeypatch, "new_args.json")
    (r,) = report.results
    assert code == 1 and r.no_fixture == 1 and r.no_fixture_calls[0].args == {"order_id": "A1002"}

    assert not shop.LIVE, f"a replay ran live tools: {dict(shop.LIVE)}"
    assert stacked_tools_app.TRACED == traced, "a decorator under @harvester.tool ran in a replay"


@pytest.mark.parametrize("recorded", [{"order_id": "A1001", "include_items": False}, {"order_id": "A1001"}])
def test_a_tool_s_defaults_left_out_by_the_caller_match_either_recording(recorded: dict) -> None:
    """OpenInference's ``@tracer.tool`` above ``@harvester.tool`` records the defaults the caller left
    out; ``@harvester.tool`` alone records the args as given. Either fixture serves the same call."""
    ran: list[str] = []

    @tool
    def get_order(order_id: str, include_items: bool = False) -> dict:
        ran.append(order_id)
        return {"id": order_id}

    case = _order_case(recorded, checks=[{"check": "contains", "needles": ["FIX"]}])
    (r,) = replay_cases([case], lambda: lambda prompt: str(get_order("A1001"))).results
    assert r.passed and r.no_fixture == 0 and ran == [], r.reasons()
    assert json.loads(r.calls[0].args) == recorded  # the call as the recording holds it


def _order_case(recorded: dict, **more: Any) -> AgentCase:
    """A case whose one recording is ``get_order(**recorded)``, answered ``FIX``."""
    fixture = {"key": fixture_key("get_order", recorded), "tool": "get_order", "args": recorded, "result": "FIX"}
    return AgentCase.model_validate(
        {
            "id": "defaults",
            "status": "accepted",
            "prompt": "Where is A1001?",
            "fixtures": [fixture],
            "recorded": {"trajectory": ["get_order"]},
            **more,
        }
    )


@pytest.mark.parametrize(
    ("recorded", "differs"),
    [
        ({"order_id": "A1001", "include_items": True, "source": "web"}, ["include_items"]),  # defaults recorded
        ({"order_id": "A1001", "source": "app"}, ["source"]),  # as a caller gave them
    ],
)
def test_a_call_no_recording_answers_names_only_the_arguments_that_differ(recorded: dict, differs: list) -> None:
    """A default changed since the recording (``include_items`` was True): the call is no_fixture, and its
    closest recording differs at that argument alone, not at every default the caller left out."""

    @tool
    def get_order(order_id: str, include_items: bool = False, source: str = "web") -> dict:
        raise AssertionError("a replay ran the tool body")

    case = _order_case(recorded)
    (r,) = replay_cases([case], lambda: lambda prompt: str(get_order("A1001"))).results
    (missed,) = r.no_fixture_calls
    assert not r.passed and missed.reason == "no_match", r.reasons()
    assert missed.differs == differs
    assert f"differs at {', '.join(differs)}" in missed.summary()
