"""The committed framework traces read back as the scenarios they record, and regenerate byte for byte."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from harvester.conventions import runs_from_spans
from tests.frameworks import record
from tests.frameworks.pydantic_ai_agent import ANSWERS, PROMPTS

TRACES = Path(__file__).resolve().parents[1] / "traces" / "frameworks"
EXPECTED = {  # scenario -> per run: (stop, trajectory, blocked, (input, output tokens))
    "happy": [("answered", ["kb_search", "get_order"], [], (300, 30))],
    "tool_error": [("error", [], ["check_inventory"], (100, 10))],
    "retry": [("answered", ["get_order"], ["get_order"], (600, 60))],
    "denied": [("deferred", [], ["issue_refund"], (100, 10)), ("answered", [], [], (200, 20))],
}
SOURCES = {"pydantic-ai": "genai", "pydantic-ai-v6": "genai", "langchain-openinference": "openinference",
           "langchain-openllmetry": "openllmetry"}


@pytest.mark.parametrize("framework", list(record.FRAMEWORKS))
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
    fresh = record.document(record.FRAMEWORKS[framework]("retry"))
    assert fresh == (TRACES / f"{framework}-retry.json").read_bytes(), "re-run python -m tests.frameworks.record"
