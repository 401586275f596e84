"""LangChain in a recorded-model replay: a ``create_agent`` graph's chat model is answered by the case's
model server (invoke, ainvoke, streaming), under LangChain's callbacks (the tracing instrumentors'
model span); outside one, the model is called as before."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool

from harvester.conventions._frameworks import langchain as adapter
from tests.builders.served_models import FINAL, PROMPT, SYSTEM, USAGE, ListServer, assert_requests, kb_search, serving


class OfflineChat(BaseChatModel):
    """A chat model that binds tools as the provider integrations do, and fails if it is ever called."""

    temperature: float = 0.3

    @property
    def _llm_type(self) -> str:
        return "offline-chat"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"temperature": self.temperature}

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
        raise AssertionError("the live model was called")

    def _stream(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
        raise AssertionError("the live model was called")
        yield


class Ends(BaseCallbackHandler):
    """Counts the model runs the callbacks saw end (what the tracing instrumentors turn into spans)."""

    def __init__(self) -> None:
        self.ended: list[Any] = []

    def on_llm_end(self, response: Any, **kwargs: Any) -> None:
        self.ended.append(response)


def _graph(model: BaseChatModel | None = None) -> Any:
    graph = create_agent(model or OfflineChat(), tools=[kb_search], system_prompt=SYSTEM)
    adapter.install()  # as a replay does once the agent exists
    return graph


def _given() -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": PROMPT}]}


def _assert_requests(server: ListServer) -> None:
    assert_requests(server, {"properties": {"query": {"type": "string"}}, "required": ["query"], "type": "object"})
    assert server.requests[0]["settings"] == {"temperature": 0.3}


def test_invoke_is_answered_by_the_server_and_calls_the_tool_it_asks_for():
    ends = Ends()
    with serving(ListServer()) as server:
        state = _graph().invoke(_given(), {"callbacks": [ends]})
    _assert_requests(server)
    asked, tool, answered = state["messages"][1:]
    assert asked.tool_calls == [
        {"name": "kb_search", "args": {"query": "refund policy"}, "id": "call_kb", "type": "tool_call"}
    ]
    assert tool.tool_call_id == "call_kb" and "refunds within 30 days" in tool.content
    assert isinstance(answered, AIMessage) and answered.content == FINAL
    assert answered.usage_metadata["input_tokens"] == USAGE["input_tokens"]
    assert answered.response_metadata["model_name"] == "gpt-recorded"
    assert len(ends.ended) == 2  # the callbacks saw both model calls end


def test_ainvoke_is_answered_by_the_server():
    async def run():
        with serving(ListServer()) as server:
            return await _graph().ainvoke(_given()), server

    state, server = asyncio.run(run())
    assert state["messages"][-1].content == FINAL
    _assert_requests(server)


def test_streaming_is_answered_with_chunks_of_the_recorded_answer():
    with serving(ListServer()) as server:
        streamed = [m for m, _ in _graph().stream(_given(), stream_mode="messages")]
    _assert_requests(server)
    chunks = [m for m in streamed if isinstance(m, AIMessageChunk)]
    assert [c["id"] for m in chunks for c in m.tool_call_chunks] == ["call_kb"]
    assert "".join(str(m.content) for m in chunks) == FINAL


def test_astreaming_is_answered_with_chunks_of_the_recorded_answer():
    async def run():
        with serving(ListServer()) as server:
            return [m async for m, _ in _graph().astream(_given(), stream_mode="messages")], server

    streamed, server = asyncio.run(run())
    _assert_requests(server)
    assert "".join(str(m.content) for m in streamed if isinstance(m, AIMessageChunk)) == FINAL


def test_outside_a_recorded_model_replay_the_model_is_called():
    with pytest.raises(AssertionError, match="live model was called"):
        _graph().invoke(_given())


class LiveChat(OfflineChat):
    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kw: Any) -> Any:
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content="live answer"))])

    async def _agenerate(self, *args: Any, **kwargs: Any) -> Any:  # LangChain's own: runs _generate
        return await super()._agenerate(*args, **kwargs)


def test_when_the_server_has_no_answer_the_live_model_answers_once():
    async def run():
        with serving(ListServer([])) as server:
            return await _graph(LiveChat()).ainvoke(_given()), server

    state, server = asyncio.run(run())
    assert state["messages"][-1].content == "live answer"
    assert len(server.requests) == 1  # asked once, not again by the _generate the live _agenerate runs
