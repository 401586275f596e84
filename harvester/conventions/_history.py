"""The conversation before a run's turn, read from its first model call's input messages.

A chat app sends the whole conversation with each turn (pydantic-ai ``message_history``, a LangChain
agent's ``messages``, openai-agents input items), so the first model call of a later turn holds every
earlier message: what came before the turn's own user message is its history. Three shapes carry it:
GenAI ``gen_ai.input.messages`` (role + typed parts; pydantic-ai, OpenLLMetry), the older indexed
``gen_ai.prompt.N.*``, and OpenInference's flattened ``llm.input_messages.N.message.*``.

The history is in one neutral form (``MessageData``: OpenAI-like role, text, tool calls, the call a
tool message answers), system messages left out (the agent sets its own). ``None`` is "the spans do
not say" (no input messages, or their content was not captured), which is not "no history".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from ..model import MessageData, RequestData
from ._values import AI_ROLES, USER_ROLES, content_text, loads, structured, text, tool_call_indices

__all__ = ["genai_messages", "message_role", "message_said", "openinference_messages", "split_history"]

_ROLES = {**dict.fromkeys(USER_ROLES, "user"), **dict.fromkeys(AI_ROLES, "assistant"), "tool": "tool"}
_ROLES.update({"function": "tool", "system": "system", "developer": "system"})
# smolagents' own roles, as its models send them (``tool_role_conversions``): a call as the assistant's
# text, its observation as the user's.
_ROLES.update({"tool-call": "assistant", "tool-response": "user"})


def message_role(value: Any) -> str | None:
    """A message's role as one of user, assistant, tool, system (None: not a role we know)."""
    return _ROLES.get(value) if isinstance(value, str) else None


def _as_text(value: Any) -> str | None:
    """A tool result or message content as the text a model was shown."""
    if value is None or isinstance(value, str):
        return value
    return orjson.dumps(value, default=str).decode()


def _args(raw: Any) -> Any:
    return raw if isinstance(raw, dict) else structured(raw)[0]


def _indexed_calls(
    a: dict[str, Any], at: dict[str, list[int]], prefix: str, inner: str, name: str, args: str
) -> list[RequestData]:
    """The tool calls flattened under ``<prefix>M.<inner>{id,<name>,<args>}``, M in the order ``at``
    (``tool_call_indices``) found them."""
    calls: list[RequestData] = []
    for m in at.get(prefix, ()):
        tc = f"{prefix}{m}.{inner}"
        if tc + name in a:
            calls.append(
                {
                    "name": text(a.get(tc + name)) or "",
                    "call_id": text(a.get(tc + "id")),
                    "args": _args(a.get(tc + args)),
                }
            )
    return calls


def _message(role: str, content: str | None = None, **extra: Any) -> MessageData:
    return {
        "role": role,
        "content": content,
        "tool_calls": extra.get("tool_calls") or [],
        "tool_call_id": extra.get("tool_call_id"),
    }


def genai_messages(a: dict[str, Any]) -> list[MessageData] | None:
    """``gen_ai.input.messages`` (or the indexed ``gen_ai.prompt.N.*``) in the neutral form."""
    raw = loads(a.get("gen_ai.input.messages"))
    if isinstance(raw, list):
        out: list[MessageData] = []
        for m in raw:
            role = message_role(m.get("role")) if isinstance(m, dict) else None
            if role is None:
                return None
            parts = m.get("parts")
            if not isinstance(parts, list):
                out.append(_message(role, content_text(m.get("content"))))
                continue
            texts: list[str] = []
            calls: list[RequestData] = []
            for p in parts:
                kind = p.get("type") if isinstance(p, dict) else None
                if kind == "text":
                    if "content" not in p:
                        return None  # content capture off: what was said is unknown
                    texts.append(str(p["content"]))
                elif kind == "tool_call":
                    calls.append(
                        {
                            "name": text(p.get("name")) or "",
                            "call_id": text(p.get("id")),
                            "args": _args(p.get("arguments")),
                        }
                    )
                elif kind == "tool_call_response":
                    result = p.get("result", p.get("response"))
                    out.append(_message("tool", _as_text(result), tool_call_id=text(p.get("id"))))
            if texts or calls:
                out.append(_message(role, "\n".join(texts) or None, tool_calls=calls))
        return out
    if "gen_ai.prompt.0.role" not in a:
        return None
    out = []
    at = tool_call_indices(a)
    n = 0
    while f"gen_ai.prompt.{n}.role" in a:
        base = f"gen_ai.prompt.{n}."
        role = message_role(a[base + "role"])
        if role is None:
            return None
        calls = _indexed_calls(a, at, f"{base}tool_calls.", "", "name", "arguments")
        out.append(
            _message(
                role, text(a.get(base + "content")), tool_calls=calls, tool_call_id=text(a.get(base + "tool_call_id"))
            )
        )
        n += 1
    return out


def openinference_messages(a: dict[str, Any], at: dict[str, list[int]] | None = None) -> list[MessageData] | None:
    """OpenInference's ``llm.input_messages.N.message.*`` in the neutral form (``at``: the span's
    ``tool_call_indices``, when the caller read them already)."""
    n = 0 if "llm.input_messages.0.message.role" in a else 1  # openai-agents may start at 1
    if f"llm.input_messages.{n}.message.role" not in a:
        return None
    out: list[MessageData] = []
    at = tool_call_indices(a) if at is None else at
    while f"llm.input_messages.{n}.message.role" in a:
        base = f"llm.input_messages.{n}.message."
        role = message_role(a[base + "role"])
        if role is None:
            return None
        calls = _indexed_calls(a, at, f"{base}tool_calls.", "tool_call.", "function.name", "function.arguments")
        said = message_said(a, base)
        out.append(_message(role, said, tool_calls=calls, tool_call_id=text(a.get(base + "tool_call_id"))))
        n += 1
    return out


def message_said(a: Mapping[str, Any], base: str) -> str | None:
    """An OpenInference message's text: its ``content``, else the text parts of its ``contents`` joined
    (the form the Anthropic and Google ADK instrumentors write)."""
    content = text(a.get(base + "content"))
    if content is not None:
        return content
    k, texts = 0, []
    while f"{base}contents.{k}.message_content.type" in a:
        if a[f"{base}contents.{k}.message_content.type"] == "text":
            texts.append(str(a.get(f"{base}contents.{k}.message_content.text") or ""))
        k += 1
    return "\n".join(texts) or None


def split_history(messages: list[MessageData] | None) -> list[MessageData] | None:
    """What came before the turn: every message before the last user message that says something,
    system messages left out. None when there is no such user message (the turn is not in them)."""
    if messages is None:
        return None
    last = next(
        (i for i in range(len(messages) - 1, -1, -1) if messages[i]["role"] == "user" and messages[i]["content"]), None
    )
    if last is None:
        return None
    return [m for m in messages[:last] if m["role"] != "system"]
