"""LangChain and LangGraph (under OpenInference or OpenLLMetry): the exceptions that pause or limit a
graph, and the answers its call-limit middleware writes itself.

A tool span's input is a callback payload (``{"input_str", "inputs", "kwargs"}``, the call id in
``kwargs.tool_call_id``). Its message forms (``dumpd()``, ``message_to_dict()``, graph states) are read
by their shape (``_values``, ``_readings``), as other producers write them alike.
"""

from __future__ import annotations

from typing import Any

from .._values import MISSING, text
from ._framework import Framework

__all__ = ["FRAMEWORK"]


def _tool_input(payload: dict[str, Any], call_id: str | None) -> tuple[Any, str | None] | None:
    """A callback payload: its ``inputs``, and the call id it names (when the span named none)."""
    if "input_str" not in payload and not ("inputs" in payload and "kwargs" in payload):
        return None
    kw = payload.get("kwargs")
    if isinstance(kw, dict) and call_id is None:
        call_id = text(kw.get("tool_call_id"))
    inputs = payload.get("inputs")
    return (inputs if isinstance(inputs, dict) else MISSING), call_id


FRAMEWORK = Framework(
    "langchain",
    deferrals=frozenset({"GraphInterrupt", "NodeInterrupt", "Interrupt"}),  # interrupt(), interrupt_before
    limit_stops={
        "GraphRecursionError": "max_steps",
        "ModelCallLimitExceededError": "max_steps",
        "ToolCallLimitExceededError": "max_steps",
    },
    # The call-limit middleware with exit_behavior="end" ends the run on a message of its own, which
    # no model wrote: the run stopped on a limit, whatever the message says.
    limit_answers=("Model call limits exceeded", "Tool call limit reached", "Tool call limits exceeded"),
    tool_input=_tool_input,
)
