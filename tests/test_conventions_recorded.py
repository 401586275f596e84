"""The committed framework traces read back as the scenarios they record, and regenerate byte for byte."""

from __future__ import annotations

import orjson
import pytest

from harvester.conventions import runs_from_spans
from tests.builders.frameworks import ANSWERS_OF, EXPECTED, EXPECTED_OF, TRACES
from tests.frameworks import record
from tests.frameworks.pydantic_ai_agent import AGENT_NAME, ANSWERS, PROMPTS

SOURCES = {
    "pydantic-ai": "genai",
    "pydantic-ai-v6": "genai",
    "langchain-openinference": "openinference",
    "langchain-openllmetry": "openllmetry",
}


@pytest.mark.parametrize("framework", list(SOURCES))
@pytest.mark.parametrize("scenario", list(EXPECTED))
def test_recorded_trace_reads_back(framework, scenario):
    path = TRACES / f"{framework}-{scenario}.json"
    assert path.stat().st_size < 32_000, "keep recorded traces small"
    runs = runs_from_spans(orjson.loads(path.read_bytes()))
    got = [(r.stop, r.trajectory(), r.blocked_tools(), (r.usage.input_tokens, r.usage.output_tokens)) for r in runs]
    assert got == EXPECTED[scenario]
    assert all(r.source == SOURCES[framework] and r.prompt == PROMPTS[scenario] for r in runs)
    assert runs[-1].answer == ANSWERS.get(scenario)
    assert runs[0].started_at.startswith("2025-11-30T02:00:00.")


@pytest.mark.parametrize("framework", ["pydantic-ai", "langchain-openinference"])
def test_recording_is_deterministic(framework):
    fresh = record.document(record.FRAMEWORKS[framework]("retry"), f"{framework}-retry")
    assert fresh == (TRACES / f"{framework}-retry.json").read_bytes(), "re-run python -m tests.frameworks.record"


# -- openai-agents and smolagents (OpenInference) ----------------------------------------------------
NEW = [(fw, sc) for fw in EXPECTED_OF for sc in record.SCENARIOS_OF.get(fw, record.SCENARIOS)]


def read_back(framework: str, scenario: str) -> list:
    path = TRACES / f"{framework}-{scenario}.json"
    assert path.stat().st_size < 32_000, "keep recorded traces small"
    return runs_from_spans(orjson.loads(path.read_bytes()))


@pytest.mark.parametrize(("framework", "scenario"), NEW)
def test_recorded_openinference_trace_reads_back(framework, scenario):
    runs = read_back(framework, scenario)
    expected = EXPECTED_OF[framework][scenario]
    assert len(runs) == len(expected)
    assert [(r.usage.input_tokens, r.usage.output_tokens) for r in runs] == [e[3] for e in expected]
    assert all(r.source == "openinference" for r in runs)
    assert runs[-1].answer == ANSWERS_OF[framework].get(scenario)
    assert runs[0].started_at.startswith("2025-11-30T02:00:00.")
    assert all(r.prompt == PROMPTS[scenario] and r.agent == AGENT_NAME and r.content_captured for r in runs)
    assert [(r.stop, r.trajectory(), r.blocked_tools()) for r in runs] == [e[:3] for e in expected]


@pytest.mark.parametrize("framework", list(EXPECTED_OF))
def test_openinference_recording_is_deterministic(framework):
    fresh = record.document(record.FRAMEWORKS[framework]("retry"), f"{framework}-retry")
    assert fresh == (TRACES / f"{framework}-retry.json").read_bytes(), "re-run python -m tests.frameworks.record"
