"""pydantic-ai (the GenAI convention): the exceptions that defer a tool call or end a run on a budget.

Its output tools, MCP toolsets and older data formats are read by ``_genai``, whose convention it
writes in practice.
"""

from __future__ import annotations

from ._framework import Framework

__all__ = ["FRAMEWORK"]

FRAMEWORK = Framework(
    "pydantic-ai",
    deferrals=frozenset({"ApprovalRequired", "CallDeferred"}),  # a tool call left for a human or elsewhere
    limit_stops={"UsageLimitExceeded": "budget_exceeded"},
)
