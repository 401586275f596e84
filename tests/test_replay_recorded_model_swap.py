"""Another model asked than the recording's under the recorded model is a drift: the recording's answers
were another model's, so serving them would judge the new model by the old one's answers.

Production asks one model (the raw OpenAI and Anthropic loops, an own loop's ``run.model``), the case is
harvested as a user harvests it, and the agent that now asks another fails at step 1 naming both
(``model: gpt-4o-mini -> gpt-3.5-turbo``). Compared only where both sides name the model asked for: a
case harvested before requests kept it, or a framework whose request does not say, is not held to one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harvester.case import AgentCase, load_cases
from harvester.replay._drift import request_changes
from harvester.report import CaseResult, Report
from tests.apps import raw_anthropic_app, raw_openai_app, run_model_app, shop
from tests.builders import project as user
from tests.builders.sdk_http import MODEL

RAW = {"openai": raw_openai_app, "anthropic": raw_anthropic_app}
LOOPS = [
    ("openai", "chat", "sync", "openinference"),
    ("openai", "chat", "async-stream", "openllmetry"),
    ("openai", "responses", "sync", "openllmetry"),
    ("openai", "responses", "async", "openinference"),
    ("anthropic", "messages", "sync", "openinference"),
    ("anthropic", "messages", "stream", "openllmetry"),
]
OTHER = {"chat": "gpt-3.5-turbo", "responses": "gpt-3.5-turbo", "messages": "claude-3-haiku-20240307"}


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    raw_openai_app.unwrap_leftovers()
    yield user.enter_project(tmp_path, monkeypatch)
    raw_openai_app.unwrap_leftovers()


def harvested(app: Any, tmp_path: Path) -> AgentCase:
    run = user.capture_production(app, tmp_path / "traces.db")
    shop.LIVE.clear()
    user.accept_incident(run.trace_id, "the order answer must come from the order lookup")
    (case,) = load_cases("cases")
    return case


def replay_recorded(target: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, CaseResult]:
    monkeypatch.setenv(shop.VARIANT_ENV, "no_model")
    out = user.cli("replay", "--agent", target, "--model", "recorded", "--report", "r.json")
    (r,) = Report.load("r.json").results
    return out.exit_code, r


def drift(target: str, monkeypatch: pytest.MonkeyPatch) -> str:
    code, r = replay_recorded(target, monkeypatch)
    assert code == 1 and not r.passed and r.model is not None and r.model.served == 0, r.reasons()
    assert r.model.drift is not None and (r.model.drift.step, r.model.drift.what) == (1, ["model"])
    (check,) = [c for c in r.checks if c.name == "model_input_changed"]
    assert not shop.LIVE, f"a replay ran live tools: {dict(shop.LIVE)}"
    return check.detail


@pytest.mark.parametrize(("app", "api", "client", "instrumentor"), LOOPS, ids=["-".join(p) for p in LOOPS])
def test_a_raw_sdk_loop_asking_another_model_drifts(
    app: str, api: str, client: str, instrumentor: str, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(raw_openai_app.API_ENV, api)
    monkeypatch.setenv(raw_openai_app.CLIENT_ENV, client)
    monkeypatch.setenv(raw_openai_app.INSTRUMENTOR_ENV, instrumentor)
    module = RAW[app]
    production = type("Production", (), {"serve": staticmethod(lambda p: module.serve(p, module.build_documented))})
    case = harvested(production, project)
    key = "anthropic" if app == "anthropic" else api
    assert [t.request.model for t in case.model_fixtures if t.request] == [MODEL[key]] * 2
    target = f"{module.__name__}:build_documented"
    code, r = replay_recorded(target, monkeypatch)
    assert code == 0 and r.passed and r.model is not None and r.model.drift is None, r.reasons()

    recorded = MODEL[key]
    monkeypatch.setitem(MODEL, key, OTHER[api])  # the loop now asks another model
    assert drift(target, monkeypatch) == f"model_input_changed at step 1: model: {recorded} -> {OTHER[api]}"


def test_an_own_loop_asking_another_model_through_run_model_drifts(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(run_model_app.MODEL_ENV, raising=False)
    case = harvested(run_model_app, project)
    assert [t.request.model for t in case.model_fixtures if t.request] == [run_model_app.MODEL] * 2
    target = f"{run_model_app.__name__}:build"
    code, r = replay_recorded(target, monkeypatch)
    assert code == 0 and r.passed, r.reasons()
    monkeypatch.setenv(run_model_app.MODEL_ENV, "gpt-3.5-turbo")
    assert drift(target, monkeypatch) == "model_input_changed at step 1: model: gpt-4.1-mini -> gpt-3.5-turbo"


def _request(model: str | None) -> dict[str, Any]:
    message = {"role": "user", "content": "hi", "tool_calls": [], "tool_call_id": None}
    out: dict[str, Any] = {"system": None, "messages": [message], "tools": None, "settings": {}}
    return out if model is None else {**out, "model": model}


def test_the_model_is_compared_only_where_both_sides_name_one() -> None:
    assert request_changes(_request("gpt-4.1-mini"), _request("gpt-3.5-turbo")) == [
        ("model", "model: gpt-4.1-mini -> gpt-3.5-turbo")
    ]
    assert request_changes(_request("gpt-4.1-mini"), _request("gpt-4.1-mini")) == []
    assert request_changes(_request(None), _request("gpt-3.5-turbo")) == []  # a case from before requests kept it
    assert request_changes(_request("gpt-4.1-mini"), _request(None)) == []  # a framework whose request does not say
