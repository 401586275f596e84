"""A system prompt added where production sent none is a drift under the recorded model, as a changed or
removed one is: the recording's answers were given to a model that was never told it.

Production runs each agent with no system prompt (a raw OpenAI chat loop with no system message, the
Responses API with no ``instructions=``, Anthropic with no ``system=``, each framework's agent with no
instructions, an own loop's ``run.model(system=None)``), and the case is harvested as a user harvests
it; the unchanged agent replays green with ``--model recorded``, and the agent that now sends ``ADDED``
fails at step 1 naming it. A recorded request whose messages do not say what they said (their content
was not captured) does not say there was no system prompt either, and is not held to none.
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from anthropic import Anthropic, AsyncAnthropic

from harvester.case import AgentCase, load_cases
from harvester.replay._drift import request_changes
from harvester.report import CaseResult, Report
from tests.apps import raw_anthropic_app, raw_openai_app, run_model_app, shop
from tests.builders import project as user
from tests.builders.capture import production_environment
from tests.builders.installed import APPS, require_app
from tests.builders.sdk_http import RAW_LOOPS

ADDED = "Refund whatever the customer asks."
SYSTEM_ENV = run_model_app.SYSTEM_ENV  # the system prompt every agent here sends; unset: none
DRIFT = f'model_input_changed at step 1: system prompt: (none) -> "{ADDED}"'
RAW = {"openai": raw_openai_app, "anthropic": raw_anthropic_app}
LOOPS = RAW_LOOPS  # each API, sync, async and streamed, under each instrumentor


def system() -> str:
    """The agent's instructions in place of the shop's: none unless ``SYSTEM_ENV`` says."""
    return os.environ.get(SYSTEM_ENV, "")


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A user's project whose every shop agent sends no system prompt (or ``SYSTEM_ENV``'s): a framework
    agent gets no instructions, and the raw loops leave the system message, ``instructions=`` and
    ``system=`` out of their requests, as a loop that has none writes them."""
    monkeypatch.delenv(SYSTEM_ENV, raising=False)
    monkeypatch.setattr(shop, "instructions", system)
    original = raw_openai_app._request

    def request(conversation: list[Any]) -> dict[str, Any]:
        req = original(conversation)
        if "messages" in req:
            req["messages"] = [m for m in req["messages"] if m.get("role") != "system" or m.get("content")]
        if not req.get("instructions"):
            req.pop("instructions", None)
        return req

    monkeypatch.setattr(raw_openai_app, "_request", request)
    monkeypatch.setattr(raw_anthropic_app, "Anthropic", _without_empty_system(Anthropic))
    monkeypatch.setattr(raw_anthropic_app, "AsyncAnthropic", _without_empty_system(AsyncAnthropic))
    raw_openai_app.unwrap_leftovers()  # what OpenLLMetry's uninstrument left on the client, before and after
    yield user.enter_project(tmp_path, monkeypatch)
    raw_openai_app.unwrap_leftovers()


class _Messages:
    """An Anthropic client's ``messages``, asked without ``system=`` when the loop's is empty (or with
    ``unset``, the SDK's own "not given", when that is set)."""

    unset: Any = None

    def __init__(self, messages: Any) -> None:
        self._messages = messages

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._messages, name)
        if name not in ("create", "stream"):
            return method

        def call(*args: Any, **kwargs: Any) -> Any:
            if not kwargs.get("system"):
                kwargs.pop("system", None)
                if self.unset is not None:
                    kwargs["system"] = self.unset
            return method(*args, **kwargs)

        return call


def _without_empty_system(client: type) -> type:
    class Client(client):  # type: ignore[misc, valid-type]
        @functools.cached_property
        def messages(self) -> Any:
            return _Messages(super().messages)

    return Client


def harvested(app: Any, tmp_path: Path) -> AgentCase:
    """One production request of ``app`` captured, made an incident case and accepted; returns the case."""
    with production_environment():
        run = user.capture_production(app, tmp_path / "traces.db")
    assert len(run.llm_calls) >= 2 and all(c.request is not None for c in run.llm_calls), run.llm_calls
    shop.LIVE.clear()
    user.accept_incident(run.trace_id, "the order answer must come from the order lookup")
    (case,) = load_cases("cases")
    return case


def replay_recorded(target: str) -> tuple[int, CaseResult]:
    out = user.cli("replay", "--agent", target, "--model", "recorded", "--report", "r.json")
    (r,) = Report.load("r.json").results
    return out.exit_code, r


def held_to_none(target: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The unchanged agent is served every step; the one that now sends ``ADDED`` drifts at step 1,
    whose ``model_input_changed`` detail is returned."""
    monkeypatch.setenv(shop.VARIANT_ENV, "no_model")  # no model: a call the recording does not answer raises
    code, r = replay_recorded(target)
    assert code == 0 and r.passed, r.reasons()
    assert r.model is not None and r.model.drift is None and r.model.served >= 2, r.model
    assert r.trajectory == ["kb_search", "get_order"] and r.live_calls == 0

    monkeypatch.setenv(SYSTEM_ENV, ADDED)
    code, r = replay_recorded(target)
    assert code == 1 and not r.passed and r.model is not None and r.model.served == 0, r.reasons()
    assert r.model.drift is not None and (r.model.drift.step, r.model.drift.what) == (1, ["system prompt"])
    (check,) = [c for c in r.checks if c.name == "model_input_changed"]
    assert check.detail.startswith("model_input_changed at step 1: system prompt: "), check.detail
    assert ADDED in check.detail
    assert not shop.LIVE, f"a replay ran live tools: {dict(shop.LIVE)}"
    return check.detail


def raw_loop(monkeypatch: pytest.MonkeyPatch, app: str, api: str, client: str, instrumentor: str) -> Any:
    """The raw SDK app, set to the API, client and production instrumentor of this loop."""
    monkeypatch.setenv(raw_openai_app.API_ENV, api)
    monkeypatch.setenv(raw_openai_app.CLIENT_ENV, client)
    monkeypatch.setenv(raw_openai_app.INSTRUMENTOR_ENV, instrumentor)
    module = RAW[app]
    return type("Production", (), {"serve": staticmethod(lambda p: module.serve(p, module.build_documented))})


@pytest.mark.parametrize(("app", "api", "client", "instrumentor"), LOOPS, ids=["-".join(p) for p in LOOPS])
def test_a_raw_sdk_loop_recorded_without_a_system_prompt_is_held_to_none(
    app: str, api: str, client: str, instrumentor: str, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = harvested(raw_loop(monkeypatch, app, api, client, instrumentor), project)
    assert [t.request.system for t in case.model_fixtures if t.request] == [None, None]
    assert held_to_none(f"{RAW[app].__name__}:build_documented", monkeypatch) == DRIFT


@pytest.mark.parametrize("sentinel", ["NOT_GIVEN", "omit"])
def test_an_anthropic_loop_that_passes_the_sdks_not_given_sends_no_system_prompt(
    sentinel: str, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``system=NOT_GIVEN`` is how a loop says it has none (the SDK sends nothing): no drift."""
    monkeypatch.setattr(_Messages, "unset", getattr(anthropic, sentinel))
    case = harvested(raw_loop(monkeypatch, "anthropic", "messages", "sync", "openinference"), project)
    assert [t.request.system for t in case.model_fixtures if t.request] == [None, None]
    assert held_to_none(f"{raw_anthropic_app.__name__}:build_documented", monkeypatch) == DRIFT


@pytest.mark.parametrize("app", list(APPS))
def test_a_framework_agent_recorded_without_instructions_is_held_to_none(
    app: str, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each framework's agent given no instructions. A framework that sends a system prompt of its own
    (smolagents, ADK) recorded it, and the added instructions change it."""
    require_app(app)
    harvested(importlib.import_module(f"tests.apps.{app}"), project)
    held_to_none(f"tests.apps.{app}:build", monkeypatch)


def test_an_own_loop_recorded_with_run_model_system_none_is_held_to_none(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = harvested(run_model_app, project)
    assert [t.request.system for t in case.model_fixtures if t.request] == [None, None]
    assert held_to_none(f"{run_model_app.__name__}:build", monkeypatch) == DRIFT


def _request(content: str | None, system: str | None = None) -> dict[str, Any]:
    message = {"role": "user", "content": content, "tool_calls": [], "tool_call_id": None}
    return {"system": system, "messages": [message], "tools": None, "settings": {}}


def test_a_recording_that_does_not_say_what_was_said_is_not_held_to_no_system_prompt() -> None:
    assert request_changes(_request("hi"), _request("hi", ADDED)) == [
        ("system prompt", f'system prompt: (none) -> "{ADDED}"')
    ]
    # the messages' text was not captured: whatever else that is, it says nothing of a system prompt
    assert "system prompt" not in dict(request_changes(_request(None), _request("hi", ADDED)))
    assert request_changes(None, _request("hi", ADDED)) == []  # the request was not captured
    assert request_changes(_request("hi"), _request("hi", "")) == []  # an empty system prompt is none
    assert request_changes(_request("hi", "Be brief."), _request("hi")) == [
        ("system prompt", 'system prompt: "Be brief." -> (none)')
    ]
