"""What a framework's capture quirks are: one ``Framework`` per module in ``FRAMEWORKS``.

A framework rides a convention (the OpenAI Agents SDK and smolagents OpenInference's, pydantic-ai the
GenAI one) and still records some things its own way: the exceptions that stop or pause its runs, the
calls it answers by running an agent, a span shape to fold. The readers and the assembly ask every
registered framework through these fields, so a framework's quirks live in its module alone; a field
it has nothing to say on keeps its default, which changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...spans import SpanData
from .._values import MISSING

if TYPE_CHECKING:
    from .._readings import LlmReading, ToolReading

__all__ = ["Framework"]


def _no_calls(agent: str) -> tuple[str, ...]:
    return ()


def _not_its_form(message: str) -> dict[str, str] | None:
    return None


def _not_folded(span: SpanData, name: str, args: Any, result: Any) -> tuple[str, Any, Any] | None:
    return None


def _nothing_to_mark(span: SpanData, reading: ToolReading, result: Any) -> None:
    return None


def _as_named(span: SpanData, name: str) -> str:
    return name


def _not_its_input(payload: dict[str, Any], call_id: str | None) -> tuple[Any, str | None] | None:
    return None


def _not_its_payload(payload: dict[str, Any]) -> Any:
    return MISSING


def _a_call(span: SpanData) -> bool:
    return False


def _never(agents: list[tuple[SpanData, str]], llms: list[LlmReading], tools: list[ToolReading]) -> bool:
    return False


@dataclass(frozen=True)
class Framework:
    """One framework's capture quirks.

    ``name``: as its adapter has it. ``deferrals``: exception types that pause a run for a human (an
    interrupt, an approval), never fail it. ``limit_stops``: exception type -> the stop it means (a
    step or budget limit) instead of ``error``. ``limit_answers``: starts of answers the framework
    writes itself when a limit ends the run. ``stop_messages``: (status message prefix, error type),
    what stopped a run when no exception event says it. ``hidden_answers``: error types after which
    the run's last text was never shown (an output guardrail blocked it).

    ``agent_calls(agent)``: names of the calls it answers by running ``agent`` (a managed agent, a
    handoff). ``error_message(message)``: a status message in its own form, as an error (None: not
    its form). ``tool_span(span, name, args, result)``: an OpenInference TOOL span it records unlike
    a tool call, as (name, args, result) of one (None: an ordinary tool span). ``read_tool(span,
    reading, result)``: mark what it means by an OpenInference tool span (``result``: the raw
    output). ``agent_span_name(span, name)``: the agent an agent span ran, from the span's name.
    ``forced_answer(agents, llms, tools)``: the run ran out of steps and it had the model answer.
    ``tool_input(payload, call_id)``: a tool span's input payload (a JSON object) in its own form, as
    (args, call id) (args ``MISSING``: it holds none; None: not its form). ``agent_prompt(payload)``:
    an agent span's prompt from an input payload in its own form (``MISSING``: not its form).
    ``agent_answer(payload)``: an agent span's answer from an output payload in its own form (an event,
    a result object; ``MISSING``: not its form; None: it answered nothing). ``not_a_call(span)``: a tool
    span that records no call of its own (a span summing up one turn's parallel calls, whose calls have
    spans of their own): left out of the run.
    """

    name: str
    deferrals: frozenset[str] = frozenset()
    limit_stops: Mapping[str, str] = field(default_factory=dict)
    limit_answers: tuple[str, ...] = ()
    stop_messages: tuple[tuple[str, str], ...] = ()
    hidden_answers: frozenset[str] = frozenset()
    agent_calls: Callable[[str], tuple[str, ...]] = _no_calls
    error_message: Callable[[str], dict[str, str] | None] = _not_its_form
    tool_span: Callable[[SpanData, str, Any, Any], tuple[str, Any, Any] | None] = _not_folded
    read_tool: Callable[[SpanData, ToolReading, Any], None] = _nothing_to_mark
    agent_span_name: Callable[[SpanData, str], str] = _as_named
    forced_answer: Callable[[list[tuple[SpanData, str]], list[LlmReading], list[ToolReading]], bool] = _never
    tool_input: Callable[[dict[str, Any], str | None], tuple[Any, str | None] | None] = _not_its_input
    agent_prompt: Callable[[dict[str, Any]], Any] = _not_its_payload
    agent_answer: Callable[[dict[str, Any]], Any] = _not_its_payload
    not_a_call: Callable[[SpanData], bool] = _a_call
