"""The OpenAI Agents SDK (openai-agents 0.24 + openinference-instrumentation-openai-agents 2.6), offline.

A scripted ``Model`` on a ``ModelProvider`` answers every turn (see ``tests/frameworks/openai_agents_agent.py``);
the spans come from the stock instrumentor. Each run is one trace: ``Agent workflow`` (AGENT) >
``Agent workflow`` (CHAIN) > ``support_agent`` (AGENT) > ``turn`` (CHAIN) > ``response`` (LLM) + tools (TOOL).
"""

from __future__ import annotations

import asyncio

import pytest
from agents import OpenAIChatCompletionsModel, Runner
from openai import AsyncOpenAI

from harvester.conventions import is_agent_span, runs_from_spans
from harvester.spans import from_readable
from tests.builders import sdk_http
from tests.builders.frameworks import KB, ORDER
from tests.builders.frameworks import openai_agents_runs as runs_for
from tests.builders.frameworks import openai_agents_spans as spans_for
from tests.frameworks import openai_agents_agent
from tests.frameworks._otel import capture, finished
from tests.frameworks.openai_agents_agent import ANSWERS, MODEL_NAME


def test_happy():
    [run] = runs_for("happy")
    assert run.stop == "answered" and run.error is None
    assert run.answer == ANSWERS["happy"]  # the last LLM span's output message
    assert run.trajectory() == ["kb_search", "get_order"]
    assert run.requested_tools() == ["kb_search", "get_order"] and run.blocked_tools() == []
    assert [(c.name, c.call_id, c.args, c.status, c.result, c.error) for c in run.calls] == [
        ("kb_search", "call_1", {"query": "refund policy"}, "ok", KB, None),
        ("get_order", "call_2", {"order_id": "A1001"}, "ok", ORDER, None),
    ]
    assert [(c.model, c.usage.input_tokens, c.usage.output_tokens) for c in run.llm_calls] == [
        (MODEL_NAME, 100, 10),
        (MODEL_NAME, 200, 20),
    ]
    assert (run.usage.input_tokens, run.usage.output_tokens) == (300, 30)
    assert [(r.name, r.call_id, r.args) for r in run.llm_calls[0].requests] == [
        ("kb_search", "call_1", {"query": "refund policy"}),
        ("get_order", "call_2", {"order_id": "A1001"}),
    ]
    assert run.llm_calls[1].requests == []
    assert run.content_captured
    assert not run.failed


def test_tool_error_fails_the_run():
    [run] = runs_for("tool_error")
    assert run.stop == "error" and run.answer is None
    assert run.error is not None and "orders-db timeout" in run.error.message
    [call] = run.calls
    assert (call.name, call.call_id, call.status, call.args, call.result) == (
        "check_inventory",
        "call_1",
        "error",
        {"sku": "SKU-1"},
        None,
    )
    assert call.error is not None and "orders-db timeout" in call.error.message
    assert run.trajectory() == [] and run.requested_tools() == ["check_inventory"]
    assert run.blocked_tools() == ["check_inventory"]
    assert (run.usage.input_tokens, run.usage.output_tokens) == (100, 10)
    assert run.failed


def test_retried_tool_error_is_a_failed_call_then_a_new_call():
    [run] = runs_for("retry")
    assert run.stop == "answered" and run.error is None
    assert run.answer == ANSWERS["retry"]
    first, second = run.calls
    assert (first.name, first.call_id, first.args, first.status, first.result) == (
        "get_order",
        "call_1",
        {"order_id": "B2002"},
        "error",
        None,
    )
    assert first.error.type == "Error" and "no order B2002" in first.error.message
    assert (second.name, second.call_id, second.args, second.status, second.result, second.error) == (
        "get_order",
        "call_2",
        {"order_id": "A1001"},
        "ok",
        ORDER,
        None,
    )
    assert run.trajectory() == ["get_order"] and run.blocked_tools() == ["get_order"] and run.steps == 2
    assert [(c.usage.input_tokens, c.usage.output_tokens) for c in run.llm_calls] == [(100, 10), (200, 20), (300, 30)]
    assert (run.usage.input_tokens, run.usage.output_tokens) == (600, 60)
    assert run.failed


def test_human_denial_pause_and_resume_are_two_traces():
    paused, resumed = runs_for("denied", 2)
    assert paused.trace_id != resumed.trace_id
    # the paused run: the model asked for issue_refund, which never ran (its TOOL span has no output)
    [call] = paused.calls
    assert (call.name, call.call_id, call.args, call.result) == (
        "issue_refund",
        "call_1",
        {"order_id": "A1001", "amount": 40.0},
        None,
    )
    assert paused.requested_tools() == ["issue_refund"]
    assert paused.answer is None and paused.error is None
    assert (paused.usage.input_tokens, paused.usage.output_tokens) == (100, 10)
    # the resumed run: the denial went back to the model as a tool message, no tool ran
    assert resumed.stop == "answered" and resumed.error is None
    assert resumed.answer == ANSWERS["denied"]
    assert resumed.calls == [] and resumed.trajectory() == []
    assert (resumed.usage.input_tokens, resumed.usage.output_tokens) == (200, 20)


def test_capture_processor_sees_the_outermost_agent_span_end_last():
    spans = spans_for("happy")
    agents = [s for s in spans if is_agent_span(from_readable(s))]
    assert [s.name for s in agents] == ["support_agent", "Agent workflow"]  # nested agent span, then the root
    assert spans[-1] is agents[-1] and spans[-1].parent is None


def test_content_capture_off():
    runs = runs_from_spans(openai_agents_agent.run_scenario("happy", include_content=False))
    assert len(runs) == 1
    run = runs[0]
    assert not run.content_captured and run.source == "openinference"
    assert run.stop == "answered"
    assert run.trajectory() == ["kb_search", "get_order"]
    assert all(c.args is None and c.result is None for c in run.calls)
    # the instrumentor reads tokens only from the Response object, which the SDK leaves off the span when
    # trace_include_sensitive_data=False: no span carries a token count
    assert (run.usage.input_tokens, run.usage.output_tokens) == (None, None)  # unknown, not zero


def test_no_openai_trace_export_and_clean_uninstrument():
    """The SDK's own exporter (to api.openai.com) is never registered, before, during or after a run."""
    from agents.tracing import get_trace_provider
    from agents.tracing.processors import BatchTraceProcessor

    spans_for("happy")
    processors = get_trace_provider()._multi_processor._processors
    assert not any(isinstance(p, BatchTraceProcessor) for p in processors)
    assert not any(type(p).__module__.startswith("openinference") and not p.draining for p in processors)


@pytest.mark.parametrize("scenario", openai_agents_agent.SCENARIOS)
def test_every_scenario_is_fast_and_offline(scenario):
    assert spans_for(scenario)  # the scripted model never opens a connection (no OPENAI_API_KEY is needed)


def test_a_handoff_is_the_call_the_model_made_not_a_blocked_one():
    """The model calls transfer_to_billing_agent; the span says "handoff to billing_agent"."""
    (run,) = runs_for("handoff")
    assert run.stop == "answered" and run.answer == ANSWERS["handoff"] and not run.failed
    assert run.trajectory() == ["transfer_to_billing_agent", "kb_search"] and run.blocked_tools() == []
    assert run.agents == ["support_agent", "billing_agent"]  # not the "Agent workflow" root
    assert run.calls[0].call_id == "call_h" and run.calls[0].result == openai_agents_agent.BILLING_AGENT
    assert (run.usage.input_tokens, run.usage.output_tokens) == (600, 60)


def test_max_turns_is_a_max_steps_stop():
    (run,) = runs_for("max_turns")
    assert run.stop == "max_steps" and run.error.type == "MaxTurnsExceeded" and run.failed
    assert run.trajectory() == ["kb_search", "kb_search"]


def test_a_tripped_input_guardrail_fails_the_run():
    """The guardrail fails its turn span, never the agent span, and no model call is made."""
    (run,) = runs_from_spans(spans_for("guardrail"))
    assert run.stop == "error" and run.error.type == "GuardrailTripwireTriggered" and run.failed
    assert "_no_passwords" in run.error.message and run.calls == []


def test_a_tripped_output_guardrail_fails_the_run_and_its_blocked_text_is_no_answer():
    (run,) = runs_from_spans(spans_for("out_guardrail"))
    assert run.stop == "error" and run.error.type == "GuardrailTripwireTriggered" and run.failed
    assert run.answer is None  # the guardrail stopped it: nobody saw "The admin password is hunter2."


def test_a_chat_completions_model_s_second_tool_turn_keeps_its_call_in_the_next_request():
    """On ``OpenAIChatCompletionsModel`` OpenInference numbers an assistant message's calls by their place
    in the turn's output: the second tool turn's only call is ``tool_calls.1``. The third model call's
    request still holds both assistant calls (a recorded model is asked with the request as recorded)."""
    steps = [
        [("kb_search", {"query": "refund policy"}, "call_1")],
        [("get_order", {"order_id": "A1001"}, "call_2")],
        "A1001 can be refunded.",
    ]
    client = AsyncOpenAI(api_key="sk-test", http_client=sdk_http.http_client("chat", steps, asynchronous=True))
    model = OpenAIChatCompletionsModel(model=sdk_http.MODEL["chat"], openai_client=client)
    agent = openai_agents_agent.build_agent("happy").clone(model=model)
    provider, exporter = capture()
    with openai_agents_agent.instrumented(provider):
        result = asyncio.run(Runner.run(agent, "Can A1001 be refunded?"))
    assert result.final_output == "A1001 can be refunded."
    spans = finished(exporter)
    third = [s for s in spans if any(k.startswith("llm.input_messages.4.") for k in s.attributes or {})]
    assert any(".tool_calls.1.tool_call.function.name" in k for s in third for k in s.attributes or {})
    (run,) = runs_from_spans(spans)
    request = run.llm_calls[2].request
    assert request is not None
    said = [(m.role, [c.name for c in m.tool_calls]) for m in request.messages]
    assert said == [
        ("user", []),
        ("assistant", ["kb_search"]),
        ("tool", []),
        ("assistant", ["get_order"]),
        ("tool", []),
    ]
