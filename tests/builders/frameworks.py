"""Runs of the framework drivers (tests/frameworks), read back, and what each recorded trace holds."""

from __future__ import annotations

from pathlib import Path

from harvester.conventions import runs_from_spans
from tests.frameworks import openai_agents_agent, pydantic_ai_agent, smolagents_agent
from tests.frameworks.openai_agents_agent import MODEL_NAME as OA_MODEL_NAME
from tests.frameworks.openai_agents_agent import PROMPTS as OA_PROMPTS
from tests.frameworks.smolagents_agent import ANSWERS as SMOL_ANSWERS
from tests.frameworks.smolagents_agent import MODEL_NAME as SMOL_MODEL_NAME
from tests.frameworks.smolagents_agent import PROMPTS as SMOL_PROMPTS

# The shop both drivers' tools answer from.
ORDER = {"order_id": "A1001", "status": "delivered", "days_since_delivery": 12, "total": 40.0}


KB = "Refunds are accepted within 30 days of delivery."


_openai_agents_cache: dict[str, list] = {}


def openai_agents_spans(scenario: str) -> list:
    if scenario not in _openai_agents_cache:
        _openai_agents_cache[scenario] = openai_agents_agent.run_scenario(scenario)
    return _openai_agents_cache[scenario]


def openai_agents_runs(scenario: str, n: int = 1) -> list:
    runs = runs_from_spans(openai_agents_spans(scenario))
    assert len(runs) == n, [r.model_dump() for r in runs]
    for run in runs:
        assert run.source == "openinference"
        assert run.prompt == OA_PROMPTS[scenario]  # the first LLM span's user message (llm.input_messages.1)
        assert run.model == OA_MODEL_NAME
        assert run.cost is None
        assert run.started_at and run.started_at.endswith("Z") and len(run.started_at) == 24
        assert run.duration_ms is not None and run.duration_ms >= 0
    return runs


_smolagents_cache: dict[str, list] = {}


def smolagents_spans(scenario: str) -> list:
    if scenario not in _smolagents_cache:
        _smolagents_cache[scenario] = smolagents_agent.run_scenario(scenario)
    return _smolagents_cache[scenario]


def smolagents_run(scenario: str):
    runs = runs_from_spans(smolagents_spans(scenario))
    assert len(runs) == 1, [r.model_dump() for r in runs]
    run = runs[0]
    assert run.source == "openinference"
    assert run.model == SMOL_MODEL_NAME
    assert run.prompt == SMOL_PROMPTS[scenario]  # AGENT input.value {"task": ...}
    assert run.answer == SMOL_ANSWERS[scenario]  # AGENT output.value, a plain string
    assert run.stop == "answered" and run.error is None
    assert run.cost is None
    assert run.started_at and run.started_at.endswith("Z") and len(run.started_at) == 24
    assert run.duration_ms is not None and run.duration_ms >= 0
    return run


# -- the recorded traces (traces/frameworks) ----------------------------------------------------------
# What each recorded scenario IS, per run: (stop, trajectory, blocked, (input, output tokens)). smolagents
# hands every tool error back to the model (its tool_error run answers) and has no approval step.
TRACES = Path(__file__).resolve().parents[2] / "traces" / "frameworks"


EXPECTED = {  # scenario -> per run: (stop, trajectory, blocked, (input, output tokens))
    "happy": [("answered", ["kb_search", "get_order"], [], (300, 30))],
    "tool_error": [("error", [], ["check_inventory"], (100, 10))],
    "retry": [("answered", ["get_order"], ["get_order"], (600, 60))],
    "denied": [("deferred", [], [], (100, 10)), ("answered", [], [], (200, 20))],  # paused: issue_refund awaiting
}


EXPECTED_OF = {
    "openai-agents": EXPECTED,
    "smolagents": {
        "happy": [("answered", ["kb_search", "get_order"], [], (300, 30))],
        "tool_error": [("answered", [], ["check_inventory"], (300, 30))],
        "retry": [("answered", ["get_order"], ["get_order"], (600, 60))],
    },
}


ANSWERS_OF = {"openai-agents": pydantic_ai_agent.ANSWERS, "smolagents": smolagents_agent.ANSWERS}
