"""smolagents under OpenInference: its answer tool, its managed agents, its agent spans' names, its
step limit.

A tool span's input is ``{"args", "kwargs"}``, an agent span's ``{"task"}``. It answers through its
``FinalAnswerTool`` (the run's answer, not a call); a managed agent is called
by the model by its name and runs as an agent span; agent spans are named ``<agent>.run``; out of
steps, it has the model answer from the agent itself (``provide_final_answer``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...spans import SpanData
from .._values import MISSING, text
from ._framework import Framework

if TYPE_CHECKING:
    from .._readings import LlmReading, ToolReading

__all__ = ["FRAMEWORK"]


def _agent_calls(agent: str) -> tuple[str, ...]:
    return (agent,)  # a managed agent: the model calls it by its name


def _read_tool(span: SpanData, reading: ToolReading, result: Any) -> None:
    reading.answer_tool = span.name == "FinalAnswerTool" and reading.name == "final_answer"


def _agent_span_name(span: SpanData, name: str) -> str:
    if name.endswith(".run") and "smolagents.tools_names" in span.attributes:  # "<agent name>.run"
        return name[: -len(".run")]
    return name


def _forced_answer(agents: list[tuple[SpanData, str]], llms: list[LlmReading], tools: list[ToolReading]) -> bool:
    """Out of steps: no final_answer call, and the answer came from a model call made by the agent
    itself (``provide_final_answer``), not from one of its numbered steps."""
    if not agents or not llms or any(t.answer_tool for t in tools):
        return False
    limited = {sp.span_id for sp, _ in agents if "smolagents.max_steps" in sp.attributes}
    return bool(limited) and llms[-1].span.parent_id in limited


def _tool_input(payload: dict[str, Any], call_id: str | None) -> tuple[Any, str | None] | None:
    """``{"args": [], "kwargs": {...}}``: the kwargs."""
    if (
        set(payload) <= {"args", "kwargs", "sanitize_inputs_outputs"}
        and isinstance(payload.get("kwargs"), dict)
        and not payload.get("args")
    ):
        return payload["kwargs"], call_id
    return None


def _agent_prompt(payload: dict[str, Any]) -> Any:
    """``{"task": ...}``: the task."""
    return text(payload["task"]) if isinstance(payload.get("task"), str) else MISSING


FRAMEWORK = Framework(
    "smolagents",
    limit_stops={"AgentMaxStepsError": "max_steps"},
    agent_calls=_agent_calls,
    read_tool=_read_tool,
    agent_span_name=_agent_span_name,
    forced_answer=_forced_answer,
    tool_input=_tool_input,
    agent_prompt=_agent_prompt,
)
