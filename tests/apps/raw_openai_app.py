"""A raw OpenAI SDK loop as OpenAI's function-calling guide writes one: ``chat.completions.create(tools=...)``
(or the Responses API) in a loop, the model's tool calls dispatched through a dict of plain functions.
Traced as OpenInference documents it: the client instrumentor in production's entry point (``serve``),
a CHAIN span around the loop and ``@tracer.tool`` on each function.

``build``, ``build_documented`` and ``build_bare`` dispatch the functions as ``oi_loop`` says.
``HARVESTER_TEST_API`` picks ``chat`` or ``responses``,
``HARVESTER_TEST_CLIENT`` one of ``CLIENTS`` (sync or async, streaming or not) and
``HARVESTER_TEST_INSTRUMENTOR`` production's instrumentor (``openinference`` or ``openllmetry``),
``HARVESTER_TEST_FORM`` (sync chat or Responses loop) how it asks: ``parse`` (structured output, the
answer a ``Reply``) or ``moderated`` (a moderation call before the loop), and
``HARVESTER_TEST_MODEL_URL``, when set, the client's ``base_url`` (a model server the test runs there)
instead of the scripted in-process transport.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

from openai import AsyncOpenAI, OpenAI
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import Status, StatusCode
from pydantic import BaseModel

from tests.builders.sdk_http import MODEL, http_client

from . import oi_loop, shop

API_ENV, CLIENT_ENV, INSTRUMENTOR_ENV = "HARVESTER_TEST_API", "HARVESTER_TEST_CLIENT", "HARVESTER_TEST_INSTRUMENTOR"
MODEL_URL_ENV = "HARVESTER_TEST_MODEL_URL"  # the client's base_url, answered by a real server there
FORM_ENV = "HARVESTER_TEST_FORM"
CLIENTS = ("sync", "async", "stream", "async-stream")
SCHEMAS = [
    {"name": "kb_search", "parameters": {"type": "object", "properties": {"query": {"type": "string"}}}},
    {"name": "get_order", "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}},
    {
        "name": "issue_refund",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}}},
    },
]


class Reply(BaseModel):
    """The structured answer of the ``parse`` form."""

    answer: str


def _api() -> str:
    return os.environ.get(API_ENV, "chat")


def _form() -> str:
    return os.environ.get(FORM_ENV, "")


def _script() -> list[Any]:
    """The model's turns; under ``parse`` its answer is a ``Reply`` as JSON."""
    steps = shop.STEPS[shop.variant()]
    if _form() != "parse":
        return steps
    return [json.dumps({"answer": s}) if isinstance(s, str) else s for s in steps]


def _client_kind() -> str:
    return os.environ.get(CLIENT_ENV, "sync")


def instrumentor() -> Any:
    """The OpenAI instrumentor production runs (each is a process-wide singleton)."""
    if os.environ.get(INSTRUMENTOR_ENV, "openinference") == "otel-genai":
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor as Contrib

        return Contrib()
    if os.environ.get(INSTRUMENTOR_ENV, "openinference") == "openllmetry":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor as Traceloop

        return Traceloop()
    from openinference.instrumentation.openai import OpenAIInstrumentor

    return OpenAIInstrumentor()


def _client(kind: str) -> Any:
    local = os.environ.get(MODEL_URL_ENV)
    if local:  # a model served at this URL (a gateway, a local server), over real sockets
        client = AsyncOpenAI if kind.startswith("async") else OpenAI
        return client(api_key="sk-test", base_url=local, max_retries=0)
    http = http_client(_api(), _script(), asynchronous=kind.startswith("async"))
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


def _schemas() -> list[dict[str, Any]]:
    """The functions offered; strict under ``parse`` (it only parses the calls of strict functions)."""
    if _form() != "parse":
        return SCHEMAS
    return [
        {
            **s,
            "strict": True,
            "parameters": {
                **s["parameters"],
                "required": list(s["parameters"]["properties"]),
                "additionalProperties": False,
            },
        }
        for s in SCHEMAS
    ]


def _request(conversation: list[Any]) -> dict[str, Any]:
    if _api() == "chat":
        return {
            "model": MODEL["chat"],
            "messages": [{"role": "system", "content": shop.instructions()}, *conversation],
            "tools": [{"type": "function", "function": s} for s in _schemas()],
        }
    return {
        "model": MODEL["responses"],
        "instructions": shop.instructions(),
        "input": conversation,
        "tools": [{"type": "function", **s} for s in _schemas()],
    }


def _turn(
    client: OpenAI, conversation: list[Any], stream: bool
) -> tuple[str | None, list[tuple[str, str, str]], list[Any]]:
    if _form() == "parse":
        if _api() == "chat":
            message = client.chat.completions.parse(**_request(conversation), response_format=Reply).choices[0].message
            return (message.parsed.answer, [], []) if message.parsed else _chat_turn(message)
        response = client.responses.parse(**_request(conversation), text_format=Reply)
        text, calls, items = _response_turn(response)
        return response.output_parsed.answer if response.output_parsed else text, calls, items
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


def _results(tools: oi_loop.Tools, calls: list[tuple[str, str, str]]) -> list[Any]:
    """Each requested call dispatched through the dict, its result as the API wants it back."""
    out = []
    for call_id, name, arguments in calls:
        result = shop.result_text(tools[name](**json.loads(arguments)))
        if _api() == "chat":
            out.append({"role": "tool", "tool_call_id": call_id, "content": result})
        else:
            out.append({"type": "function_call_output", "call_id": call_id, "output": result})
    return out


def _agent(tools: oi_loop.Tools, tracer: Any) -> Callable[[str], Any]:
    kind = _client_kind()
    client, stream = _client(kind), kind.endswith("stream")

    def sync_agent(prompt: str) -> str | None:
        with tracer.start_as_current_span("support_agent", openinference_span_kind="chain") as span:
            span.set_input(prompt)
            if _form() == "moderated":  # a guardrail first: OpenInference traces it as an LLM span
                client.moderations.create(model="omni-moderation-latest", input=prompt)
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


build, build_documented, build_bare = oi_loop.factories(__name__, _agent)


def serve(provider: TracerProvider, factory: oi_loop.Factory = build) -> None:
    """One production request, traced onto ``provider`` by the instrumentor production runs."""
    try:
        oi_loop.serve(provider, instrumentor(), factory)
    finally:
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
