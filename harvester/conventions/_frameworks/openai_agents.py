"""The OpenAI Agents SDK under OpenInference: handoffs, approvals, guardrails and its error messages.

A handoff is a span named "handoff to <agent>" for the ``transfer_to_<agent>`` call the model made; a
call waiting for an approval (``needs_approval``) is a TOOL span with input and no output that never
ran; a guardrail or the turn limit fails a run with a message and no exception event; a failed tool's
message holds a dict repr of the error.
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING, Any

from ...spans import SpanData
from .._values import MISSING
from ._framework import Framework

if TYPE_CHECKING:
    from .._readings import ToolReading

__all__ = ["FRAMEWORK", "HANDOFF_PREFIX", "handoff_tool_name"]

HANDOFF_PREFIX = "handoff to "


def handoff_tool_name(agent: str) -> str:
    """The SDK's default tool name for a handoff to ``agent`` (``Handoff.default_tool_name``)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", re.sub(r"\s", "_", f"transfer_to_{agent}")).lower()


def _agent_calls(agent: str) -> tuple[str, ...]:
    return (handoff_tool_name(agent),)


def _error_message(message: str) -> dict[str, str] | None:
    # "Error running tool: {'tool_name': 'get_order', 'error': "'no order B2002'"}" (a dict repr)
    cut = message.find(": {")
    if cut > 0 and message.endswith("}") and len(message) < 20_000:
        try:
            data = ast.literal_eval(message[cut + 2 :])
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            data = None
        if isinstance(data, dict) and isinstance(data.get("error"), str):
            return {"type": "Error", "message": data["error"]}
    return None


def _tool_span(span: SpanData, name: str, args: Any, result: Any) -> tuple[str, Any, Any] | None:
    if "tool.name" in span.attributes or not name.startswith(HANDOFF_PREFIX):
        return None
    # the model called transfer_to_<agent>; the span says "handoff to <agent>", with the agents handed
    # from and to as its input and output.
    target = name[len(HANDOFF_PREFIX) :]
    return handoff_tool_name(target), "{}", target


def _read_tool(span: SpanData, reading: ToolReading, result: Any) -> None:
    # a call waiting for approval is a TOOL span with input and no output that never ran
    reading.awaiting = reading.status == "ok" and result is MISSING and not reading.hidden


FRAMEWORK = Framework(
    "openai-agents",
    limit_stops={"MaxTurnsExceeded": "max_steps"},
    stop_messages=(  # recorded without an exception event
        ("Max turns exceeded", "MaxTurnsExceeded"),
        ("Guardrail tripwire triggered", "GuardrailTripwireTriggered"),
    ),
    hidden_answers=frozenset({"GuardrailTripwireTriggered"}),  # an output guardrail blocked it: nobody saw it
    agent_calls=_agent_calls,
    error_message=_error_message,
    tool_span=_tool_span,
    read_tool=_read_tool,
)
