"""A Run's plain-dict form, ``RunData``: what capture, ingest and the store hand each other.

The hook and the ingest workers read, redact and store runs in this form, never building the
pydantic model (validating and serializing it costs more than reading the run). It is exactly
``Run.to_data()`` (the model's JSON form), and ``Run.from_data`` is the one way back; this module
imports no pydantic, so the production hook loads none. ``requested_tools`` and ``blocked_tools``
are derived from ``calls`` and present only where a reader sees them (the store's JSON).
"""

from __future__ import annotations

from typing import Any, Literal, Optional, TypedDict

from typing_extensions import NotRequired

__all__ = ["STOPS", "CallData", "CallStatus", "ErrorData", "LlmCallData", "RequestData", "RunData", "Stop",
           "UsageData", "data_failed", "data_with_derived"]

Stop = Literal["answered", "error", "deferred", "budget_exceeded", "max_steps", "loop_detected", "unknown"]
STOPS: tuple[str, ...] = Stop.__args__  # type: ignore[attr-defined]
CallStatus = Literal["ok", "error", "blocked"]


class ErrorData(TypedDict):
    type: str
    message: str


class UsageData(TypedDict):
    input_tokens: int
    output_tokens: int


class CallData(TypedDict):
    name: str
    call_id: Optional[str]
    args: Any
    status: CallStatus
    result: Any
    error: Optional[ErrorData]
    truncated: bool


class RequestData(TypedDict):
    name: str
    call_id: Optional[str]
    args: Any


class LlmCallData(TypedDict):
    model: Optional[str]
    usage: UsageData
    requests: list[RequestData]
    finish_reason: Optional[str]


class RunData(TypedDict):
    trace_id: str
    run_id: str
    agent: Optional[str]
    model: Optional[str]
    prompt: Optional[str]
    answer: Optional[str]
    stop: Stop
    error: Optional[ErrorData]
    calls: list[CallData]
    llm_calls: list[LlmCallData]
    usage: UsageData
    cost: Optional[float]
    started_at: Optional[str]
    duration_ms: Optional[float]
    content_captured: bool
    feedback: Optional[str]
    source: Optional[str]
    requested_tools: NotRequired[list[str]]
    blocked_tools: NotRequired[list[str]]


def data_failed(data: RunData) -> bool:
    """``Run.failed`` of a run's plain-dict form."""
    return (data["stop"] != "answered" or any(c["status"] != "ok" for c in data["calls"])
            or data["feedback"] == "negative")


def data_with_derived(data: RunData) -> RunData:
    """A run's plain-dict form with ``requested_tools``/``blocked_tools``, as its JSON form has them."""
    calls = data["calls"]
    return {**data, "requested_tools": list(dict.fromkeys(c["name"] for c in calls)),
            "blocked_tools": list(dict.fromkeys(c["name"] for c in calls if c["status"] != "ok"))}
