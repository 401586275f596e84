"""Model fixtures (issue 30): each convention reads what a model call was asked and what it answered,
harvest keeps one turn per call in the case (redacted like every other fixture), and a case file with
bad turns is one line naming its file and field."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry.sdk.trace import TracerProvider

from harvester import HarvestingSpanProcessor, runs_from_spans
from harvester.case import load_case, save_case
from harvester.conventions._requests import request_from_openai, tool_specs
from harvester.harvest import case_from_run, rerecord
from harvester.harvest._model_fixtures import NO_MODEL_CONTENT_NOTE
from harvester.model import Run
from harvester.spans import from_readable, spans_from_otlp
from harvester.store import TraceStore
from tests.builders.project import cli, enter_project
from tests.frameworks import pydantic_ai_agent, smolagents_agent

ROOT = Path(__file__).resolve().parents[1]
KB_RESULT = "Refunds are accepted within 30 days of delivery."


def recorded(name: str) -> Run:
    spans = spans_from_otlp(orjson.loads((ROOT / "traces" / "frameworks" / f"{name}.json").read_bytes()))
    (run,) = runs_from_spans(list(spans))
    return run


@pytest.mark.parametrize(
    ("name", "system"),
    [
        ("pydantic-ai-happy", None),
        ("pydantic-ai-v6-happy", None),
        ("langchain-openinference-happy", None),
        ("openai-agents-happy", "You are a support agent."),
        ("smolagents-happy", "You are an expert assistant"),
    ],
)
def test_each_convention_reads_what_a_recorded_model_call_was_asked_and_answered(name: str, system: str | None):
    run = recorded(name)
    first, second = run.llm_calls[0], run.llm_calls[-1]
    assert first.request is not None and second.request is not None
    assert (first.request.system or "").startswith(system or "") and (first.request.system is None) == (system is None)
    assert [m.role for m in first.request.messages] == ["user"]
    assert "Can I still return order A1001?" in (first.request.messages[0].content or "")
    assert [c.name for c in first.requests][:1] == ["kb_search"] and first.text is None
    # the later call saw the model's own tool calls and the tools' results (smolagents: as text)
    said = " ".join(m.content or "" for m in second.request.messages)
    assert KB_RESULT in said
    asked = [c for m in second.request.messages for c in m.tool_calls]
    if name != "smolagents-happy":
        assert {"name": "kb_search", "args": {"query": "refund policy"}} in [
            {"name": c.name, "args": c.args} for c in asked
        ]
        assert any(m.role == "tool" and m.tool_call_id == "call_1" for m in second.request.messages)
    assert second.answer().text == run.answer or name == "smolagents-happy"  # smolagents answers with a tool


def test_openllmetry_langchain_records_the_answer_but_not_the_request():
    run = recorded("langchain-openllmetry-happy")
    assert [c.request for c in run.llm_calls] == [None, None]
    assert [c.name for c in run.llm_calls[0].requests] == ["kb_search", "get_order"]
    assert run.llm_calls[-1].text == run.answer


def test_tools_offered_are_read_with_their_schemas_from_live_spans():
    """The recorded traces leave tool schemas out (size); a live run of the framework keeps them."""
    for spans in (pydantic_ai_agent.run_scenario("happy"), smolagents_agent.run_scenario("happy")):
        (run,) = runs_from_spans([from_readable(s) for s in spans])
        request = run.llm_calls[0].request
        assert request is not None and request.tools is not None
        kb = next(t for t in request.tools if t.name == "kb_search")
        assert kb.description and kb.description.startswith("Search the support knowledge base")
        assert kb.parameters is not None and "query" in kb.parameters["properties"]


def test_an_openai_request_normalizes_to_the_form_the_spans_give():
    request = request_from_openai(
        [
            {"role": "developer", "content": "Be brief."},
            {"role": "system", "content": [{"type": "text", "text": "Policy."}]},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "kb", "arguments": '{"q": "x"}'}}],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "found"},
        ],
        tools=[{"type": "function", "function": {"name": "kb", "description": "d", "parameters": {"type": "object"}}}],
        settings={"temperature": 0, "max_completion_tokens": 50, "top_p": None, "stream": True},
    )
    assert request["system"] == "Be brief.\n\nPolicy."
    assert [m["role"] for m in request["messages"]] == ["user", "assistant", "tool"]
    assert request["messages"][0]["content"] == "a\nb"
    assert request["messages"][1]["tool_calls"] == [{"name": "kb", "call_id": "c1", "args": {"q": "x"}}]
    assert request["messages"][2]["tool_call_id"] == "c1"
    assert request["tools"] == [{"name": "kb", "description": "d", "parameters": {"type": "object"}}]
    assert request["settings"] == {"temperature": 0, "max_tokens": 50}  # unset and non-shaping ones left out
    assert tool_specs(['"kb_search"']) == [{"name": "kb_search", "description": None, "parameters": None}]


def test_harvest_keeps_one_redacted_turn_per_model_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    project = enter_project(tmp_path, monkeypatch)
    provider = TracerProvider()
    processor = HarvestingSpanProcessor(str(project / "traces.db"), redact={"patterns": {"order": r"A100\d"}})
    provider.add_span_processor(processor)
    pydantic_ai_agent.run_scenario("happy", provider)
    processor.shutdown()
    out = cli("harvest", "--json")
    assert out.exit_code == 0, out.output
    (path,) = (project / "cases" / "pending").glob("*.json")
    assert "A1001" not in path.read_text()  # no turn holds the order id the rule hides
    case = load_case(path)
    assert len(case.model_fixtures) == 2
    first, last = case.model_fixtures
    assert first.request is not None and first.request.messages[0].content.startswith(
        "Can I still return order <order:"
    )
    assert first.request.tools is not None and {t.name for t in first.request.tools} >= {"kb_search", "get_order"}
    assert [c.name for c in first.answer.tool_calls] == ["kb_search", "get_order"]
    assert first.answer.usage.input_tokens == 100 and first.answer.model == "scripted-support-model"
    assert last.answer.text and last.answer.text.startswith("Yes, order <order:")
    shown = cli("cases", "show", case.id)
    assert "step 1. kb_search(" in shown.output and "step 2. 'Yes, order <order:" in shown.output


def test_a_run_without_model_content_gets_no_turns_and_a_note():
    (run,) = runs_from_spans([from_readable(s) for s in pydantic_ai_agent.run_scenario("happy", include_content=False)])
    case = case_from_run(run)
    assert case.model_fixtures == [] and NO_MODEL_CONTENT_NOTE in case.review_notes
    assert NO_MODEL_CONTENT_NOTE not in case_from_run(recorded("pydantic-ai-happy")).review_notes


def test_a_cut_model_payload_marks_its_turn_truncated_with_a_note():
    doc = orjson.loads((ROOT / "traces" / "frameworks" / "langchain-openinference-happy.json").read_bytes())
    key = "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments"
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for sp in ss["spans"]:
                for a in sp["attributes"]:
                    if a["key"] == key and a["value"]["stringValue"].startswith('{"query"'):
                        a["value"]["stringValue"] = '{"query": "refund po'  # the attribute length limit
    (run,) = runs_from_spans(list(spans_from_otlp(doc)))
    case = case_from_run(run)
    assert [t.truncated for t in case.model_fixtures] == [True, False]
    assert any("model turn 1 was truncated" in n for n in case.review_notes)  # counted from 1, as drift is


def test_an_older_case_without_model_fixtures_loads_and_saves_unchanged(tmp_path: Path):
    old = subprocess.run(
        ["git", "show", "10954d7:cases/order-a1002.json"], cwd=ROOT, capture_output=True, check=True
    ).stdout
    (tmp_path / "order-a1002.json").write_bytes(old)
    case = load_case(tmp_path / "order-a1002.json")
    assert case.model_fixtures == []
    assert save_case(case, tmp_path / "again").read_bytes() == old


def test_rerecord_gives_an_older_case_model_fixtures():
    run = recorded("pydantic-ai-happy")
    old = case_from_run(run).model_copy(update={"model_fixtures": []})
    refreshed = rerecord(old, run)
    assert len(refreshed.case.model_fixtures) == 2
    assert "model fixtures: 0 turns  =>  2 turns" in refreshed.changes


@pytest.mark.parametrize(
    ("turns", "field"),
    [
        ("not a list", "model_fixtures"),
        ([{"request": None}], "model_fixtures.0.answer"),
        ([{"answer": {"text": 3}}], "model_fixtures.0.answer.text"),
    ],
)
def test_a_bad_model_fixture_is_one_line_naming_file_and_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, turns: Any, field: str
):
    project = enter_project(tmp_path, monkeypatch)
    case = case_from_run(recorded("pydantic-ai-happy"))
    path = save_case(case, project / "cases" / "pending")
    data = json.loads(path.read_text())
    data["model_fixtures"] = turns
    path.write_text(json.dumps(data))
    out = cli("cases", "show", case.id)
    assert out.exit_code == 2
    (line,) = out.output.strip().splitlines()
    assert str(path.relative_to(project)) in line or str(path) in line
    assert field in line


def test_the_store_keeps_a_model_calls_request(tmp_path: Path):
    """What capture stores is what harvest reads: the request survives the store's round trip."""
    with TraceStore(str(tmp_path / "t.db")) as store:
        store.add(recorded("openai-agents-happy"))
        (run,) = store.runs()
    assert run.llm_calls[0].request is not None and run.llm_calls[0].request.system == "You are a support agent."
