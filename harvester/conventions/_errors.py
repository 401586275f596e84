"""What stopped a run or failed a call, as each producer records it: exception events, status messages,
error types, and the pauses (an interrupt, an approval) that are not failures at all."""

from __future__ import annotations

import ast

from ..spans import SpanData
from ._values import short_type, text

__all__ = [
    "DEFERRALS",
    "ERROR_MESSAGES",
    "LIMIT_ANSWERS",
    "LIMIT_STOPS",
    "RUN_STOPPERS",
    "deferral",
    "error_of",
    "exception",
]

# Exceptions that pause a run for a human rather than fail it.
DEFERRALS = frozenset({"GraphInterrupt", "NodeInterrupt", "Interrupt", "ApprovalRequired", "CallDeferred"})
LIMIT_STOPS = {
    "UsageLimitExceeded": "budget_exceeded",
    "GraphRecursionError": "max_steps",
    "MaxTurnsExceeded": "max_steps",
    "AgentMaxStepsError": "max_steps",
    "ModelCallLimitExceededError": "max_steps",
    "ToolCallLimitExceededError": "max_steps",
}
# LangChain's call-limit middleware with exit_behavior="end" ends the run on a message of its own,
# which no model wrote: the run stopped on a limit, whatever the message says.
LIMIT_ANSWERS = ("Model call limits exceeded", "Tool call limit reached", "Tool call limits exceeded")
# Error messages that say what stopped a run when no exception event does.
ERROR_MESSAGES = (
    ("Max turns exceeded", "MaxTurnsExceeded"),
    ("Guardrail tripwire triggered", "GuardrailTripwireTriggered"),
)
RUN_STOPPERS = tuple(prefix for prefix, _ in ERROR_MESSAGES)


def exception(span: SpanData) -> tuple[str, str] | None:
    for e in span.events or ():
        if isinstance(e, dict) and e.get("name") == "exception":
            ea = e.get("attributes") or {}
            if isinstance(ea, dict):
                return short_type(ea.get("exception.type")), text(ea.get("exception.message")) or ""
    return None


def error_of(span: SpanData) -> dict[str, str]:
    exc = exception(span)
    if exc is not None:
        return {"type": exc[0], "message": exc[1]}
    msg = text(span.status_message) or ""
    etype = span.attributes.get("error.type")
    if etype is not None:
        return {"type": short_type(etype), "message": msg}
    # openai-agents: "Error running tool: {'tool_name': 'get_order', 'error': "'no order B2002'"}" (a dict repr)
    cut = msg.find(": {")
    if cut > 0 and msg.endswith("}") and len(msg) < 20_000:
        try:
            data = ast.literal_eval(msg[cut + 2 :])
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            data = None
        if isinstance(data, dict) and isinstance(data.get("error"), str):
            return {"type": "Error", "message": data["error"]}
    for prefix, etype in ERROR_MESSAGES:  # openai-agents records these without an exception event
        if msg.startswith(prefix):
            return {"type": etype, "message": msg}
    # OpenInference/LangChain: "KeyError('no order B2002')Traceback (most recent call last): ..."
    head = msg.split("Traceback (most recent call last)", 1)[0].strip()
    if "(" in head and head.endswith(")") and head[: head.index("(")].replace(".", "").isidentifier():
        name, _, rest = head.partition("(")
        inner = rest[:-1]
        if len(inner) >= 2 and inner[0] == inner[-1] and inner[0] in "'\"":
            inner = inner[1:-1]
        return {"type": short_type(name), "message": inner}
    return {"type": "Error", "message": head or msg}


def deferral(span: SpanData) -> bool:
    exc = exception(span)
    if exc is not None and exc[0] in DEFERRALS:
        return True
    etype = span.attributes.get("error.type")
    return isinstance(etype, str) and short_type(etype) in DEFERRALS
