"""The whole loop on agents written as each framework's docs write them, with no change for harvester:
production capture, incident, accept, then replay. Every tool body counts its real runs (``shop.LIVE``);
no replay may move that counter, whatever the agent does, and every deviation must fail its case."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.apps import own_loop_app, shop
from tests.builders import project as user
from tests.builders.installed import APPS, require_app

# every registered adapter's app (tests/apps/<adapter>_app.py, written as that framework's docs write it)
cli, replay = user.cli, user.replay


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    yield user.enter_project(tmp_path, monkeypatch, "baseline")


def capture_production(app: Any, store: Path) -> str:
    """One real request through the app, captured as production captures it; returns its trace id."""
    run = user.capture_production(app, store)
    assert shop.LIVE, "production ran the real tools"
    shop.LIVE.clear()
    assert run.trajectory() and all(c.status == "ok" for c in run.calls), run.calls
    return run.trace_id


def make_case(trace_id: str) -> str:
    out = cli("incident", trace_id, "--why", "the order answer must keep coming from the order lookup", "--json")
    assert out.exit_code == 0, out.output
    case_id = orjson.loads(out.output)["id"]
    assert cli("accept", case_id).exit_code == 0
    return case_id


@pytest.mark.parametrize("app_name", list(APPS))
def test_a_framework_agent_replays_hermetically(app_name: str, project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_app(app_name)
    app = importlib.import_module(f"tests.apps.{app_name}")
    make_case(capture_production(app, project / "traces.db"))
    target = f"tests.apps.{app_name}:build"

    code, report = replay(target, "baseline", monkeypatch, "baseline.json")
    (r,) = report.results
    assert code == 0 and r.passed, r.reasons()
    assert r.trajectory == ["kb_search", "get_order"] and r.no_fixture == 0 and r.live_calls == 0

    code, report = replay(target, "mutating", monkeypatch, "mutating.json")
    (r,) = report.results
    assert code == 1 and not r.passed and r.unauthorised == 1
    assert report.metrics()["unauthorised_actions"] == 1
    assert any(c.name == "never_used(issue_refund)" and not c.passed for c in r.checks), r.reasons()

    code, report = replay(target, "new_args", monkeypatch, "new_args.json")
    (r,) = report.results
    assert code == 1 and not r.passed and r.no_fixture == 1
    (call,) = r.no_fixture_calls
    assert call.tool == "get_order" and call.args == {"order_id": "A1002"} and call.closest == {"order_id": "A1001"}
    assert any(c.name == "recorded_calls_only" and not c.passed for c in r.checks)

    assert not shop.LIVE, f"a replay ran live tools: {dict(shop.LIVE)}"
    assert cli("harvest").exit_code == 0  # the replays were never stored: nothing new to propose
    assert not list((project / "cases" / "pending").glob("*.json"))


@pytest.mark.parametrize("threads", own_loop_app.MODES)
def test_an_own_loop_with_tools_in_threads(threads: str, project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Production records the threaded calls as executed, under the agent; replay serves every one."""
    monkeypatch.setenv(own_loop_app.THREADS_ENV, threads)
    trace_id = capture_production(own_loop_app, project / "traces.db")  # asserts every call ran ok
    make_case(trace_id)
    code, report = replay("tests.apps.own_loop_app:build", "baseline", monkeypatch, "r.json")
    (r,) = report.results
    assert code == 0 and r.passed and r.live_calls == 0, r.reasons()
    assert sorted(r.trajectory) == ["get_order", "kb_search"] and r.tool_calls == 2
    code, report = replay("tests.apps.own_loop_app:build", "mutating", monkeypatch, "m.json")
    assert code == 1 and report.results[0].unauthorised == 1
    assert not shop.LIVE, f"a replay ran live tools: {dict(shop.LIVE)}"
