"""The GenAI semantic-convention forms ``agent_run`` writes: messages with parts, and a model call's request.

A model call's request is recorded in exactly the attributes the semconv names (``gen_ai.input.messages``,
``gen_ai.system_instructions``, ``gen_ai.tool.definitions``, ``gen_ai.request.*``), so the GenAI reader
gets back from the spans the same ``ModelRequestData`` that ``request()`` hands a recorded-model replay
live: both sides are made from one normalized form here, which is what keeps them from drifting apart.

Production code calls these: they never raise (an odd message or tool is skipped, an odd value written
in a best-effort JSON form).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypedDict

import orjson

from ..canonical import canonical_json

if TYPE_CHECKING:
    from ..model import MessageData, ModelRequestData, RequestData, ToolSpecData

__all__ = ["SETTINGS", "RequestArgs", "json_text", "message", "output_messages", "request", "request_attributes"]

# The request settings that have a semconv attribute, by their OpenAI names (as the replay compares them).
# Others (response_format, tool_choice, ...) have none: they are neither recorded nor compared.
SETTINGS = {
    "temperature": "gen_ai.request.temperature",
    "top_p": "gen_ai.request.top_p",
    "max_tokens": "gen_ai.request.max_tokens",
    "seed": "gen_ai.request.seed",
    "stop": "gen_ai.request.stop_sequences",
}


class RequestArgs(TypedDict, total=False):
    """The request keywords of ``AgentRun.model`` / ``amodel`` / ``model_call`` (``request()`` says their forms)."""

    system: str | Iterable[str] | None
    messages: Iterable[Any] | None
    tools: Iterable[Any] | None
    settings: Mapping[str, Any] | None


def json_text(value: Any) -> str:
    """JSON text for a span attribute; never raises (what orjson refuses takes the canonical encoding)."""
    if isinstance(value, str):
        return value
    try:
        return orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    except Exception:
        return canonical_json(value)


def message(role: str | None, text: str | None, tool_calls: Iterable[Mapping[str, Any]] = ()) -> dict[str, Any]:
    """One GenAI-semconv message: its text and the tool calls (``id``, ``name``, ``arguments``) it asks for."""
    parts: list[dict[str, Any]] = [{"type": "text", "content": text}] if text else []
    parts += [
        {"type": "tool_call", "id": tc.get("id"), "name": tc.get("name"), "arguments": tc.get("arguments", {})}
        for tc in tool_calls
    ]
    return {"role": role, "parts": parts}


def output_messages(text: str | None, tool_calls: Any = (), finish_reason: str | None = None) -> str:
    """``gen_ai.output.messages``: the assistant's one message."""
    msg = message("assistant", text, tool_calls)
    if finish_reason:
        msg["finish_reason"] = finish_reason
    return json_text([msg])


def request(
    system: str | Iterable[str] | None = None,
    messages: Iterable[Any] | None = None,
    tools: Iterable[Any] | None = None,
    settings: Mapping[str, Any] | None = None,
) -> ModelRequestData:
    """A model call's request in the form a recorded-model replay compares.

    ``messages``: ``{"role", "content", "tool_calls", "tool_call_id"}`` dicts (or objects with
    ``model_dump()``); a tool call is ``{"name", "call_id" or "id", "args" or "arguments"}``, or OpenAI's
    ``{"id", "function": {"name", "arguments"}}``. System (and developer) messages join ``system``;
    content that is not text is written as JSON. ``tools``: ``{"name", "description", "parameters"}`` or
    OpenAI's ``{"type": "function", "function": {...}}``; None: not recorded (never compared).
    """
    said = [system] if isinstance(system, str) else list(system or ())
    out: list[MessageData] = []
    for m in messages or ():
        msg = _message_data(m)
        if msg is None:
            continue
        if msg["role"] == "system":
            said.append(msg["content"] or "")
        elif msg["role"] == "tool" or msg["content"] or msg["tool_calls"]:
            out.append(msg)  # a message with nothing in it has no GenAI part: it is not recorded
    return {
        "system": "\n\n".join(s for s in said if s) or None,
        "messages": out,
        "tools": None if tools is None else [t for t in map(_tool_spec, tools) if t is not None],
        "settings": _settings(settings or {}),
    }


def request_attributes(req: ModelRequestData) -> dict[str, Any]:
    """The request as GenAI span attributes (structured values as JSON text, as span attributes allow)."""
    attrs: dict[str, Any] = {"gen_ai.input.messages": json_text([genai_message(m) for m in req["messages"]])}
    if req["system"] is not None:
        attrs["gen_ai.system_instructions"] = json_text([{"type": "text", "content": req["system"]}])
    if req["tools"] is not None:
        attrs["gen_ai.tool.definitions"] = json_text(
            [
                {"type": "function", "name": t["name"]}
                | {k: t[k] for k in ("description", "parameters") if t[k] is not None}
                for t in req["tools"]
            ]
        )
    for name, value in req["settings"].items():
        attrs[SETTINGS[name]] = value
    return attrs


def genai_message(m: MessageData) -> dict[str, Any]:
    """A neutral message in the GenAI form: a tool message is one ``tool_call_response`` part."""
    if m["role"] == "tool":
        part = {"type": "tool_call_response", "id": m["tool_call_id"], "response": m["content"]}
        return {"role": "tool", "parts": [part]}
    calls = [{"id": c["call_id"], "name": c["name"], "arguments": c["args"]} for c in m["tool_calls"]]
    return message(m["role"], m["content"], calls)


def _message_data(m: Any) -> MessageData | None:
    m = m.model_dump() if hasattr(m, "model_dump") else m
    if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
        return None
    role = "system" if m["role"] == "developer" else m["role"]
    calls = [c for c in map(_request_data, m.get("tool_calls") or ()) if c is not None]
    call_id = m.get("tool_call_id")
    return {
        "role": role,
        "content": _text(m.get("content")),
        "tool_calls": calls,
        "tool_call_id": call_id if isinstance(call_id, str) else None,
    }


def _request_data(tc: Any) -> RequestData | None:
    if not isinstance(tc, Mapping):
        return None
    fn = tc["function"] if isinstance(tc.get("function"), Mapping) else tc
    args = fn.get("arguments", fn.get("args", {}))
    if isinstance(args, (str, bytes)):
        try:
            args = orjson.loads(args)
        except orjson.JSONDecodeError:
            pass
    call_id = tc.get("call_id", tc.get("id"))
    return {"name": str(fn.get("name") or ""), "call_id": call_id if isinstance(call_id, str) else None, "args": args}


def _text(content: Any) -> str | None:
    """Message content as text: a string, text parts joined with a newline, anything else as JSON."""
    if content is None or isinstance(content, str):
        return content or None
    parts = isinstance(content, list) and content
    if parts and all(isinstance(p, Mapping) and p.get("type") == "text" for p in content):
        return "\n".join(str(p.get("text", p.get("content", ""))) for p in content) or None
    return json_text(content)


def _tool_spec(t: Any) -> ToolSpecData | None:
    if not isinstance(t, Mapping):
        return None
    fn = t["function"] if isinstance(t.get("function"), Mapping) else t
    name, description, parameters = fn.get("name"), fn.get("description"), fn.get("parameters")
    if not isinstance(name, str) or not name:
        return None
    return {
        "name": name,
        "description": description if isinstance(description, str) else None,
        "parameters": dict(parameters) if isinstance(parameters, Mapping) else None,
    }


def _settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, value in settings.items():
        if name not in SETTINGS or value is None:
            continue
        if name == "stop":
            value = [value] if isinstance(value, str) else [str(s) for s in value]
        if isinstance(value, (bool, int, float, str, list)):
            out[name] = value
    return out
