"""The recorded model on agents written as each framework's docs write them: production capture,
incident, accept, then ``replay --model recorded`` with no model at all (the scripted model has no
script: it raises if called). Every model call is answered from the case's model fixtures and every
tool call from its fixtures; a change to the agent's code that reaches the model's request (its
instructions, a tool's schema) fails the case naming it, and ``recorded-then-live`` goes on with the
live model from there."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from harvester.report import CaseResult
from tests.apps import shop
from tests.builders import project as user
from tests.builders.installed import APPS, require_app


@pytest.fixture(params=list(APPS))
def accepted(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A project holding the accepted case of one production request to the app; yields the agent target."""
    require_app(request.param)
    user.enter_project(tmp_path, monkeypatch, "baseline")
    app = importlib.import_module(f"tests.apps.{request.param}")
    run = user.capture_production(app, tmp_path / "traces.db")
    assert len(run.llm_calls) >= 2 and all(c.request is not None for c in run.llm_calls), run.llm_calls
    shop.LIVE.clear()
    user.accept_incident(run.trace_id, "the order answer must come from the order lookup")
    yield f"tests.apps.{request.param}:build"
    assert not shop.LIVE, f"a replay ran live tools: {dict(shop.LIVE)}"


def replayed(target: str, monkeypatch: pytest.MonkeyPatch, mode: str, variant: str = "no_model") -> CaseResult:
    code, report = user.replay(target, variant, monkeypatch, "r.json", "--model", mode)
    (r,) = report.results
    assert code == (0 if r.passed else 1)
    return r


def test_every_model_call_is_served_from_the_recording(accepted: str, monkeypatch: pytest.MonkeyPatch) -> None:
    r = replayed(accepted, monkeypatch, "recorded")
    assert r.passed, r.reasons()
    assert r.model is not None and r.model.drift is None and r.model.served >= 2, r.model
    assert r.trajectory == ["kb_search", "get_order"] and r.live_calls == 0


def recorded_schemas() -> bool:
    """The case's recording holds the tools' schemas (the OpenAI Agents SDK under OpenInference records
    no tools, LangChain names only)."""
    (case_file,) = Path("cases").glob("*.json")
    turn = orjson.loads(case_file.read_bytes())["model_fixtures"][0]
    return all(t.get("parameters") is not None for t in turn["request"].get("tools") or [{}])


def test_changed_instructions_fail_at_the_first_step_with_the_diff(
    accepted: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(shop.CHANGE_ENV, "system")
    r = replayed(accepted, monkeypatch, "recorded")
    assert not r.passed and r.model is not None and r.model.drift is not None and r.model.drift.step == 1
    (check,) = [c for c in r.checks if c.name == "model_input_changed"]
    assert not check.passed and check.detail.startswith("model_input_changed at step 1: system prompt: -")
    assert '+"You are the shop' in check.detail and r.model.served == 0


def test_a_renamed_tool_parameter_fails_naming_the_tool(accepted: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(shop.CHANGE_ENV, "schema")
    r = replayed(accepted, monkeypatch, "recorded")
    assert not r.passed and r.model is not None and r.model.drift is not None
    (check,) = [c for c in r.checks if c.name == "model_input_changed"]
    assert check.detail.startswith("model_input_changed at step 1: "), check.detail
    if recorded_schemas():  # the offered tools differ at once
        assert "tools: schema changed kb_search" in check.detail
    else:  # no definitions recorded: the recorded call no longer fits the tool the agent offers
        assert "tools: the recorded call kb_search() no longer fits its schema (missing text; no parameter query)" in (
            check.detail
        )


def test_recorded_then_live_goes_on_with_the_live_model(accepted: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(shop.CHANGE_ENV, "system")
    r = replayed(accepted, monkeypatch, "recorded-then-live", variant="baseline")
    assert r.passed, r.reasons()
    assert r.model is not None and r.model.drift is not None and r.model.live_from == 1, r.model
    assert r.trajectory == ["kb_search", "get_order"] and r.live_calls == 0
