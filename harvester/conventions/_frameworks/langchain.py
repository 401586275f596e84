"""LangChain and LangGraph (under OpenInference or OpenLLMetry): the exceptions that pause or limit a
graph, and the answers its call-limit middleware writes itself.

Its payload forms (``dumpd()`` messages, callback payloads, graph states) are read by their shape
(``_values``, ``_readings``), as other producers write them alike.
"""

from __future__ import annotations

from ._framework import Framework

__all__ = ["FRAMEWORK"]

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
)
