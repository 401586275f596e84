"""Every registered plug-in keeps its protocol: the convention readers (``READERS``: ``Reader``) and the
frameworks (``FRAMEWORKS``: ``Adapter``, each with its capture quirks, a ``Framework``). mypy checks the
same through the tables' types; this
runs each registered module through one contract, and shows the contract catches a module missing a
member (an adapter written without ``NAME`` made every replay raise ``AttributeError``)."""

from __future__ import annotations

import inspect
import types
from typing import Any

import pytest

from harvester.adapters import ADAPTERS
from harvester.conventions import _frameworks as frameworks
from harvester.conventions import runs_from_spans
from harvester.conventions._frameworks import FRAMEWORKS, Adapter, Framework
from harvester.conventions._frameworks import pydantic_ai as pydantic_ai_adapter
from harvester.conventions._readers import READERS, Reader
from harvester.conventions._readings import AgentReading, LlmReading, ToolReading
from harvester.conventions._values import MISSING
from harvester.model import STOPS
from harvester.spans import SpanData
from tests.builders.installed import require


def members(protocol: type) -> dict[str, Any]:
    """A protocol's members (methods and read-only properties), its bases' included."""
    out: dict[str, Any] = {}
    for cls in reversed(protocol.__mro__):
        if getattr(cls, "_is_protocol", False) and cls is not protocol.__mro__[-1]:
            out.update(
                {
                    k: v
                    for k, v in vars(cls).items()
                    if not k.startswith("_") and (inspect.isfunction(v) or isinstance(v, property))
                }
            )
    return out


def broken(plugin: Any, protocol: type) -> list[str]:
    """What ``plugin`` lacks of ``protocol``: a missing member, or a function whose parameters differ."""
    out = []
    for name, member in members(protocol).items():
        if not hasattr(plugin, name):
            out.append(f"no {name}")
        elif inspect.isfunction(member):
            want = list(inspect.signature(member).parameters.values())[1:]  # without self
            got = list(inspect.signature(getattr(plugin, name)).parameters.values())
            if [(p.name, p.kind) for p in want] != [(p.name, p.kind) for p in got]:
                out.append(f"{name}{inspect.signature(getattr(plugin, name))} is not {name}{want}")
    return out


@pytest.mark.parametrize("source", sorted(READERS))
def test_every_registered_reader_is_a_reader(source):
    assert broken(READERS[source], Reader) == []


@pytest.mark.parametrize("source", sorted(READERS))
def test_every_reader_reads_a_span_it_cannot_make_sense_of_without_raising(source):
    reader = READERS[source]
    odd = SpanData("0" * 32, "1" * 16, None, "x", attributes={"input.value": 3, "gen_ai.input.messages": "{"})
    assert isinstance(reader.read_llm(odd), LlmReading)
    assert isinstance(reader.read_tool(odd), ToolReading)
    assert isinstance(reader.read_agent(odd), AgentReading)
    assert reader.agent_name(odd, span_name=False) is None
    assert reader.agent_name(odd) in ("x", None)
    assert reader.llm_first_user(odd) is None
    assert reader.llm_messages(odd) in (None, [])


@pytest.mark.parametrize("framework", [f.FRAMEWORK for f in FRAMEWORKS], ids=lambda f: f.name)
def test_every_registered_framework_keeps_the_contract(framework):
    assert isinstance(framework, Framework) and isinstance(framework.name, str) and framework.name
    assert isinstance(framework.deferrals, frozenset) and isinstance(framework.hidden_answers, frozenset)
    assert all(isinstance(k, str) and v in STOPS for k, v in framework.limit_stops.items())
    assert all(isinstance(a, str) and a for a in framework.limit_answers)
    assert all(isinstance(p, str) and p and isinstance(t, str) for p, t in framework.stop_messages)
    # a plain span and a plain message are no framework's quirk: every framework leaves them alone
    plain = SpanData("0" * 32, "1" * 16, None, "get_order", attributes={"tool.name": "get_order"})
    assert framework.tool_span(plain, "get_order", "{}", "ok") is None
    assert framework.error_message("boom") is None
    assert framework.agent_span_name(plain, "support") == "support"
    assert framework.forced_answer([], [], []) is False
    assert all(isinstance(c, str) for c in framework.agent_calls("support"))
    assert framework.tool_input({"order_id": "A1"}, None) is None
    assert framework.agent_prompt({"messages": []}) is MISSING
    assert framework.agent_answer({"messages": []}) is MISSING
    assert framework.not_a_call(plain) is False


def test_a_registered_framework_is_asked_by_the_readers_and_the_assembly(monkeypatch):
    # one module and its line in FRAMEWORKS: here a framework naming its agent spans "<agent>.invoke"
    invoke = types.ModuleType("invoking")
    invoke.FRAMEWORK = Framework("invoking", agent_span_name=lambda span, name: name.removesuffix(".invoke"))
    agent = SpanData("a" * 32, "1" * 16, None, "support.invoke", 1, 9, attributes={"openinference.span.kind": "AGENT"})
    llm = SpanData(
        "a" * 32,
        "2" * 16,
        "1" * 16,
        "chat",
        2,
        8,
        attributes={
            "openinference.span.kind": "LLM",
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": "where is A1?",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": "on its way",
        },
    )
    assert [r.agent for r in runs_from_spans([agent, llm])] == ["support.invoke"]
    monkeypatch.setattr(frameworks, "FRAMEWORKS", (*frameworks.FRAMEWORKS, invoke))
    assert [(r.agent, r.answer) for r in runs_from_spans([agent, llm])] == [("support", "on its way")]


def test_a_registered_framework_says_which_tool_span_is_no_call_and_where_its_agent_answered(monkeypatch):
    # a framework recording one turn's parallel calls under a summary span of its own, and its agent's
    # answer as an event: {"content": {"parts": [{"text": ...}]}}
    def event_text(payload: dict[str, Any]) -> Any:
        parts = payload.get("content", {}).get("parts") if isinstance(payload.get("content"), dict) else None
        return "".join(p["text"] for p in parts if "text" in p) if isinstance(parts, list) else MISSING

    summing = types.ModuleType("summing")
    summing.FRAMEWORK = Framework(
        "summing", not_a_call=lambda span: span.name == "tools (merged)", agent_answer=event_text
    )
    event = '{"content": {"parts": [{"text": "Yes: within 30 days."}], "role": "model"}, "author": "support"}'
    oi = "openinference.span.kind"
    spans = [
        SpanData("b" * 32, "1" * 16, None, "support", 1, 9, attributes={oi: "AGENT", "output.value": event}),
        SpanData(
            "b" * 32,
            "2" * 16,
            "1" * 16,
            "chat",
            2,
            3,
            attributes={
                oi: "LLM",
                "llm.input_messages.0.message.role": "user",
                "llm.input_messages.0.message.content": "can I return A1?",
                "llm.output_messages.0.message.role": "model",
                "llm.output_messages.0.message.tool_calls.0.tool_call.id": "c1",
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "get_order",
                "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": '{"order_id": "A1"}',
            },
        ),
        SpanData(
            "b" * 32,
            "3" * 16,
            "1" * 16,
            "get_order",
            4,
            5,
            attributes={
                oi: "TOOL",
                "tool.name": "get_order",
                "input.value": '{"order_id": "A1"}',
                "output.value": "ok",
            },
        ),
        SpanData("b" * 32, "4" * 16, "1" * 16, "tools (merged)", 4, 6, attributes={oi: "TOOL"}),
    ]
    (before,) = runs_from_spans(spans)
    assert [c.name for c in before.calls] == ["get_order", "tools (merged)"]
    assert before.answer == "ok"  # read from the last tool: the event is no form the readers know
    monkeypatch.setattr(frameworks, "FRAMEWORKS", (*frameworks.FRAMEWORKS, summing))
    (run,) = runs_from_spans(spans)
    assert [c.name for c in run.calls] == ["get_order"] and run.content_captured
    assert run.answer == "Yes: within 30 days." and run.stop == "answered"


def test_frameworks_have_names_of_their_own():
    names = [f.FRAMEWORK.name for f in FRAMEWORKS]
    assert len(set(names)) == len(names)
    assert names == [f.NAME for f in FRAMEWORKS]  # one name per framework, in capture and replay


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.__name__.rpartition(".")[2])
def test_every_registered_adapter_is_an_adapter(adapter):
    require(adapter)
    assert broken(adapter, Adapter) == []
    assert isinstance(adapter.NAME, str) and adapter.NAME
    assert isinstance(adapter.ROOTS, tuple) and adapter.ROOTS and all(isinstance(r, str) for r in adapter.ROOTS)
    assert adapter.accepts(object()) is False  # only its own framework's agents


def test_adapters_have_names_of_their_own():
    names = [a.NAME for a in ADAPTERS]
    assert len(set(names)) == len(names)


def test_the_contract_catches_an_adapter_written_without_its_name():
    # what docs/contributing.md used to teach: the five names, no NAME
    module = types.ModuleType("my_adapter")
    for name in ("FRAMEWORK", "ROOTS", "install", "accepts", "prepare", "instrument"):
        setattr(module, name, getattr(pydantic_ai_adapter, name))
    assert broken(module, Adapter) == ["no NAME"]
    module.NAME = "mine"
    assert broken(module, Adapter) == []


def test_the_contract_catches_a_reader_whose_function_takes_other_parameters():
    module = types.ModuleType("my_reader")
    for name in members(Reader):
        setattr(module, name, getattr(READERS["genai"], name))
    module.agent_name = lambda span: None  # no span_name: the assembly's call would raise
    assert [b.split("(")[0] for b in broken(module, Reader)] == ["agent_name"]
