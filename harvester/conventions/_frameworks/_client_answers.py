"""A recorded answer in an SDK's wire format: the body its client parses into its own objects.

A served call goes through the SDK as a live one does, only its HTTP response is made here: so the app
gets exactly the objects it would (``ChatCompletion``, ``Response``, Anthropic's ``Message``; for a
streamed call the SDK's own ``Stream`` of chunks or events, and the ``.stream()`` helpers' final
message), and the instrumentors record the served response in the call's span. Tool call ids are the
recorded ones (``call_<n>`` when the recording has none); usage is the recorded usage. A stream holds
the text in one chunk and each tool call whole.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ._served import args_object

if TYPE_CHECKING:
    from ...model import ModelAnswerData

__all__ = ["BODIES", "Event", "sse"]

Event = tuple[str | None, Any]  # (the SSE event name, its data)
_LENGTH = ("length", "max_tokens", "max_output_tokens")


def _ids(answer: ModelAnswerData) -> list[str]:
    return [c["call_id"] or f"call_{n}" for n, c in enumerate(answer["tool_calls"], 1)]


def _arguments(args: Any) -> str:
    return args if isinstance(args, str) else json.dumps(args)


def _tokens(answer: ModelAnswerData) -> tuple[int, int] | None:
    """The recorded usage; None when the recording does not know it (unknown is not zero)."""
    usage = answer["usage"]
    if usage["input_tokens"] is None and usage["output_tokens"] is None:
        return None
    return usage["input_tokens"] or 0, usage["output_tokens"] or 0


def sse(events: Iterator[Event]) -> bytes:
    """Server-sent events as the APIs send them (chat's closing ``[DONE]`` is not JSON)."""
    return "".join(
        (f"event: {name}\n" if name else "") + f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n"
        for name, data in events
    ).encode()


# -- chat completions ---------------------------------------------------------------------------------
def _chat_finish(answer: ModelAnswerData) -> str:
    if answer["tool_calls"]:
        return "tool_calls"
    reason = answer["finish_reason"]
    return "length" if reason in _LENGTH else "content_filter" if reason == "content_filter" else "stop"


def _chat_usage(answer: ModelAnswerData) -> dict[str, int] | None:
    tokens = _tokens(answer)
    return (
        None
        if tokens is None
        else {"prompt_tokens": tokens[0], "completion_tokens": tokens[1], "total_tokens": sum(tokens)}
    )


def _chat_calls(answer: ModelAnswerData) -> list[dict[str, Any]]:
    return [
        {"index": i, "id": cid, "type": "function", "function": {"name": c["name"], "arguments": _arguments(c["args"])}}
        for i, (c, cid) in enumerate(zip(answer["tool_calls"], _ids(answer)))
    ]


def chat(answer: ModelAnswerData, model: str, n: int, body: Mapping[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": answer["text"]}
    if answer["tool_calls"]:
        message["tool_calls"] = [{k: v for k, v in c.items() if k != "index"} for c in _chat_calls(answer)]
    out = {
        "id": f"chatcmpl-served-{n}",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": _chat_finish(answer), "logprobs": None}],
    }
    usage = _chat_usage(answer)
    return out if usage is None else {**out, "usage": usage}


def chat_events(answer: ModelAnswerData, model: str, n: int, body: Mapping[str, Any]) -> Iterator[Event]:
    base = {"id": f"chatcmpl-served-{n}", "object": "chat.completion.chunk", "created": 0, "model": model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> Event:
        return None, {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}

    yield chunk({"role": "assistant", "content": answer["text"]})
    for call in _chat_calls(answer):
        yield chunk({"tool_calls": [call]})
    yield chunk({}, _chat_finish(answer))
    usage = _chat_usage(answer)
    if usage is not None and (body.get("stream_options") or {}).get("include_usage"):
        yield None, {**base, "choices": [], "usage": usage}
    yield None, "[DONE]"


# -- the Responses API --------------------------------------------------------------------------------
def _output(answer: ModelAnswerData, n: int) -> list[dict[str, Any]]:
    output: list[dict[str, Any]] = []
    if answer["text"] is not None:
        text = {"type": "output_text", "text": answer["text"], "annotations": [], "logprobs": []}
        output.append(
            {"type": "message", "id": f"msg_served_{n}", "role": "assistant", "status": "completed", "content": [text]}
        )
    for i, (c, cid) in enumerate(zip(answer["tool_calls"], _ids(answer))):
        output.append(
            {
                "type": "function_call",
                "id": f"fc_served_{n}_{i}",
                "call_id": cid,
                "name": c["name"],
                "arguments": _arguments(c["args"]),
                "status": "completed",
            }
        )
    return output


def response(answer: ModelAnswerData, model: str, n: int, body: Mapping[str, Any]) -> dict[str, Any]:
    cut = not answer["tool_calls"] and answer["finish_reason"] in _LENGTH
    tokens = _tokens(answer)
    usage = tokens and {
        "input_tokens": tokens[0],
        "output_tokens": tokens[1],
        "total_tokens": sum(tokens),
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0},
    }
    return {
        "id": f"resp_served_{n}",
        "object": "response",
        "created_at": 0,
        "model": model,
        "status": "incomplete" if cut else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
        "output": _output(answer, n),
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools", []),
        "usage": usage,
    }


def response_events(answer: ModelAnswerData, model: str, n: int, body: Mapping[str, Any]) -> Iterator[Event]:
    done = response(answer, model, n, body)
    seq = itertools.count()

    def event(kind: str, **data: Any) -> Event:
        return kind, {"type": kind, **data, "sequence_number": next(seq)}

    yield event("response.created", response={**done, "status": "in_progress", "output": [], "usage": None})
    for i, item in enumerate(done["output"]):
        at = {"output_index": i, "item_id": item["id"]}
        if item["type"] == "message":
            (part,) = item["content"]
            yield event("response.output_item.added", output_index=i, item={**item, "content": []})
            yield event("response.content_part.added", **at, content_index=0, part={**part, "text": ""})
            yield event("response.output_text.delta", **at, content_index=0, delta=part["text"], logprobs=[])
            yield event("response.output_text.done", **at, content_index=0, text=part["text"], logprobs=[])
            yield event("response.content_part.done", **at, content_index=0, part=part)
        else:
            yield event("response.output_item.added", output_index=i, item={**item, "arguments": ""})
            yield event("response.function_call_arguments.delta", **at, delta=item["arguments"])
            yield event("response.function_call_arguments.done", **at, arguments=item["arguments"], name=item["name"])
        yield event("response.output_item.done", output_index=i, item=item)
    yield event("response.incomplete" if done["status"] == "incomplete" else "response.completed", response=done)


# -- Anthropic messages -------------------------------------------------------------------------------
def message(answer: ModelAnswerData, model: str, n: int, body: Mapping[str, Any]) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": answer["text"]}] if answer["text"] else []
    for c, cid in zip(answer["tool_calls"], _ids(answer)):
        content.append({"type": "tool_use", "id": cid, "name": c["name"], "input": args_object(c["args"])})
    reason = answer["finish_reason"]
    if answer["tool_calls"]:
        stop = "tool_use"
    elif reason in _LENGTH:
        stop = "max_tokens"
    else:
        stop = reason if reason in ("stop_sequence", "refusal", "pause_turn") else "end_turn"
    tokens = _tokens(answer) or (0, 0)  # Anthropic's usage is never absent
    return {
        "id": f"msg_served_{n}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": tokens[0], "output_tokens": tokens[1]},
    }


def message_events(answer: ModelAnswerData, model: str, n: int, body: Mapping[str, Any]) -> Iterator[Event]:
    done = message(answer, model, n, body)
    usage = done["usage"]
    start = {**done, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 0}}
    yield "message_start", {"type": "message_start", "message": start}
    for i, block in enumerate(done["content"]):
        opened: dict[str, Any]
        if block["type"] == "text":
            opened, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": block["text"]}
        else:
            opened = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        yield "content_block_start", {"type": "content_block_start", "index": i, "content_block": opened}
        yield "content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": i}
    stop = {"stop_reason": done["stop_reason"], "stop_sequence": None}
    yield "message_delta", {"type": "message_delta", "delta": stop, "usage": {"output_tokens": usage["output_tokens"]}}
    yield "message_stop", {"type": "message_stop"}


Body = Callable[["ModelAnswerData", str, int, Mapping[str, Any]], dict[str, Any]]
Events = Callable[["ModelAnswerData", str, int, Mapping[str, Any]], Iterator[Event]]
# each API's (whole response, streamed events): args (answer, model, served call number, request body)
BODIES: dict[str, tuple[Body, Events]] = {
    "chat": (chat, chat_events),
    "responses": (response, response_events),
    "anthropic": (message, message_events),
}
