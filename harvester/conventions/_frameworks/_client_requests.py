"""A raw SDK call's live arguments as the ``ModelRequestData`` a recorded-model replay compares.

The app hands the client OpenAI chat ``messages``, Responses ``input`` items (and ``instructions``) or
Anthropic ``messages`` (and ``system``), as dicts or as the SDK's own objects it got back from the
last turn. Each becomes the one form every reader produces from spans: system text apart, one
message per user turn, assistant turn (text and tool calls, args as parsed JSON) and tool result,
text content only (parts joined with a newline), the tools offered as JSON schemas and the settings
that shape the answer by their OpenAI names (unset ones left out). Ids are kept but never compared.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ...canonical import json_value
from .._requests import settings_of
from ._served import text_of

if TYPE_CHECKING:
    from ...model import MessageData, ModelRequestData, RequestData, ToolSpecData

__all__ = ["REQUESTS", "plain", "unset"]


def unset(value: Any) -> bool:
    """An argument the app left out: None, or the SDKs' ``omit`` / ``NOT_GIVEN`` sentinels."""
    return value is None or type(value).__name__ in ("Omit", "NotGiven")


def plain(value: Any) -> Any:
    """``value`` as JSON-like data: the SDK's pydantic objects dumped, iterables listed."""
    if hasattr(value, "model_dump") and not isinstance(value, type):
        return value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items() if not unset(v)}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def _args(arguments: Any) -> Any:
    """Tool call arguments as parsed JSON (a string that is not JSON stays as it is)."""
    return {} if arguments is None else json_value(arguments)


def _message(
    role: str, content: str | None, calls: list[RequestData] | None = None, answers: Any = None
) -> MessageData:
    return {"role": role, "content": content, "tool_calls": calls or [], "tool_call_id": answers}


def _call(name: Any, call_id: Any, arguments: Any) -> RequestData:
    return {"name": str(name), "call_id": call_id, "args": _args(arguments)}


def _settings(kwargs: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    """The settings the app set, each under its OpenAI name (``names``: the API's name -> OpenAI's)."""
    return settings_of({ours: plain(kwargs[theirs]) for theirs, ours in names.items() if not unset(kwargs.get(theirs))})


def _request(
    kwargs: Mapping[str, Any],
    system: list[str | None],
    messages: list[MessageData],
    tools: list[ToolSpecData],
    settings: dict[str, Any],
) -> ModelRequestData:
    parts = [s for s in system if s]
    model = kwargs.get("model")
    return {
        "system": "\n\n".join(parts) if parts else None,
        "messages": messages,
        "tools": tools,
        "settings": settings,
        "model": model if isinstance(model, str) and model else None,
    }


def _tool(name: Any, description: Any = None, parameters: Any = None) -> ToolSpecData:
    return {"name": str(name), "description": description, "parameters": parameters}


# -- chat completions ---------------------------------------------------------------------------------
_CHAT_SETTINGS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "max_tokens": "max_tokens",
    "max_completion_tokens": "max_tokens",
    "seed": "seed",
    "stop": "stop",
    "response_format": "response_format",
    "tool_choice": "tool_choice",
    "parallel_tool_calls": "parallel_tool_calls",
}


def chat(kwargs: Mapping[str, Any]) -> ModelRequestData:
    """``chat.completions.create(messages=..., tools=...)``."""
    system: list[str | None] = []
    messages: list[MessageData] = []
    for m in plain(kwargs.get("messages")) or []:
        role, content = m.get("role"), text_of(m.get("content"))
        if role in ("system", "developer"):
            system.append(content)
        elif role in ("tool", "function"):
            messages.append(_message("tool", content, answers=m.get("tool_call_id")))
        elif role == "assistant":
            calls = [
                _call(f.get("name"), tc.get("id"), f.get("arguments"))
                for tc in m.get("tool_calls") or []
                for f in [tc.get("function") or {}]
            ]
            messages.append(_message("assistant", content, calls))
        else:
            messages.append(_message("user", content))
    tools = []
    for t in plain(kwargs.get("tools")) or []:
        f = t.get("function") or {}
        tools.append(_tool(f.get("name"), f.get("description"), f.get("parameters")) if f else _tool(t.get("type")))
    return _request(
        kwargs, system, messages, tools, _settings({**kwargs, "response_format": _wire_format(kwargs)}, _CHAT_SETTINGS)
    )


def _wire_format(kwargs: Mapping[str, Any]) -> Any:
    """``response_format`` as the request carries it: a structured-output type (a pydantic model given
    to ``parse``) as the strict JSON schema the SDK makes of it (``additionalProperties: false``, every
    field required), the one the recording holds; any other value as it is."""
    given = kwargs.get("response_format")
    if not isinstance(given, type):
        return given
    from openai.lib._parsing._completions import type_to_response_format_param

    return type_to_response_format_param(given)


# -- the Responses API --------------------------------------------------------------------------------
_RESPONSES_SETTINGS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "max_output_tokens": "max_tokens",
    "tool_choice": "tool_choice",
    "parallel_tool_calls": "parallel_tool_calls",
}


def responses(kwargs: Mapping[str, Any]) -> ModelRequestData:
    """``responses.create(input=..., instructions=..., tools=...)``: an assistant's message and the
    function calls after it are one assistant turn, as in chat."""
    system: list[str | None] = [kwargs.get("instructions") if isinstance(kwargs.get("instructions"), str) else None]
    messages: list[MessageData] = []
    items = plain(kwargs.get("input"))
    for item in [{"role": "user", "content": items}] if isinstance(items, str) else items or []:
        kind, role = item.get("type", "message"), item.get("role")
        if kind == "function_call":
            call = _call(item.get("name"), item.get("call_id"), item.get("arguments"))
            if messages and messages[-1]["role"] == "assistant":
                messages[-1]["tool_calls"].append(call)
            else:
                messages.append(_message("assistant", None, [call]))
        elif kind == "function_call_output":
            messages.append(_message("tool", text_of(item.get("output")), answers=item.get("call_id")))
        elif kind != "message":
            continue  # reasoning and the hosted tools' items: no text the model is asked with
        elif role in ("system", "developer"):
            system.append(text_of(item.get("content")))
        else:
            messages.append(_message("assistant" if role == "assistant" else "user", text_of(item.get("content"))))
    tools = [
        _tool(t.get("name"), t.get("description"), t.get("parameters"))
        if t.get("type") == "function"
        else _tool(t.get("name") or t.get("type"))
        for t in plain(kwargs.get("tools")) or []
    ]
    settings = _settings(kwargs, _RESPONSES_SETTINGS)
    text = plain(kwargs.get("text"))
    if isinstance(kwargs.get("text_format"), type):  # ``parse(text_format=...)``: the SDK sends it as text.format
        from openai.lib._parsing._responses import type_to_text_format_param

        text = {**(text if isinstance(text, dict) else {}), "format": type_to_text_format_param(kwargs["text_format"])}
    if isinstance(text, dict) and text.get("format"):
        settings["response_format"] = text["format"]
    return _request(kwargs, system, messages, tools, settings)


# -- Anthropic messages -------------------------------------------------------------------------------
_ANTHROPIC_SETTINGS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "max_tokens": "max_tokens",
    "stop_sequences": "stop",
    "tool_choice": "tool_choice",
}


def _blocks(content: Any) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content or [])


def anthropic(kwargs: Mapping[str, Any]) -> ModelRequestData:
    """``messages.create(system=..., messages=..., tools=...)``: each ``tool_result`` block is a tool
    message, the text beside it a user message after them."""
    messages: list[MessageData] = []
    for m in plain(kwargs.get("messages")) or []:
        blocks = _blocks(m.get("content"))
        text = text_of([b for b in blocks if b.get("type") == "text"])
        if m.get("role") == "assistant":
            calls = [_call(b.get("name"), b.get("id"), b.get("input")) for b in blocks if b.get("type") == "tool_use"]
            messages.append(_message("assistant", text, calls))
            continue
        for b in blocks:
            if b.get("type") == "tool_result":
                messages.append(_message("tool", text_of(b.get("content")), answers=b.get("tool_use_id")))
        if text is not None or not any(b.get("type") == "tool_result" for b in blocks):
            messages.append(_message("user", text))
    tools = [
        _tool(t.get("name"), t.get("description"), t.get("input_schema")) for t in plain(kwargs.get("tools")) or []
    ]
    system = None if unset(kwargs.get("system")) else text_of(plain(kwargs.get("system")))
    return _request(kwargs, [system], messages, tools, _settings(kwargs, _ANTHROPIC_SETTINGS))


REQUESTS: dict[str, Callable[[Mapping[str, Any]], ModelRequestData]] = {
    "chat": chat,
    "responses": responses,
    "anthropic": anthropic,
}
