"""What the frameworks' model guards share: a live request normalized as a recorded one is read, and a
recorded answer's pieces made fit to hand back.

A recorded-model replay compares the agent's live request with the one its spans recorded, so both
sides are reduced to the same ``ModelRequestData``: text content only (text parts joined with "\\n",
an empty text is none), tool call arguments as parsed JSON, no call ids (live ids differ), a tool's
schema as a JSON schema dict, and the settings that shape the answer by their OpenAI names, unset
ones left out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ...canonical import canonical_json, json_value
from ...model import MessageData, ModelRequestData, RequestData, ToolSpecData
from .._requests import settings_of

__all__ = [
    "args_object",
    "args_of",
    "call_id",
    "joined",
    "message",
    "request",
    "result_text",
    "spec",
    "text_of",
]


def joined(texts: Iterable[str | None], sep: str = "\n") -> str | None:
    """Text parts as one text; none when there is no text."""
    found = [t for t in texts if isinstance(t, str) and t]
    return sep.join(found) if found else None


def result_text(value: Any) -> str | None:
    """A tool result as the text the model read: a string as is, anything else as canonical JSON."""
    if value is None or isinstance(value, str):
        return value or None
    return canonical_json(value)


def message(role: str, content: str | None, calls: Iterable[tuple[str, Any]] = ()) -> MessageData:
    """One message of the conversation, without ids."""
    tool_calls = [RequestData(name=name, call_id=None, args=json_value(args)) for name, args in calls]
    return MessageData(role=role, content=content or None, tool_calls=tool_calls, tool_call_id=None)


def spec(name: str, description: str | None, parameters: Any) -> ToolSpecData:
    return ToolSpecData(
        name=name, description=description or None, parameters=parameters if isinstance(parameters, dict) else None
    )


def request(
    system: Iterable[str | None],
    messages: list[MessageData],
    tools: list[ToolSpecData],
    given: Mapping[str, Any] | None,
) -> ModelRequestData:
    return ModelRequestData(
        system=joined(system, "\n\n"), messages=messages, tools=tools, settings=settings_of(given or {})
    )


def call_id(call: RequestData, n: int) -> str:
    """The recorded call id of a served tool call, else one made up (``call_<n>``)."""
    return call.get("call_id") or f"call_{n}"


def args_object(args: Any) -> dict[str, Any]:
    """A served tool call's arguments as the object frameworks expect (a non-object under ``input``)."""
    value = json_value(args)
    if isinstance(value, dict):
        return value
    return {} if value is None else {"input": value}


def text_of(content: Any) -> str | None:
    """A message's text: a string as it is, a list of parts as their texts joined (images left out)."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, Iterable) and not isinstance(content, (bytes, Mapping)):
        texts = [_part_text(part) for part in content]
        joined = [t for t in texts if t]
        return "\n".join(joined) if joined else None
    return str(content)


def _part_text(part: Any) -> str | None:
    if isinstance(part, str):
        return part
    get = part.get if isinstance(part, Mapping) else lambda key: getattr(part, key, None)
    text = get("text")
    return text if isinstance(text, str) and get("type") in (None, "text", "input_text", "output_text") else None


def args_of(arguments: Any) -> Any:
    """Tool call arguments as a JSON value (the model's string parsed; empty is ``{}``)."""
    if arguments is None or (isinstance(arguments, str) and not arguments.strip()):
        return {}
    return json_value(arguments)
