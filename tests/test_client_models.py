"""A raw SDK loop's model calls in a recorded-model replay: the OpenAI and Anthropic clients (chat
completions, the Responses API, messages; sync, async, streamed) answer from the served answers, and
the model is never contacted (each client's transport fails the test if it is called). The server got
each live request in the one ``ModelRequestData`` form; the instrumentors still record the served
call's span, so the replayed run reads its model calls. Outside a model server the client is as it was.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from anthropic import Anthropic, AsyncAnthropic
from openai import AsyncOpenAI, OpenAI
from openinference.instrumentation import OITracer, TraceConfig
from opentelemetry import context, trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from harvester import seam
from harvester.adapters import Session
from harvester.conventions import runs_from_spans
from harvester.errors import ModelInputChanged
from harvester.model import ModelAnswerData, ModelRequestData

SYSTEM, PROMPT = "You answer refund questions.", "What is the refund policy?"
SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}}}
POLICY = {"policy": "refunds within 30 days"}
USAGE = {"input_tokens": 120, "output_tokens": 7}
ANSWERS: list[ModelAnswerData] = [
    {
        "text": None,
        "tool_calls": [{"name": "kb_search", "call_id": "call_rec_1", "args": {"query": "refunds"}}],
        "finish_reason": "tool_calls",
        "usage": USAGE,  # type: ignore[typeddict-item]
        "model": "recorded-model",
    },
    {
        "text": "Refunds within 30 days.",
        "tool_calls": [],
        "finish_reason": "stop",
        "usage": USAGE,  # type: ignore[typeddict-item]
        "model": "recorded-model",
    },
]


class Server:
    """The case's model server, by hand: the answers in order, and the requests it got."""

    def __init__(self, answers: list[Any]) -> None:
        self.answers = list(answers)
        self.requests: list[ModelRequestData] = []

    def answer(self, request: ModelRequestData) -> ModelAnswerData | None:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[no-any-return]


def _unreachable(request: httpx2.Request) -> httpx2.Response:
    pytest.fail(f"the model was contacted: {request.url}")


def _http(asynchronous: bool, handler: Any = _unreachable) -> Any:
    transport = httpx2.MockTransport(handler)
    return httpx2.AsyncClient(transport=transport) if asynchronous else httpx2.Client(transport=transport)


def openai_client(asynchronous: bool, handler: Any = _unreachable) -> Any:
    kind = AsyncOpenAI if asynchronous else OpenAI
    return kind(api_key="sk-test", base_url="http://openai.invalid/v1", http_client=_http(asynchronous, handler))


def anthropic_client(asynchronous: bool) -> Any:
    kind = AsyncAnthropic if asynchronous else Anthropic
    return kind(api_key="sk-ant-test", base_url="http://anthropic.invalid", http_client=_http(asynchronous))


@pytest.fixture
def session() -> Iterator[Session]:
    """The replay's session: it guards the clients in use (both are imported here)."""
    s = Session()
    s.open()
    yield s
    s.close()


@pytest.fixture
def server(session: Session) -> Iterator[Server]:
    server = Server(ANSWERS)
    token = context.attach(context.set_value(seam.MODELS, server))
    yield server
    context.detach(token)


def kb_search(query: str) -> dict[str, str]:
    return POLICY


def run(answer: Any) -> Any:
    return asyncio.run(answer) if asyncio.iscoroutine(answer) else answer


# -- the loops, as the SDKs' guides write them ---------------------------------------------------------
CHAT_TOOLS = [{"type": "function", "function": {"name": "kb_search", "description": "Search", "parameters": SCHEMA}}]


def _chat_streamed(chunks: list[Any]) -> dict[str, Any]:
    text, calls = "", {}
    for chunk in chunks:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for tc in choice.delta.tool_calls or ():
                call = calls.setdefault(tc.index, {"id": tc.id, "type": "function", "function": {"arguments": ""}})
                call["function"]["name"] = tc.function.name or call["function"].get("name")
                call["function"]["arguments"] += tc.function.arguments or ""
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    return {**message, "tool_calls": list(calls.values())} if calls else message


async def chat_loop(client: Any, kind: str) -> str:
    messages: list[Any] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": PROMPT}]
    while True:
        request = {"model": "gpt-4o-mini", "messages": messages, "tools": CHAT_TOOLS, "temperature": 0}
        if kind.endswith("stream"):
            stream = await run_maybe(client.chat.completions.create(**request, stream=True))
            chunks = [c async for c in stream] if kind.startswith("async") else list(stream)
            message = _chat_streamed(chunks)
        else:
            reply = await run_maybe(client.chat.completions.create(**request))
            message = reply.choices[0].message.model_dump(exclude_none=True)
        if not message.get("tool_calls"):
            return str(message["content"])
        messages.append(message)
        for call in message["tool_calls"]:
            result = kb_search(**json.loads(call["function"]["arguments"]))
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)})


async def run_maybe(value: Any) -> Any:
    return await value if asyncio.iscoroutine(value) else value


def assert_served_conversation(server: Server) -> None:
    """What the server was asked: the system prompt apart, the user's message, the model's tool call
    (its args parsed, its id the recorded one the loop sent back), the tool's result, the tools offered."""
    first, second = server.requests
    assert first["system"] == SYSTEM
    assert [(m["role"], m["content"]) for m in first["messages"]] == [("user", PROMPT)]
    assert first["tools"] == [{"name": "kb_search", "description": "Search", "parameters": SCHEMA}]
    user, assistant, tool = second["messages"]
    assert user["content"] == PROMPT and second["system"] == SYSTEM
    assert assistant["role"] == "assistant" and assistant["tool_calls"][0]["args"] == {"query": "refunds"}
    assert assistant["tool_calls"][0]["name"] == "kb_search"
    assert tool["role"] == "tool" and json.loads(tool["content"]) == POLICY and tool["tool_call_id"] == "call_rec_1"


@pytest.mark.parametrize("kind", ["sync", "async", "stream", "async-stream"])
def test_a_chat_completions_loop_is_answered_by_the_server(server: Server, kind: str) -> None:
    client = openai_client(kind.startswith("async"))
    assert asyncio.run(chat_loop(client, kind)) == "Refunds within 30 days."
    assert_served_conversation(server)
    assert server.requests[0]["settings"] == {"temperature": 0}


def test_a_served_completion_is_the_sdks_own_with_the_recorded_ids_and_usage(server: Server) -> None:
    reply = openai_client(False).chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "x"}]
    )
    (choice,) = reply.choices
    assert type(reply).__name__ == "ChatCompletion" and choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls[0].id == "call_rec_1" and reply.model == "recorded-model"
    assert reply.usage is not None and (reply.usage.prompt_tokens, reply.usage.completion_tokens) == (120, 7)


def test_structured_output_through_parse_is_answered_by_the_server(session: Session) -> None:
    """``chat.completions.parse`` posts by itself (not through ``create``): it is answered too, the
    recorded text parsed into the app's type, and the strict schema the SDK sends for the type is the
    request's response format (what an instrumentor records), not the type's plain JSON schema."""
    import pydantic

    class Policy(pydantic.BaseModel):
        days: int

    served = {**ANSWERS[1], "text": '{"days": 30}'}
    server = Server([served])
    token = context.attach(context.set_value(seam.MODELS, server))
    try:
        reply = openai_client(False).chat.completions.parse(
            model="gpt-4o-mini", messages=[{"role": "user", "content": PROMPT}], response_format=Policy
        )
    finally:
        context.detach(token)
    assert reply.choices[0].message.parsed == Policy(days=30)
    (request,) = server.requests
    sent = request["settings"]["response_format"]["json_schema"]
    assert sent["strict"] is True and sent["schema"] == {**Policy.model_json_schema(), "additionalProperties": False}


RESPONSE_TOOLS = [{"type": "function", "name": "kb_search", "description": "Search", "parameters": SCHEMA}]


async def responses_loop(client: Any, kind: str) -> str:
    items: list[Any] = [{"role": "user", "content": PROMPT}]
    while True:
        request = {"model": "gpt-4o-mini", "instructions": SYSTEM, "input": items, "tools": RESPONSE_TOOLS}
        if kind == "async-stream":
            async with client.responses.stream(**request) as events:
                deltas = [e.delta async for e in events if e.type == "response.output_text.delta"]
                response = await events.get_final_response()
            assert "".join(deltas) == response.output_text
        elif kind == "stream":
            with client.responses.stream(**request) as events:
                response = events.get_final_response()
        else:
            response = await run_maybe(client.responses.create(**request))
        calls = [o for o in response.output if o.type == "function_call"]
        if not calls:
            return str(response.output_text)
        items += [o.model_dump(exclude_none=True) for o in response.output]
        for call in calls:
            output = json.dumps(kb_search(**json.loads(call.arguments)))
            items.append({"type": "function_call_output", "call_id": call.call_id, "output": output})


@pytest.mark.parametrize("kind", ["sync", "stream", "async-stream"])
def test_a_responses_loop_is_answered_by_the_server(server: Server, kind: str) -> None:
    client = openai_client(kind.startswith("async"))
    assert asyncio.run(responses_loop(client, kind)) == "Refunds within 30 days."
    assert_served_conversation(server)


ANTHROPIC_TOOLS = [{"name": "kb_search", "description": "Search", "input_schema": SCHEMA}]


async def anthropic_loop(client: Any, kind: str) -> str:
    messages: list[Any] = [{"role": "user", "content": PROMPT}]
    while True:
        request = {"model": "claude-sonnet-4-5", "max_tokens": 512, "system": SYSTEM, "messages": messages}
        request["tools"] = ANTHROPIC_TOOLS
        if kind == "stream":
            with client.messages.stream(**request) as stream:
                message = stream.get_final_message()
        elif kind == "async-stream":
            async with client.messages.stream(**request) as stream:
                message = await stream.get_final_message()
        else:
            message = await run_maybe(client.messages.create(**request))
        if message.stop_reason != "tool_use":
            return "".join(b.text for b in message.content if b.type == "text")
        messages.append({"role": "assistant", "content": message.content})  # the SDK's own blocks, as the guide does
        results = [
            {"type": "tool_result", "tool_use_id": b.id, "content": json.dumps(kb_search(**b.input))}
            for b in message.content
            if b.type == "tool_use"
        ]
        messages.append({"role": "user", "content": results})


@pytest.mark.parametrize("kind", ["sync", "async", "stream", "async-stream"])
def test_an_anthropic_loop_is_answered_by_the_server(server: Server, kind: str) -> None:
    client = anthropic_client(kind.startswith("async"))
    assert asyncio.run(anthropic_loop(client, kind)) == "Refunds within 30 days."
    assert_served_conversation(server)
    assert server.requests[0]["settings"] == {"max_tokens": 512}


def _instrumentor(api: str) -> Any:
    if api == "anthropic":
        from openinference.instrumentation.anthropic import AnthropicInstrumentor

        return AnthropicInstrumentor()
    from openinference.instrumentation.openai import OpenAIInstrumentor

    return OpenAIInstrumentor()


@pytest.mark.parametrize("api", ["chat", "responses", "anthropic"])
def test_a_served_call_is_still_traced_and_read_as_the_runs_model_call(server: Server, api: str) -> None:
    """OpenInference wraps OpenAI's ``request`` (under the guarded ``create``) and Anthropic's
    ``messages.create`` (around it): either way the served call's span holds the served answer."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = OITracer(trace.get_tracer(__name__, tracer_provider=provider), TraceConfig())
    instrumentor = _instrumentor(api)
    instrumentor.instrument(tracer_provider=provider)
    try:
        with tracer.start_as_current_span("support_agent", openinference_span_kind="chain") as span:
            span.set_input(PROMPT)
            loop = {"chat": chat_loop, "responses": responses_loop, "anthropic": anthropic_loop}[api]
            client = anthropic_client(False) if api == "anthropic" else openai_client(False)
            span.set_output(asyncio.run(loop(client, "sync")))
    finally:
        instrumentor.uninstrument()
    (run_,) = runs_from_spans(exporter.get_finished_spans())
    assert len(run_.llm_calls) == 2 and [r.name for r in run_.llm_calls[0].requests] == ["kb_search"]
    assert run_.llm_calls[0].requests[0].args == {"query": "refunds"}
    assert run_.answer == "Refunds within 30 days."
    assert run_.usage.input_tokens == 240  # the recorded usage, read from the served calls' spans


def test_a_drifted_request_fails_in_the_app_before_any_request(session: Session) -> None:
    server = Server([ModelInputChanged(1, ["system prompt changed"])])
    token = context.attach(context.set_value(seam.MODELS, server))
    try:
        with pytest.raises(ModelInputChanged):
            run(openai_client(False).chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}]))
    finally:
        context.detach(token)
    assert len(server.requests) == 1


def _live(request: httpx2.Request) -> httpx2.Response:
    """The model, live: its answer names the request it got."""
    body = json.loads(request.content)
    message = {"role": "assistant", "content": f"live: {body['messages'][-1]['content']}"}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return httpx2.Response(
        200, json={"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice]}
    )


def test_outside_a_model_server_and_after_it_the_model_is_called(session: Session) -> None:
    client = openai_client(False, _live)
    reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content == "live: hi"  # no replay: the original
    server = Server([None])  # recorded-then-live: the server hands the call back to the model
    token = context.attach(context.set_value(seam.MODELS, server))
    try:
        reply = client.chat.completions.create(model="m", messages=iter([{"role": "user", "content": "again"}]))
    finally:
        context.detach(token)
    assert reply.choices[0].message.content == "live: again"  # a generator the server read still reached the SDK
    assert server.requests[0]["messages"][0]["content"] == "again"


def test_a_streamed_create_is_the_sdks_own_stream_of_events(session: Session) -> None:
    """``create(stream=True)`` in a ``with`` block: the SDK's ``Stream``, its events in order; a tool call
    the recording has no id for gets ``call_<n>``."""
    answer = {**ANSWERS[1], "tool_calls": [{"name": "kb_search", "call_id": None, "args": {"query": "x"}}]}
    token = context.attach(context.set_value(seam.MODELS, Server([answer, answer])))
    try:
        request = {"model": "m", "input": PROMPT, "stream": True}
        with openai_client(False).responses.create(**request) as events:
            assert type(events).__name__ == "Stream"
            seen = list(events)
        assert [e.type for e in seen][:4] == [
            "response.created",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
        ]
        assert seen[-1].type == "response.completed" and seen[-1].response.output[1].call_id == "call_1"
        request = {"model": "m", "max_tokens": 64, "messages": [{"role": "user", "content": PROMPT}], "stream": True}
        with anthropic_client(False).messages.create(**request) as stream:
            blocks = [e.content_block for e in stream if e.type == "content_block_start"]
        assert [b.type for b in blocks] == ["text", "tool_use"] and blocks[1].id == "call_1"
    finally:
        context.detach(token)
