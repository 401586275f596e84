"""A raw Anthropic SDK loop as Anthropic's tool-use guide writes one: ``messages.create(tools=...)`` until
the model stops asking for tools, each ``tool_use`` block dispatched through a dict of plain functions.
Traced as OpenInference documents it: the client instrumentor in production's entry point (``serve``),
``@tracer.agent`` on the loop and ``@tracer.tool`` on each function.

``build``, ``build_documented`` and ``build_bare`` dispatch the functions as ``oi_loop`` says.
``HARVESTER_TEST_CLIENT`` picks one of ``CLIENTS`` (sync or async, ``messages.create`` or
``messages.stream``), ``HARVESTER_TEST_INSTRUMENTOR`` production's instrumentor (``openinference`` or
``openllmetry``), ``HARVESTER_TEST_FORM=blocks`` each tool result as text blocks (a form the API documents).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from anthropic import Anthropic, AsyncAnthropic
from opentelemetry.sdk.trace import TracerProvider

from tests.builders.sdk_http import MODEL, http_client

from . import oi_loop, shop

CLIENT_ENV, INSTRUMENTOR_ENV = "HARVESTER_TEST_CLIENT", "HARVESTER_TEST_INSTRUMENTOR"
FORM_ENV = "HARVESTER_TEST_FORM"
CLIENTS = ("sync", "async", "stream", "async-stream")
SCHEMAS = [
    {"name": "kb_search", "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}},
    {"name": "get_order", "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}}}},
    {
        "name": "issue_refund",
        "input_schema": {
            "type": "object",
            "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
        },
    },
]


def instrumentor() -> Any:
    """The Anthropic instrumentor production runs (each is a process-wide singleton)."""
    if os.environ.get(INSTRUMENTOR_ENV, "openinference") == "openllmetry":
        from opentelemetry.instrumentation.anthropic import AnthropicInstrumentor as Traceloop

        return Traceloop()
    from openinference.instrumentation.anthropic import AnthropicInstrumentor

    return AnthropicInstrumentor()


def _next(tools: oi_loop.Tools, conversation: list[Any], message: Any) -> str | None:
    """The answer when the model is done, else its tool calls run and their results added (None)."""
    if message.stop_reason != "tool_use":
        return "".join(block.text for block in message.content if block.type == "text")
    conversation.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]})
    blocks = os.environ.get(FORM_ENV) == "blocks"
    results = []
    for block in message.content:
        if block.type == "tool_use":
            said = shop.result_text(tools[block.name](**block.input))
            content = [{"type": "text", "text": said}] if blocks else said
            results.append({"type": "tool_result", "tool_use_id": block.id, "content": content})
    conversation.append({"role": "user", "content": results})
    return None


def _agent(tools: oi_loop.Tools, tracer: Any) -> Callable[[str], Any]:
    kind = os.environ.get(CLIENT_ENV, "sync")
    script = shop.STEPS[shop.variant()]
    request = {"model": MODEL["anthropic"], "max_tokens": 1024, "tools": SCHEMAS, "system": shop.instructions()}

    if not kind.startswith("async"):
        client = Anthropic(
            api_key="sk-ant-test", base_url="http://anthropic.invalid", http_client=http_client("anthropic", script)
        )

        @tracer.agent(name="support_agent")
        def support_agent(prompt: str) -> str | None:
            conversation: list[Any] = [{"role": "user", "content": prompt}]
            while True:
                if kind == "stream":
                    with client.messages.stream(messages=conversation, **request) as stream:
                        message = stream.get_final_message()
                else:
                    message = client.messages.create(messages=conversation, **request)
                answer = _next(tools, conversation, message)
                if answer is not None:
                    return answer

        return support_agent

    aclient = AsyncAnthropic(
        api_key="sk-ant-test",
        base_url="http://anthropic.invalid",
        http_client=http_client("anthropic", script, asynchronous=True),
    )

    @tracer.agent(name="support_agent")
    async def async_support_agent(prompt: str) -> str | None:
        conversation: list[Any] = [{"role": "user", "content": prompt}]
        while True:
            if kind == "async-stream":
                async with aclient.messages.stream(messages=conversation, **request) as stream:
                    message = await stream.get_final_message()
            else:
                message = await aclient.messages.create(messages=conversation, **request)
            answer = _next(tools, conversation, message)
            if answer is not None:
                return answer

    return async_support_agent


build, build_documented, build_bare = oi_loop.factories(__name__, _agent)


def serve(provider: TracerProvider, factory: oi_loop.Factory = build) -> None:
    """One production request, traced onto ``provider`` by the instrumentor production runs."""
    oi_loop.serve(provider, instrumentor(), factory)
