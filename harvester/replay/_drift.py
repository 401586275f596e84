"""Drift: how the agent's live model request differs from the recorded one at the same step, as short
lines a reader can act on (the system prompt as a line diff, the tools offered, the first message that
differs, the settings).

Both sides are ``ModelRequestData`` (the recorded one read from spans, the live one from the framework's
own objects), normalized alike: text only, tool-call args as JSON values, no ids. A recorded piece that
is None was not recorded, so it is not compared: a case recorded without tool definitions still replays.
The system prompt is read with the messages (every reader lifts it out of the input messages, or the
attribute beside them), so where a recorded request holds what its messages said, None there was none
sent, and one the agent sends now is a change.
A text that holds JSON (a tool's result) is compared as the JSON value, so key order and spacing, which
differ between a framework's serializer and an instrumentor's, are no change. A setting is compared
where both sides set it: instrumentors record the defaults a client fills in (``tool_choice: auto``)
that the agent's own request leaves unset.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..canonical import canonical_json, json_value

__all__ = ["MORE_CALLS", "Change", "answer_changes", "request_changes"]

DIFF_LINES = 4  # changed lines of a text shown per change
TEXT_CHARS = 80  # each shown line cut to this
MORE_CALLS = "more calls"

Change = tuple[str, str]  # (what changed: "model", "system prompt", "tools", "message", "settings"; the line)


def request_changes(recorded: Mapping[str, Any] | None, live: Mapping[str, Any]) -> list[Change]:
    """What changed from the recorded request to the live one; [] when they match (or nothing was recorded)."""
    if recorded is None:
        return []
    out: list[Change] = []
    if recorded.get("model") and live.get("model") and recorded["model"] != live["model"]:
        out.append(("model", f"model: {recorded['model']} -> {live['model']}"))  # another model's answers
    before, now = recorded.get("system"), live.get("system")
    if before != now and (before is not None or (now and _captured(recorded))):
        out.append(("system prompt", f"system prompt: {text_diff(before, now)}"))
    if recorded.get("tools") is not None:
        line = _tools(recorded["tools"], live.get("tools") or [])
        if line:
            out.append(("tools", f"tools: {line}"))
    line = _messages(recorded.get("messages") or [], live.get("messages") or [])
    if line:
        out.append(("message", line))
    line = _settings(recorded.get("settings") or {}, live.get("settings") or {})
    if line:
        out.append(("settings", f"settings: {line}"))
    return out


def _captured(recorded: Mapping[str, Any]) -> bool:
    """The recorded request says what its messages said, so a system prompt it does not hold was none.
    Messages whose text is not there (their content was not captured) say nothing of it either."""
    return any(m.get("content") is not None for m in recorded.get("messages") or ())


def answer_changes(answer: Mapping[str, Any], live: Mapping[str, Any]) -> list[Change]:
    """The recorded answer's tool calls the agent's tools no longer take: a tool it does not offer, or
    arguments its schema now rejects (a required parameter missing, one it does not have). This holds
    where the recording kept no tool definitions to compare (the OpenAI Agents SDK under OpenInference):
    a served call the agent's own tools would refuse is a drift, not a call served past its validation."""
    offered = {t.get("name"): t.get("parameters") for t in live.get("tools") or ()}
    if not offered:
        return []  # the agent's request names no tools (a framework that does not say): nothing to hold
    out: list[Change] = []
    for call in answer.get("tool_calls") or ():
        name = call.get("name")
        if name not in offered:
            out.append(("tools", f"tools: the recorded call {name}() names a tool the agent no longer offers"))
            continue
        problem = _misfit(json_value(call.get("args")), offered[name])
        if problem:
            out.append(("tools", f"tools: the recorded call {name}() no longer fits its schema ({problem})"))
    return out


def _misfit(args: Any, schema: Any) -> str:
    if not isinstance(schema, Mapping) or not isinstance(args, Mapping):
        return ""
    properties = schema.get("properties")
    required = [str(r) for r in schema.get("required") or () if r not in args]
    unknown = sorted(str(k) for k in args if isinstance(properties, Mapping) and k not in properties)
    parts = [f"missing {', '.join(required)}"] if required else []
    if unknown:
        parts.append(f"no parameter {', '.join(unknown)}")
    return "; ".join(parts)


def text_diff(before: str | None, after: str | None) -> str:
    """A unified line diff of two texts on one line: the changed lines, ``-`` recorded and ``+`` now."""
    if before is None or after is None:
        return f"{_quote(before)} -> {_quote(after)}"
    lines = [
        line
        for line in difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="", n=0)
        if not line.startswith(("---", "+++", "@@"))
    ]
    if not lines:  # only whitespace at the ends of lines, or the line breaks, differ
        return f"{_quote(before)} -> {_quote(after)}"
    shown = " ".join(f"{line[0]}{_quote(line[1:])}" for line in lines[:DIFF_LINES])
    return shown + (f" (+{len(lines) - DIFF_LINES} more lines)" if len(lines) > DIFF_LINES else "")


def _quote(text: str | None) -> str:
    if text is None:
        return "(none)"
    text = text if len(text) <= TEXT_CHARS else text[: TEXT_CHARS - 3] + "..."
    return json.dumps(text, ensure_ascii=False)


def _tools(recorded: Sequence[Mapping[str, Any]], live: Sequence[Mapping[str, Any]]) -> str:
    """Tools added, removed, and those whose schema (or description) changed, by name."""
    before = {t.get("name"): t for t in recorded}
    now = {t.get("name"): t for t in live}
    parts = []
    added = sorted(str(n) for n in now.keys() - before.keys())
    removed = sorted(str(n) for n in before.keys() - now.keys())
    if added:
        parts.append(f"added {', '.join(added)}")
    if removed:
        parts.append(f"removed {', '.join(removed)}")
    schema = [
        str(n)
        for n in before.keys() & now.keys()
        if before[n].get("parameters") is not None
        and json_value(before[n]["parameters"]) != json_value(now[n].get("parameters"))
    ]
    described = [
        str(n)
        for n in before.keys() & now.keys()
        if before[n].get("description") is not None and before[n]["description"] != now[n].get("description")
    ]
    if schema:
        parts.append(f"schema changed {', '.join(sorted(schema))}")
    if described:
        parts.append(f"description changed {', '.join(sorted(described))}")
    return "; ".join(parts)


def _merged(messages: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """An assistant's tool calls in one message: an instrumentor records the Responses API's input items
    one per message (a text, then each function call) where a chat request holds one message with all."""
    out: list[Mapping[str, Any]] = []
    for m in messages:
        if not m.get("content") and not m.get("tool_calls") and m.get("role") != "tool":
            continue  # says nothing (an empty prompt part): one side's spans keep it, the other drops it
        before = out[-1] if out else None
        if before is not None and m.get("role") == before.get("role") == "assistant" and not m.get("content"):
            out[-1] = {**before, "tool_calls": [*(before.get("tool_calls") or ()), *(m.get("tool_calls") or ())]}
        else:
            out.append(m)
    return out


def _messages(recorded: Sequence[Mapping[str, Any]], live: Sequence[Mapping[str, Any]]) -> str:
    """The first message that differs (1-based, with its role) and how; or how many were added or dropped."""
    recorded, live = _merged(recorded), _merged(live)
    for i, (old, new) in enumerate(zip(recorded, live), 1):
        where = f"message {i} ({old.get('role')})"
        if old.get("role") != new.get("role"):
            return f"{where}: role {old.get('role')} -> {new.get('role')}"
        if old.get("content") is not None and _said(old.get("content")) != _said(new.get("content")):
            return f"{where}: {text_diff(old.get('content'), new.get('content'))}"
        calls_before, calls_now = _calls(old.get("tool_calls")), _calls(new.get("tool_calls"))
        if calls_before != calls_now:
            return f"{where}: tool calls {_call_text(calls_before)} -> {_call_text(calls_now)}"
    if len(recorded) == len(live):
        return ""
    if len(live) > len(recorded):
        extra = live[len(recorded)]
        return (
            f"messages: {len(recorded)} recorded, {len(live)} now; message {len(recorded) + 1} "
            f"({extra.get('role')}) added: {_quote(extra.get('content'))}"
        )
    return f"messages: {len(recorded)} recorded, {len(live)} now; message {len(live) + 1} onwards dropped"


def _said(content: Any) -> Any:
    """A message's content as compared: text blocks (a JSON list of ``{"type": "text"}`` parts, as the
    instrumentors write an Anthropic tool result) as their texts joined, as the live side reads them; a
    text holding JSON as its value (the joined texts too); an empty text as none."""
    value = json_value(content)
    if isinstance(value, list) and value and all(isinstance(p, Mapping) and p.get("type") == "text" for p in value):
        value = json_value("\n".join(str(p.get("text") or "") for p in value))
    return None if value == "" else value


def _calls(calls: Any) -> list[tuple[Any, str]]:
    """Tool calls as (name, canonical args): ids are never compared (a live run makes its own), and a
    call without arguments is one whether its span kept ``null``, ``""`` or ``{}``."""
    return [(c.get("name"), canonical_json(json_value(c.get("args")) or {})) for c in calls or ()]


def _call_text(calls: list[tuple[Any, str]]) -> str:
    text = ", ".join(f"{name}({args})" for name, args in calls) or "(none)"
    return text if len(text) <= TEXT_CHARS else text[: TEXT_CHARS - 3] + "..."


def _settings(recorded: Mapping[str, Any], live: Mapping[str, Any]) -> str:
    """Each setting both sides set whose value changed, ``key recorded -> now``."""
    parts = []
    for key in sorted(recorded.keys() & live.keys()):
        if json_value(recorded[key]) != json_value(live[key]):
            parts.append(f"{key} {canonical_json(recorded[key])} -> {canonical_json(live[key])}")
    return "; ".join(parts)
