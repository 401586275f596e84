"""The frameworks harvester knows: one module each, all it knows of that framework in one place.

A framework rides a convention (its reader in ``READERS``); its module is an ``Adapter``
(``_protocol``): what it records its own way, as a ``Framework`` (``_framework``: fields it has
nothing to say on keep their defaults), and how a replay serves its tools (``NAME``, ``ROOTS``,
``install()``, ``accepts()``, ``prepare()``, ``instrument()``, with the guards of ``_patch``, the
history of ``_history`` and the tracing of ``_tracing``). Adding one is a module and a line in
``FRAMEWORKS`` (typed, so mypy checks the entry), and ``tests/test_plugins.py`` runs every registered
framework through the same contract. ``_clients`` holds the model SDK clients a raw loop calls. The
functions below are what the readers and the assembly call: every framework's answer, gathered.

Nothing here imports a framework the app did not import itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ...spans import SpanData
from .._values import MISSING
from . import google_adk, langchain, openai_agents, pydantic_ai, smolagents
from ._clients import CLIENTS, Client, client_scopes, untraced
from ._framework import Framework
from ._history import with_history
from ._protocol import Adapter, Loadable

if TYPE_CHECKING:
    from .._readings import LlmReading, ToolReading

__all__ = [
    "CLIENTS",
    "DEFERRALS",
    "FRAMEWORKS",
    "HIDDEN_ANSWERS",
    "LIMIT_ANSWERS",
    "LIMIT_STOPS",
    "STOP_MESSAGES",
    "Adapter",
    "Client",
    "Framework",
    "Loadable",
    "agent_answer",
    "agent_calls",
    "agent_prompt",
    "agent_span_name",
    "client_scopes",
    "error_message",
    "forced_answer",
    "not_a_call",
    "read_tool",
    "tool_input",
    "tool_span",
    "untraced",
    "with_history",
]

FRAMEWORKS: tuple[Adapter, ...] = (pydantic_ai, langchain, openai_agents, smolagents, google_adk)
_QUIRKS = tuple(f.FRAMEWORK for f in FRAMEWORKS)
_read: tuple[tuple[Adapter, ...], tuple[Framework, ...]] = (FRAMEWORKS, _QUIRKS)


def _quirks() -> tuple[Framework, ...]:
    """Every registered framework's quirks (read again only when the table is replaced: a test may extend it)."""
    global _read
    if _read[0] is not FRAMEWORKS:
        _read = (FRAMEWORKS, tuple(f.FRAMEWORK for f in FRAMEWORKS))
    return _read[1]


DEFERRALS = frozenset(name for f in _QUIRKS for name in f.deferrals)
LIMIT_STOPS = {error: stop for f in _QUIRKS for error, stop in f.limit_stops.items()}
LIMIT_ANSWERS = tuple(answer for f in _QUIRKS for answer in f.limit_answers)
STOP_MESSAGES = tuple(pair for f in _QUIRKS for pair in f.stop_messages)
HIDDEN_ANSWERS = frozenset(error for f in _QUIRKS for error in f.hidden_answers)


def agent_calls(agents: Iterable[str]) -> set[str]:
    """Names of the calls a framework answers by running one of ``agents``, never a tool body."""
    return {call for name in agents for f in _quirks() for call in f.agent_calls(name)}


def error_message(message: str) -> dict[str, str] | None:
    """A status message in some framework's own form, as an error."""
    for f in _quirks():
        error = f.error_message(message)
        if error is not None:
            return error
    return None


def tool_span(span: SpanData, name: str, args: Any, result: Any) -> tuple[str, Any, Any]:
    """An OpenInference TOOL span's (name, args, result), as the first framework that folds it says."""
    for f in _quirks():
        folded = f.tool_span(span, name, args, result)
        if folded is not None:
            return folded
    return name, args, result


def read_tool(span: SpanData, reading: ToolReading, result: Any) -> None:
    for f in _quirks():
        f.read_tool(span, reading, result)


def agent_span_name(span: SpanData, name: str) -> str:
    for f in _quirks():
        name = f.agent_span_name(span, name)
    return name


def forced_answer(agents: list[tuple[SpanData, str]], llms: list[LlmReading], tools: list[ToolReading]) -> bool:
    for f in _quirks():
        if f.forced_answer(agents, llms, tools):
            return True
    return False


def tool_input(payload: dict[str, Any], call_id: str | None) -> tuple[Any, str | None] | None:
    """A tool span's (args, call id) from its input payload in some framework's own form; None: none's."""
    for f in _quirks():
        found = f.tool_input(payload, call_id)
        if found is not None:
            return found
    return None


def _said(ask: Callable[[Framework], Any]) -> Any:
    """The first framework's reading of a payload in its own form; ``MISSING``: none's."""
    for f in _quirks():
        said = ask(f)
        if said is not MISSING:
            return said
    return MISSING


def agent_prompt(payload: dict[str, Any]) -> Any:
    """An agent span's prompt from its input payload in some framework's own form; ``MISSING``: none's."""
    return _said(lambda f: f.agent_prompt(payload))


def agent_answer(payload: dict[str, Any]) -> Any:
    """An agent span's answer from its output payload in some framework's own form; ``MISSING``: none's."""
    return _said(lambda f: f.agent_answer(payload))


def not_a_call(span: SpanData) -> bool:
    """A tool span some framework records beside its calls without being one (a summary of them)."""
    return any(f.not_a_call(span) for f in _quirks())
