"""Handing a later turn's conversation to the agent: what each adapter and an own loop are given.

A case made from a later turn of a chat holds the messages before it (``AgentCase.history``). Each
framework adapter turns them into the framework's own input (pydantic-ai ``message_history``,
LangChain messages, OpenAI Agents input items) and marks its entry point with ``takes_history``;
an own loop receives them through a ``history`` parameter of the callable the factory returns, in
the neutral form (``{"role", "content", "tool_calls": [{"name", "call_id", "args"}],
"tool_call_id"}``). An agent that cannot be given them would answer the turn alone: ``with_history``
says so, and the case fails rather than pass on a question nobody asked.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["history_of", "takes_history", "with_history"]

_MARK = "_harvester_takes_history"


def history_of(case: Any) -> list[dict[str, Any]]:
    """The case's earlier messages as plain dicts ([] for a first turn, or a runnable ``Case``)."""
    return [m.model_dump() for m in getattr(case, "history", None) or ()]


def takes_history(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Mark an adapter's entry point: it hands the case's history to the framework itself."""
    setattr(fn, _MARK, True)
    return fn


def with_history(target: Callable[..., Any], case: Any) -> tuple[Callable[..., Any], bool]:
    """(what to call with the prompt, whether the agent gets the case's history)."""
    history = history_of(case)
    if not history or getattr(target, _MARK, False):
        return target, True
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return target, False
    if "history" in params:
        return functools.partial(target, history=history), True
    return target, False
