"""What every framework's model guard does with a served model call, in one place.

A recorded-model replay compares the agent's live request with the recorded one, read from spans,
so both sides must come out the same (``ModelRequestData``): text only (parts joined with "\\n"),
tool call arguments as parsed JSON, settings by their OpenAI names with unset ones left out. An
answer's tool calls keep the recorded call ids (made up, ``call_<n>``, where none was recorded).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["SETTINGS", "args_of", "call_id", "settings_of", "text_of"]

# the request settings that shape the answer, by their OpenAI (chat completions) names
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
    if not isinstance(arguments, str):
        return arguments if arguments is not None else {}
    if not arguments.strip():
        return {}
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments


def call_id(recorded: str | None, n: int) -> str:
    return recorded or f"call_{n}"


def settings_of(given: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of ``SETTINGS`` that are set, in that order."""
    return {name: given[name] for name in SETTINGS if given.get(name) is not None}
