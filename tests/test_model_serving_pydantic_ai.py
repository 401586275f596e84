"""pydantic-ai in a recorded-model replay: every model request is answered by the case's model server,
whatever model class the agent holds, below pydantic-ai's own instrumentation (its model span stays);
outside one, the model is called as before."""

from __future__ import annotations

import asyncio

import pytest
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ToolCallPart
from pydantic_ai.models.fallback import FallbackModel
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings

from harvester.conventions._frameworks import pydantic_ai as adapter
from tests.builders.served_models import FINAL, PROMPT, SYSTEM, USAGE, ListServer, assert_requests, kb_search, serving
from tests.frameworks._otel import capture, finished


def _live(messages: list[ModelMessage], info: AgentInfo) -> None:
    raise AssertionError("the live model was called")


async def _live_stream(messages: list[ModelMessage], info: AgentInfo):
    raise AssertionError("the live model was called")
    yield ""


def _model(name: str = "offline") -> FunctionModel:
    return FunctionModel(_live, stream_function=_live_stream, model_name=name)


def _agent(model=None) -> Agent:
    agent = Agent(model or _model(), system_prompt=SYSTEM, tools=[kb_search])
    adapter.install()  # as a replay does once the agent exists
    return agent


def _assert_requests(server: ListServer) -> None:
    assert_requests(
        server,
        {
            "additionalProperties": False,
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
            "type": "object",
        },
    )


def test_run_sync_is_answered_by_the_server_and_calls_the_tool_it_asks_for():
    with serving(ListServer()) as server:
        result = _agent().run_sync(PROMPT, model_settings={"temperature": 0.2, "max_tokens": 50})
    assert result.output == FINAL
    _assert_requests(server)
    assert server.requests[0]["settings"] == {"temperature": 0.2, "max_tokens": 50}
    calls = [p for m in result.all_messages() for p in getattr(m, "parts", ()) if isinstance(p, ToolCallPart)]
    assert [(c.tool_name, c.tool_call_id) for c in calls] == [("kb_search", "call_kb")]  # the recorded id
    assert result.usage.input_tokens == 2 * USAGE["input_tokens"]
    assert result.all_messages()[-1].model_name == "gpt-recorded"


def test_run_async_is_answered_by_the_server():
    async def run():
        with serving(ListServer()) as server:
            return (await _agent().run(PROMPT)).output, server

    output, server = asyncio.run(run())
    assert output == FINAL
    _assert_requests(server)


def test_run_stream_is_answered_with_a_stream_of_the_recorded_answer():
    async def run():
        with serving(ListServer()) as server:
            async with _agent().run_stream(PROMPT) as streamed:
                return await streamed.get_output(), server

    output, server = asyncio.run(run())
    assert output == FINAL
    _assert_requests(server)


def test_the_instrumentation_span_still_records_the_served_call():
    provider, exporter = capture()
    agent = _agent()
    agent.instrument = InstrumentationSettings(tracer_provider=provider)
    with serving(ListServer()):
        agent.run_sync(PROMPT)
    chats = [s for s in finished(exporter) if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert len(chats) == 2
    assert chats[-1].attributes["gen_ai.response.model"] == "gpt-recorded"
    assert chats[0].attributes["gen_ai.usage.input_tokens"] == USAGE["input_tokens"]


def test_a_wrapping_model_is_served_once_per_call_through_the_model_it_wraps():
    fallback = FallbackModel(_model("first"), _model("second"))
    with serving(ListServer()) as server:
        assert _agent(fallback).run_sync(PROMPT).output == FINAL
    assert len(server.requests) == 2


def test_outside_a_recorded_model_replay_the_model_is_called():
    with pytest.raises(AssertionError, match="live model was called"):
        _agent().run_sync(PROMPT)


def test_when_the_server_has_no_answer_the_live_model_answers():
    def respond(messages: list[ModelMessage], info: AgentInfo):
        from pydantic_ai.messages import ModelResponse, TextPart

        return ModelResponse(parts=[TextPart("live answer")])

    with serving(ListServer([])) as server:
        assert _agent(FunctionModel(respond)).run_sync(PROMPT).output == "live answer"
    assert len(server.requests) == 1  # asked once, not again by the live call
