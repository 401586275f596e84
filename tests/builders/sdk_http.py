"""Fake OpenAI and Anthropic endpoints for the real SDK clients, over the SDKs' own ``MockTransport``.

A script is a list of model turns, each a list of tool calls ``(name, args, call_id)`` or the final
answer (a str), as ``tests/apps/shop.py`` writes them. ``http_client(api, script)`` answers one request
per turn, in order, in the wire format of ``api``: ``chat`` (chat completions), ``responses`` (the
Responses API) or ``anthropic`` (messages); a request that asks to stream gets server-sent events.
A moderation request is answered "not flagged", outside the script. Nothing leaves the process.
The SDKs (openai 3, anthropic 2) speak ``httpx2``, httpx's successor, and take its clients as
``http_client``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx2

from .backends import Loopback, loopback, reply

__all__ = ["APIS", "MODEL", "RAW_LOOPS", "answering", "http_client", "model_server"]

APIS = ("chat", "responses", "anthropic")
MODEL = {"chat": "gpt-4o-mini", "responses": "gpt-4o-mini", "anthropic": "claude-sonnet-4-5"}
# The raw SDK loops of ``tests/apps/raw_*_app.py`` as (app, API, client, production's instrumentor): every
# API sync and async, streamed and not, under each instrumentor that traces it.
RAW_LOOPS = [
    ("openai", "chat", "sync", "openinference"),
    ("openai", "chat", "stream", "openinference"),
    ("openai", "chat", "async-stream", "openllmetry"),
    ("openai", "responses", "sync", "openllmetry"),
    ("openai", "responses", "async", "openinference"),
    ("openai", "responses", "async-stream", "openinference"),
    ("anthropic", "messages", "sync", "openinference"),
    ("anthropic", "messages", "async-stream", "openinference"),
    ("anthropic", "messages", "stream", "openllmetry"),
    ("anthropic", "messages", "async", "openllmetry"),
    ("openai", "chat", "sync", "otel-genai"),
    ("openai", "chat", "async-stream", "otel-genai"),
]
Step = Any  # list[tuple[str, dict, str]] | str
_USAGE = (100, 10)
_MODERATION = {
    "id": "modr-1",
    "model": "omni-moderation-latest",
    "results": [{"flagged": False, "categories": {}, "category_scores": {}}],
}
_IDS = itertools.count(1)


def http_client(api: str, script: Sequence[Step], *, asynchronous: bool = False) -> Any:
    """An HTTP client for an SDK client's ``http_client=``, answering ``script``'s turns in ``api``'s format."""
    transport = _transport(api, script)
    return httpx2.AsyncClient(transport=transport) if asynchronous else httpx2.Client(transport=transport)


def _transport(api: str, script: Sequence[Step]) -> httpx2.MockTransport:
    answer = answering(api, script)

    def respond(request: httpx2.Request) -> httpx2.Response:
        if request.url.path.endswith("/moderations"):  # a guardrail's call: no turn of the script
            return httpx2.Response(200, json=_MODERATION)
        content_type, content = answer(request.content)
        return httpx2.Response(200, headers={"content-type": content_type}, content=content)

    return httpx2.MockTransport(respond)


def model_server(api: str, script: Sequence[Step], keep_alive: bool = False) -> AbstractContextManager[Loopback]:
    """A model served on 127.0.0.1, answering ``script``'s turns as ``http_client`` does: for an SDK
    client given its ``origin`` as ``base_url`` (a local model, a gateway), over real sockets
    (``keep_alive``: connections a client's pool keeps)."""
    answer = answering(api, script)

    def handle(request: BaseHTTPRequestHandler, server: Loopback) -> None:
        content_type, body = answer(server.seen[-1].body)
        reply(request, 200, body, {"Content-Type": content_type})

    return loopback(handle, keep_alive)


def answering(api: str, script: Sequence[Step]) -> Callable[[bytes], tuple[str, bytes]]:
    """A request body -> (content type, body) of the next turn of ``script``: what ``http_client``
    answers, and a loopback model server too (an SDK client given its ``base_url``)."""
    turns = iter(script)
    ids = _IDS  # unique in the process: OpenLLMetry keeps each Responses API response by its id

    def answer(content: bytes) -> tuple[str, bytes]:
        body = json.loads(content or b"{}")
        step = next(turns)
        n = next(ids)
        if body.get("stream"):
            events = list(_EVENTS[api](step, n))
            text = "".join(
                (f"event: {name}\n" if name else "") + f"data: {json.dumps(data) if data != '[DONE]' else data}\n\n"
                for name, data in events
            )
            return "text/event-stream", text.encode()
        return "application/json", json.dumps(_BODY[api](step, n)).encode()

    return answer


def _calls(step: Step) -> list[tuple[str, dict[str, Any], str]]:
    return [] if isinstance(step, str) else list(step)


# -- chat completions ---------------------------------------------------------------------------------
def _chat(step: Step, n: int) -> dict[str, Any]:
    calls = _calls(step)
    message: dict[str, Any] = {"role": "assistant", "content": step if isinstance(step, str) else None}
    if calls:
        message["tool_calls"] = [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for name, args, cid in calls
        ]
    return {
        "id": f"chatcmpl-{n}",
        "object": "chat.completion",
        "created": 0,
        "model": MODEL["chat"],
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {"prompt_tokens": _USAGE[0], "completion_tokens": _USAGE[1], "total_tokens": sum(_USAGE)},
    }


def _chat_events(step: Step, n: int) -> Iterator[tuple[str | None, Any]]:
    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
        choices = [{"index": 0, "delta": delta, "finish_reason": finish}] if delta or finish else []
        base = {"id": f"chatcmpl-{n}", "object": "chat.completion.chunk", "created": 0, "model": MODEL["chat"]}
        return {**base, "choices": choices, **extra}

    calls = _calls(step)
    yield None, chunk({"role": "assistant", "content": "" if calls else step})
    for i, (name, args, cid) in enumerate(calls):
        call = {"index": i, "id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        yield None, chunk({"tool_calls": [call]})
    yield None, chunk({}, "tool_calls" if calls else "stop")
    usage = {"prompt_tokens": _USAGE[0], "completion_tokens": _USAGE[1], "total_tokens": sum(_USAGE)}
    yield None, chunk({}, usage=usage)
    yield None, "[DONE]"


# -- the Responses API --------------------------------------------------------------------------------
def _response(step: Step, n: int) -> dict[str, Any]:
    if isinstance(step, str):
        output: list[dict[str, Any]] = [
            {
                "type": "message",
                "id": f"msg_{n}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": step, "annotations": []}],
            }
        ]
    else:
        output = [
            {
                "type": "function_call",
                "id": f"fc_{cid}",
                "call_id": cid,
                "name": name,
                "arguments": json.dumps(args),
                "status": "completed",
            }
            for name, args, cid in step
        ]
    return {
        "id": f"resp_{n}",
        "object": "response",
        "created_at": 0,
        "model": MODEL["responses"],
        "status": "completed",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": _USAGE[0],
            "output_tokens": _USAGE[1],
            "total_tokens": sum(_USAGE),
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


def _response_events(step: Step, n: int) -> Iterator[tuple[str | None, Any]]:
    done = _response(step, n)
    seq = itertools.count()
    started = {**done, "status": "in_progress", "output": [], "usage": None}
    yield "response.created", {"type": "response.created", "response": started, "sequence_number": next(seq)}
    for i, item in enumerate(done["output"]):
        event = {"output_index": i, "item": item, "sequence_number": next(seq)}
        yield "response.output_item.added", {"type": "response.output_item.added", **event}
        yield "response.output_item.done", {"type": "response.output_item.done", **event, "sequence_number": next(seq)}
    yield "response.completed", {"type": "response.completed", "response": done, "sequence_number": next(seq)}


# -- Anthropic messages -------------------------------------------------------------------------------
def _message(step: Step, n: int) -> dict[str, Any]:
    if isinstance(step, str):
        content: list[dict[str, Any]] = [{"type": "text", "text": step}]
    else:
        content = [{"type": "tool_use", "id": cid, "name": name, "input": args} for name, args, cid in step]
    return {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "model": MODEL["anthropic"],
        "content": content,
        "stop_reason": "end_turn" if isinstance(step, str) else "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": _USAGE[0], "output_tokens": _USAGE[1]},
    }


def _message_events(step: Step, n: int) -> Iterator[tuple[str | None, Any]]:
    done = _message(step, n)
    start = {**done, "content": [], "stop_reason": None, "usage": {"input_tokens": _USAGE[0], "output_tokens": 1}}
    yield "message_start", {"type": "message_start", "message": start}
    for i, block in enumerate(done["content"]):
        if block["type"] == "text":
            opened, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": block["text"]}
        else:
            opened = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        yield "content_block_start", {"type": "content_block_start", "index": i, "content_block": opened}
        yield "content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": i}
    stop = {"stop_reason": done["stop_reason"], "stop_sequence": None}
    yield "message_delta", {"type": "message_delta", "delta": stop, "usage": {"output_tokens": _USAGE[1]}}
    yield "message_stop", {"type": "message_stop"}


_BODY = {"chat": _chat, "responses": _response, "anthropic": _message}
_EVENTS = {"chat": _chat_events, "responses": _response_events, "anthropic": _message_events}
