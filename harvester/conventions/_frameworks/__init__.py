"""The frameworks whose capture quirks the readers and the assembly ask about: one module each.

A framework rides a convention (its reader in ``READERS``) and keeps what it records its own way in
its module here, as a ``Framework`` (``_framework``: fields it has nothing to say on keep their
defaults). Adding one is a module and a line in ``FRAMEWORKS`` (typed, so mypy checks the entry),
and ``tests/test_plugins.py`` runs every registered framework through the same contract. The
functions below are what the readers and the assembly call: every framework's answer, gathered.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from ...spans import SpanData
from .._values import MISSING
from . import langchain, openai_agents, pydantic_ai, smolagents
from ._framework import Framework

if TYPE_CHECKING:
    from .._readings import LlmReading, ToolReading

__all__ = [
    "DEFERRALS",
    "FRAMEWORKS",
    "HIDDEN_ANSWERS",
    "LIMIT_ANSWERS",
    "LIMIT_STOPS",
    "STOP_MESSAGES",
    "Framework",
    "agent_calls",
    "agent_prompt",
    "agent_span_name",
    "error_message",
    "forced_answer",
    "read_tool",
    "tool_input",
    "tool_span",
]

FRAMEWORKS: tuple[Framework, ...] = (
    pydantic_ai.FRAMEWORK,
    langchain.FRAMEWORK,
    openai_agents.FRAMEWORK,
    smolagents.FRAMEWORK,
)

DEFERRALS = frozenset(name for f in FRAMEWORKS for name in f.deferrals)
LIMIT_STOPS = {error: stop for f in FRAMEWORKS for error, stop in f.limit_stops.items()}
LIMIT_ANSWERS = tuple(answer for f in FRAMEWORKS for answer in f.limit_answers)
STOP_MESSAGES = tuple(pair for f in FRAMEWORKS for pair in f.stop_messages)
HIDDEN_ANSWERS = frozenset(error for f in FRAMEWORKS for error in f.hidden_answers)


def agent_calls(agents: Iterable[str]) -> set[str]:
    """Names of the calls a framework answers by running one of ``agents``, never a tool body."""
    return {call for name in agents for f in FRAMEWORKS for call in f.agent_calls(name)}


def error_message(message: str) -> dict[str, str] | None:
    """A status message in some framework's own form, as an error."""
    for f in FRAMEWORKS:
        error = f.error_message(message)
        if error is not None:
            return error
    return None


def tool_span(span: SpanData, name: str, args: Any, result: Any) -> tuple[str, Any, Any]:
    """An OpenInference TOOL span's (name, args, result), as the first framework that folds it says."""
    for f in FRAMEWORKS:
        folded = f.tool_span(span, name, args, result)
        if folded is not None:
            return folded
    return name, args, result


def read_tool(span: SpanData, reading: ToolReading, result: Any) -> None:
    for f in FRAMEWORKS:
        f.read_tool(span, reading, result)


def agent_span_name(span: SpanData, name: str) -> str:
    for f in FRAMEWORKS:
        name = f.agent_span_name(span, name)
    return name


def forced_answer(agents: list[tuple[SpanData, str]], llms: list[LlmReading], tools: list[ToolReading]) -> bool:
    for f in FRAMEWORKS:
        if f.forced_answer(agents, llms, tools):
            return True
    return False


def tool_input(payload: dict[str, Any], call_id: str | None) -> tuple[Any, str | None] | None:
    """A tool span's (args, call id) from its input payload in some framework's own form; None: none's."""
    for f in FRAMEWORKS:
        found = f.tool_input(payload, call_id)
        if found is not None:
            return found
    return None


def agent_prompt(payload: dict[str, Any]) -> Any:
    """An agent span's prompt from its input payload in some framework's own form; ``MISSING``: none's."""
    for f in FRAMEWORKS:
        prompt = f.agent_prompt(payload)
        if prompt is not MISSING:
            return prompt
    return MISSING
