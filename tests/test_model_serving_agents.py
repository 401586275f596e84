"""A recorded-model replay answers the OpenAI Agents SDK's model calls: ``Runner.run``, ``run_sync`` and
``run_streamed`` get the served answers as the SDK's own responses (and stream events), the tool a served
answer asks for runs, and the requests the server got hold what the live model would have received.
The agent's model raises if called; outside a model-server context it is called, as before."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from agents import Agent, ModelSettings, RunConfig, Runner, function_tool, set_trace_processors
from agents.models.interface import Model
from pydantic import BaseModel

from harvester.conventions._frameworks import openai_agents
from tests.builders.served_models import ListServer as Server
from tests.builders.served_models import answer, serving
from tests.frameworks import tools

INSTRUCTIONS = "You are a support agent."
PROMPT = "What is the refund policy?"


class NoModel(Model):
    """The live model: must not be called while the server answers."""

    calls = 0

    async def get_response(self, *args: Any, **kwargs: Any) -> Any:
        NoModel.calls += 1
        raise AssertionError("the live model was called")

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        NoModel.calls += 1
        raise AssertionError("the live model was called")


ANSWERS = [answer(calls=[("kb_search", {"query": "refund policy"}, "call_r1")]), answer("Within 30 days.")]


@pytest.fixture
def served() -> Iterator[Server]:
    set_trace_processors([])  # no OpenAI trace export
    openai_agents.install()
    NoModel.calls = 0
    with serving(Server(ANSWERS)) as server:
        yield server


def _agent() -> Agent:
    return Agent(
        name="support_agent",
        instructions=INSTRUCTIONS,
        model=NoModel(),
        tools=[function_tool(tools.kb_search)],
        model_settings=ModelSettings(temperature=0.2),
    )


def _assert_requests(server: Server) -> None:
    first, second = server.requests
    assert first["system"] == INSTRUCTIONS
    assert first["messages"] == [{"role": "user", "content": PROMPT, "tool_calls": [], "tool_call_id": None}]
    assert [t["name"] for t in first["tools"] or []] == ["kb_search"]
    assert (first["tools"] or [])[0]["parameters"]["properties"]["query"]["type"] == "string"
    assert first["settings"] == {"temperature": 0.2}
    call, output = second["messages"][1:]
    assert call["tool_calls"] == [{"name": "kb_search", "call_id": None, "args": {"query": "refund policy"}}]
    assert output["role"] == "tool" and output["content"] == tools.KB["refund policy"]
    assert NoModel.calls == 0


def test_runner_run_is_answered_from_the_server(served: Server) -> None:
    ran = tools.RAN["kb_search"]
    result = asyncio.run(Runner.run(_agent(), PROMPT))
    assert result.final_output == "Within 30 days."
    assert tools.RAN["kb_search"] == ran + 1  # the tool the served answer asked for ran
    calls = [i.raw_item for i in result.new_items if i.type == "tool_call_item"]
    assert [c.call_id for c in calls] == ["call_r1"]  # the recorded call id
    assert result.context_wrapper.usage.input_tokens == 200  # the recorded usage
    _assert_requests(served)


def test_run_sync_is_answered_from_the_server(served: Server) -> None:
    result = Runner.run_sync(_agent(), PROMPT)
    assert result.final_output == "Within 30 days."
    _assert_requests(served)


def test_run_streamed_streams_the_served_answers(served: Server) -> None:
    async def run() -> tuple[Any, list[Any]]:
        result = Runner.run_streamed(_agent(), PROMPT)
        events = [e async for e in result.stream_events()]
        return result, events

    result, events = asyncio.run(run())
    assert result.final_output == "Within 30 days."
    deltas = [
        e.data.delta for e in events if e.type == "raw_response_event" and e.data.type == "response.output_text.delta"
    ]
    assert "".join(deltas) == "Within 30 days."
    assert [e.item.type for e in events if e.type == "run_item_stream_event"][:2] == [
        "tool_call_item",
        "tool_call_output_item",
    ]
    _assert_requests(served)


class Reply(BaseModel):
    response: str


def test_handoffs_are_offered_as_tools_and_an_output_schema_is_the_response_format(served: Server) -> None:
    served.answers = [answer('{"response": "ok"}')]
    billing = Agent(name="billing_agent", instructions="You handle refunds.", model=NoModel())
    agent = _agent().clone(handoffs=[billing], output_type=Reply)
    result = asyncio.run(Runner.run(agent, PROMPT, run_config=RunConfig(tracing_disabled=True)))
    assert result.final_output == Reply(response="ok")
    (request,) = served.requests
    assert [t["name"] for t in request["tools"] or []] == ["kb_search", "transfer_to_billing_agent"]
    assert request["settings"]["response_format"]["type"] == "json_schema"


def test_outside_a_model_server_the_model_is_called() -> None:
    openai_agents.install()
    NoModel.calls = 0
    with pytest.raises(AssertionError, match="the live model was called"):
        asyncio.run(Runner.run(_agent(), PROMPT, run_config=RunConfig(tracing_disabled=True)))
    assert NoModel.calls == 1


def test_a_served_call_is_traced_as_a_model_call(served: Server) -> None:
    from tests.frameworks._otel import capture, finished
    from tests.frameworks.openai_agents_agent import instrumented

    provider, exporter = capture()
    with instrumented(provider):
        asyncio.run(Runner.run(_agent(), PROMPT))
    llm = [s.attributes for s in finished(exporter) if s.attributes.get("openinference.span.kind") == "LLM"]
    assert len(llm) == 2
    assert llm[0]["llm.output_messages.0.message.tool_calls.0.tool_call.function.name"] == "kb_search"
    assert llm[0]["llm.input_messages.0.message.content"] == INSTRUCTIONS
    assert llm[1]["llm.token_count.prompt"] == 100 and llm[1]["llm.model_name"] == "recorded-model"
