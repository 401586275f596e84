"""A raw OpenAI SDK loop as OpenAI's function-calling guide writes one: ``chat.completions.create(tools=...)``
(or the Responses API) in a loop, the model's tool calls dispatched through a dict of plain functions.
Traced as OpenInference documents it: the client instrumentor in production's entry point (``serve``),
a CHAIN span around the loop and ``@tracer.tool`` on each function.

``build()`` is the app as it is, with nothing for harvester; ``build_documented()`` is the same app as
docs/own-loop.md asks for it (``@harvester.tool`` under ``@tracer.tool``); ``build_bare()`` dispatches
the plain functions with no tool span at all. ``HARVESTER_TEST_API`` picks ``chat`` or ``responses``,
``HARVESTER_TEST_CLIENT`` one of ``CLIENTS`` (sync or async, streaming or not) and
``HARVESTER_TEST_INSTRUMENTOR`` production's instrumentor (``openinference`` or ``openllmetry``).
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable
from typing import Any

from openai import AsyncOpenAI, OpenAI
from openinference.instrumentation import OITracer, TraceConfig
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Status, StatusCode

import harvester
from tests.builders.sdk_http import MODEL, http_client

from . import shop

API_ENV, CLIENT_ENV, INSTRUMENTOR_ENV = "HARVESTER_TEST_API", "HARVESTER_TEST_CLIENT", "HARVESTER_TEST_INSTRUMENTOR"
CLIENTS = ("sync", "async", "stream", "async-stream")
FUNCTIONS: dict[str, Callable[..., Any]] = {f.__name__: f for f in (shop.kb_search, shop.get_order, shop.issue_refund)}
SCHEMAS = [
    {"name": "kb_search", "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}},
    {"name": "get_order", "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}},
    {
        "name": "issue_refund",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}}},
    },
]
Tools = dict[str, Callable[..., Any]]


def _api() -> str:
    return os.environ.get(API_ENV, "chat")


def _client_kind() -> str:
    return os.environ.get(CLIENT_ENV, "sync")


def instrumentor() -> Any:
    """The OpenAI instrumentor production runs (each is a process-wide singleton)."""
    if os.environ.get(INSTRUMENTOR_ENV, "openinference") == "openllmetry":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor as Traceloop

        return Traceloop()
    from openinference.instrumentation.openai import OpenAIInstrumentor

    return OpenAIInstrumentor()


def _client(kind: str) -> Any:
    http = http_client(_api(), shop.STEPS[shop.variant()], asynchronous=kind.startswith("async"))
    if kind.startswith("async"):
        return AsyncOpenAI(api_key="sk-test", base_url="http://openai.invalid/v1", http_client=http)
    return OpenAI(api_key="sk-test", base_url="http://openai.invalid/v1", http_client=http)


# -- one model turn: (text, [(call id, name, arguments json)], the items to append to the conversation) --
def _chat_turn(message: Any) -> tuple[str | None, list[tuple[str, str, str]], list[Any]]:
    calls = [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or ()]
    return message.content, calls, [message.model_dump(exclude_none=True)]


def _chat_streamed(chunks: list[Any]) -> tuple[str | None, list[tuple[str, str, str]], list[Any]]:
    """A streamed completion put back together, as the guide's streaming example does."""
    text, calls = "", {}
    for chunk in chunks:
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for tc in choice.delta.tool_calls or ():
                call = calls.setdefault(tc.index, {"id": tc.id, "name": "", "arguments": ""})
                call["name"] += tc.function.name or ""
                call["arguments"] += tc.function.arguments or ""
    found = [(c["id"], c["name"], c["arguments"]) for _, c in sorted(calls.items())]
    assistant = {
        "role": "assistant",
        "content": text or None,
        "tool_calls": [{"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in found],
    }
    return text or None, found, [assistant] if found else []


def _response_turn(response: Any) -> tuple[str | None, list[tuple[str, str, str]], list[Any]]:
    calls = [(o.call_id, o.name, o.arguments) for o in response.output if o.type == "function_call"]
    return response.output_text or None, calls, [o.model_dump(exclude_none=True) for o in response.output]


def _request(conversation: list[Any]) -> dict[str, Any]:
    if _api() == "chat":
        return {
            "model": MODEL["chat"],
            "messages": conversation,
            "tools": [{"type": "function", "function": s} for s in SCHEMAS],
        }
    return {"model": MODEL["responses"], "input": conversation, "tools": [{"type": "function", **s} for s in SCHEMAS]}


def _turn(
    client: OpenAI, conversation: list[Any], stream: bool
) -> tuple[str | None, list[tuple[str, str, str]], list[Any]]:
    if _api() == "chat":
        if stream:
            chunks = client.chat.completions.create(
                **_request(conversation), stream=True, stream_options={"include_usage": True}
            )
            return _chat_streamed(list(chunks))
        return _chat_turn(client.chat.completions.create(**_request(conversation)).choices[0].message)
    if stream:
        with client.responses.stream(**_request(conversation)) as events:
            return _response_turn(events.get_final_response())
    return _response_turn(client.responses.create(**_request(conversation)))


async def _aturn(
    client: AsyncOpenAI, conversation: list[Any], stream: bool
) -> tuple[str | None, list[tuple[str, str, str]], list[Any]]:
    if _api() == "chat":
        if stream:
            chunks = await client.chat.completions.create(
                **_request(conversation), stream=True, stream_options={"include_usage": True}
            )
            return _chat_streamed([c async for c in chunks])
        return _chat_turn((await client.chat.completions.create(**_request(conversation))).choices[0].message)
    if stream:
        async with client.responses.stream(**_request(conversation)) as events:
            return _response_turn(await events.get_final_response())
    return _response_turn(await client.responses.create(**_request(conversation)))


def _results(tools: Tools, calls: list[tuple[str, str, str]]) -> list[Any]:
    """Each requested call dispatched through the dict, its result as the API wants it back."""
    out = []
    for call_id, name, arguments in calls:
        result = json.dumps(tools[name](**json.loads(arguments)))
        if _api() == "chat":
            out.append({"role": "tool", "tool_call_id": call_id, "content": result})
        else:
            out.append({"type": "function_call_output", "call_id": call_id, "output": result})
    return out


def _agent(tools: Tools, tracer: Any) -> Callable[[str], Any]:
    kind = _client_kind()
    client, stream = _client(kind), kind.endswith("stream")

    def sync_agent(prompt: str) -> str | None:
        with tracer.start_as_current_span("support_agent", openinference_span_kind="chain") as span:
            span.set_input(prompt)
            conversation: list[Any] = [{"role": "user", "content": prompt}]
            while True:
                text, calls, items = _turn(client, conversation, stream)
                if not calls:
                    span.set_output(text)
                    span.set_status(Status(StatusCode.OK))
                    return text
                conversation += items + _results(tools, calls)

    async def async_agent(prompt: str) -> str | None:
        with tracer.start_as_current_span("support_agent", openinference_span_kind="chain") as span:
            span.set_input(prompt)
            conversation: list[Any] = [{"role": "user", "content": prompt}]
            while True:
                text, calls, items = await _aturn(client, conversation, stream)
                if not calls:
                    span.set_output(text)
                    span.set_status(Status(StatusCode.OK))
                    return text
                conversation += items + _results(tools, calls)

    return async_agent if kind.startswith("async") else sync_agent


def _tracer(provider: TracerProvider | None) -> OITracer:
    return OITracer(trace.get_tracer(__name__, tracer_provider=provider), TraceConfig())


def build(provider: TracerProvider | None = None) -> Callable[[str], Any]:
    """The app as OpenInference's docs trace it: ``@tracer.tool`` on each function, nothing for harvester."""
    tracer = _tracer(provider)
    return _agent({name: tracer.tool(f) for name, f in FUNCTIONS.items()}, tracer)


def build_documented(provider: TracerProvider | None = None) -> Callable[[str], Any]:
    """The app as docs/own-loop.md asks for it: ``@harvester.tool`` on each dispatched function too."""
    tracer = _tracer(provider)
    return _agent({name: tracer.tool(harvester.tool(f)) for name, f in FUNCTIONS.items()}, tracer)


def build_bare(provider: TracerProvider | None = None) -> Callable[[str], Any]:
    """The plain functions dispatched as they are: only the model's spans say what it asked for."""
    return _agent(dict(FUNCTIONS), _tracer(provider))


def serve(provider: TracerProvider, factory: Callable[..., Callable[[str], Any]] = build) -> None:
    """One production request: the entry point instruments the client, the agent runs, tracing stops."""
    inst = instrumentor()
    inst.instrument(tracer_provider=provider)
    try:
        agent = factory(provider)
        answer = agent(shop.PROMPT)
        if asyncio.iscoroutine(answer):
            asyncio.run(answer)
    finally:
        inst.uninstrument()
        unwrap_leftovers()


def unwrap_leftovers() -> None:
    """OpenLLMetry 0.62's ``uninstrument`` unwraps nothing (it names each method in a form the
    ``unwrap`` it calls no longer reads), so its wrappers stay on the client's resource classes, onto
    the provider they had, one more each time: strip them, so what comes next starts clean."""
    import inspect
    import sys

    for name, module in list(sys.modules.items()):
        if not name.startswith("openai.resources."):
            continue
        for cls in vars(module).values():
            if not inspect.isclass(cls) or cls.__module__ != name:
                continue
            for attr, method in list(vars(cls).items()):
                while hasattr(method, "__wrapped__") and type(method).__name__ == "FunctionWrapper":
                    method = method.__wrapped__
                    setattr(cls, attr, method)
