"""A model call's request in the one form a recorded-model replay compares (``ModelRequestData``).

The recorded request is read from spans (each convention's reader), the live one from a framework's own
objects (its model guard); both must normalize the same way, so the normalization lives here once:
system messages lifted out into ``system`` (joined with a blank line), message text only, tool call
args as parsed JSON, tools as JSON-schema specs, settings by their OpenAI names with unset ones left
out. ``request_from_openai`` takes the OpenAI chat format any framework can produce; the readers hand
their neutral messages (``_history``) to ``model_request``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..model import MessageData, ModelRequestData, RequestData, ToolSpecData
from ._values import content_text, loads, structured, text

__all__ = ["SETTINGS", "message_text", "model_request", "request_from_openai", "settings_of", "tool_specs"]

# The request settings that shape an answer, by their OpenAI names.
SETTINGS = (
    "temperature",
    "top_p",
    "max_tokens",
    "seed",
    "stop",
    "response_format",
    "tool_choice",
    "parallel_tool_calls",
)
# Other names producers give them (GenAI semconv, pydantic-ai, the Responses API, Anthropic).
_ALIASES = {
    "max_output_tokens": "max_tokens",
    "max_completion_tokens": "max_tokens",
    "stop_sequences": "stop",
    "text_format": "response_format",
}


def model_request(
    messages: list[MessageData],
    *,
    system: Iterable[str] = (),
    tools: list[ToolSpecData] | None = None,
    settings: Mapping[str, Any] | None = None,
    model: str | None = None,
) -> ModelRequestData:
    """The request from neutral messages (system ones lifted out, after ``system``), tools, settings and
    the model asked for (None: not said)."""
    said = [s for s in system if s]
    said += [m["content"] for m in messages if m["role"] == "system" and m["content"]]
    return {
        "system": "\n\n".join(said) or None,
        "messages": [m for m in messages if m["role"] != "system"],
        "tools": tools,
        "settings": settings_of(settings or {}),
        "model": model or None,
    }


def request_from_openai(
    messages: Iterable[Mapping[str, Any]], tools: Any = None, settings: Mapping[str, Any] | None = None
) -> ModelRequestData:
    """An OpenAI chat-completions request (message dicts, ``tools``, the other arguments) normalized.

    ``tools`` None: not known (never compared). Message content may be a string or a list of parts
    (text parts joined with a newline; images and other parts are not text and are left out).
    """
    out: list[MessageData] = []
    for m in messages:
        role = {"developer": "system", "function": "tool"}.get(str(m.get("role")), str(m.get("role")))
        calls: list[RequestData] = []
        for tc in m.get("tool_calls") or ():
            fn = tc.get("function") if isinstance(tc.get("function"), dict) else tc
            calls.append({"name": text(fn.get("name")) or "", "call_id": text(tc.get("id")), "args": _args(fn)})
        out.append(
            {
                "role": role,
                "content": message_text(m.get("content")),
                "tool_calls": calls,
                "tool_call_id": text(m.get("tool_call_id")),
            }
        )
    return model_request(out, tools=None if tools is None else tool_specs(tools), settings=settings)


def message_text(content: Any) -> str | None:
    """A message's content as text: a string, or its text parts joined with a newline."""
    if isinstance(content, list):
        parts = [content_text([p]) for p in content]
        return "\n".join(p for p in parts if p is not None) or None
    return content_text(content)


def _args(fn: Mapping[str, Any]) -> Any:
    raw = fn.get("arguments", fn.get("args"))
    return raw if isinstance(raw, dict) else structured(raw)[0]


def tool_specs(tools: Any) -> list[ToolSpecData]:
    """A tool list in any of the JSON-schema forms producers write, as ``ToolSpecData``: OpenAI's
    ``{"type": "function", "function": {...}}``, the flat ``{"name", "description", "parameters"}`` (GenAI
    ``gen_ai.tool.definitions``, the Responses API), pydantic-ai's ``parameters_json_schema``, Anthropic's
    ``input_schema``, or a bare name (a JSON string: its schema is not recorded). Odd entries are skipped."""
    out: list[ToolSpecData] = []
    for t in tools if isinstance(tools, list) else ():
        if isinstance(t, str):
            t = loads(t) if t[:1] in ('"', "{") else t
        if isinstance(t, str):
            out.append({"name": t, "description": None, "parameters": None})
            continue
        if not isinstance(t, dict):
            continue
        fn = t["function"] if isinstance(t.get("function"), dict) else t
        name = text(fn.get("name"))
        if not name:
            continue
        schema = fn.get("parameters", fn.get("parameters_json_schema", fn.get("input_schema")))
        schema = loads(schema) if isinstance(schema, str) else schema
        out.append(
            {
                "name": name,
                "description": text(fn.get("description")),
                "parameters": schema if isinstance(schema, dict) else None,
            }
        )
    return out


def settings_of(params: Mapping[str, Any]) -> dict[str, Any]:
    """The settings that shape an answer, by their OpenAI names; unset (None) ones left out."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        name = _ALIASES.get(key, key)
        if name in SETTINGS and value is not None and name not in out:
            out[name] = value
    return out
