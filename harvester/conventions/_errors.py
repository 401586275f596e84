"""What stopped a run or failed a call, as each producer records it: exception events, status messages,
error types, and the pauses (an interrupt, an approval) that are not failures at all. Which exceptions
and messages mean what is each framework's (``_frameworks``); reading them off a span is here."""

from __future__ import annotations

from ..spans import SpanData
from ._frameworks import DEFERRALS, LIMIT_ANSWERS, LIMIT_STOPS, STOP_MESSAGES, error_message
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

# Error messages that say what stopped a run when no exception event does.
ERROR_MESSAGES = STOP_MESSAGES
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
    framed = error_message(msg)  # a framework's own form of it
    if framed is not None:
        return framed
    for prefix, etype in ERROR_MESSAGES:  # recorded without an exception event
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
