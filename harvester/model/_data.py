"""A Run's plain-dict form, ``RunData``: what capture, ingest and the store hand each other.

The hook and the ingest workers read, redact and store runs in this form, never building the
pydantic model (validating and serializing it costs more than reading the run). It is exactly
``Run.to_data()`` (the model's JSON form), and ``Run.from_data`` is the one way back; this module
imports no pydantic, so the production hook loads none. ``requested_tools`` and ``blocked_tools``
are derived from ``calls`` and present only where a reader sees them (the store's JSON).
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

from typing_extensions import NotRequired

__all__ = [
    "NOT_RUN",
    "STOPS",
    "CallData",
    "CallStatus",
    "ErrorData",
    "LlmCallData",
    "McpToolData",
    "MessageData",
    "ModelAnswerData",
    "ModelRequestData",
    "RequestData",
    "RunData",
    "Stop",
    "ToolSpecData",
    "UsageData",
    "data_failed",
]

Stop = Literal["answered", "error", "deferred", "budget_exceeded", "max_steps", "loop_detected", "unknown"]
STOPS: tuple[str, ...] = Stop.__args__  # type: ignore[attr-defined]
# ok / error: it executed. blocked: requested and denied (a guardrail, a human, invalid args): it never ran.
# awaiting: requested and waiting for a human (an approval, an external result) when the run stopped deferred.
CallStatus = Literal["ok", "error", "blocked", "awaiting"]
NOT_RUN: tuple[str, ...] = ("blocked", "awaiting")  # statuses of calls whose tool body never ran


class ErrorData(TypedDict):
    type: str
    message: str


class UsageData(TypedDict):
    input_tokens: int | None  # None: the spans did not say (unknown is not zero)
    output_tokens: int | None


class CallData(TypedDict):
    name: str
    call_id: str | None
    args: Any
    status: CallStatus
    result: Any
    error: ErrorData | None
    truncated: bool


class RequestData(TypedDict):
    name: str
    call_id: str | None
    args: Any


class MessageData(TypedDict):
    """One message of the conversation before a turn (OpenAI-like; system messages are left out)."""

    role: str  # user, assistant, tool
    content: str | None
    tool_calls: list[RequestData]  # what an assistant message asked for
    tool_call_id: str | None  # the call a tool message answers


class ToolSpecData(TypedDict):
    """A tool the model was offered: its name, description and JSON schema of its arguments."""

    name: str
    description: str | None
    parameters: dict[str, Any] | None  # None: the recording does not say


class ModelRequestData(TypedDict):
    """What one model call received, in one form for every framework and convention: a recorded-model
    replay compares the agent's request with the recorded one step by step (``model_input_changed``).

    ``system``: the system prompt or instructions, joined (None: none, or not recorded). ``messages``: the
    conversation the model saw, system messages left out. ``tools``: the tools offered (None: the
    recording does not say; []: none). ``settings``: the request settings that shape the answer
    (temperature, top_p, max_tokens, seed, response format, tool choice), by their OpenAI names.
    ``model``: the model asked for, as the request named it (absent or None: not said).
    """

    system: str | None
    messages: list[MessageData]
    tools: list[ToolSpecData] | None
    settings: dict[str, Any]
    model: NotRequired[str | None]


class ModelAnswerData(TypedDict):
    """What one model call answered: served back as that framework's own response in a recorded replay."""

    text: str | None
    tool_calls: list[RequestData]
    finish_reason: str | None
    usage: UsageData
    model: str | None


class LlmCallData(TypedDict):
    model: str | None
    usage: UsageData
    requests: list[RequestData]
    finish_reason: str | None
    server: str | None
    provider: str | None
    # What it was asked (None: content capture off, or the span does not say) and answered (its text);
    # whether the answer was streamed, and whether a payload of it was cut (not servable as recorded).
    # Absent in runs stored before the recorded model (issue 30).
    request: NotRequired[ModelRequestData | None]
    text: NotRequired[str | None]
    streamed: NotRequired[bool]
    truncated: NotRequired[bool]


class McpToolData(TypedDict):
    """A tool an MCP server offered the model, as the recording saw it (see ``McpTool``)."""

    name: str
    toolset: str | None
    description: str | None
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None
    annotations: dict[str, Any] | None
    meta: dict[str, Any] | None


class RunData(TypedDict):
    trace_id: str
    run_id: str
    agent: str | None
    model: str | None
    prompt: str | None
    answer: str | None
    stop: Stop
    error: ErrorData | None
    calls: list[CallData]
    llm_calls: list[LlmCallData]
    usage: UsageData
    cost: float | None
    started_at: str | None
    duration_ms: float | None
    content_captured: bool
    feedback: str | None
    source: str | None
    # The conversation before this turn (None: the spans do not say; []: the turn began it).
    history: NotRequired[list[MessageData] | None]
    # Every agent that ran in the run, its own first, then handoff targets and managed agents.
    agents: NotRequired[list[str]]
    # The tools MCP servers offered the model (a replay lists them from here, not from the server).
    mcp_tools: NotRequired[list[McpToolData]]
    # The instrumentation scopes that traced its model calls (an SDK instrumentor: replay turns it on).
    instrumentation: NotRequired[list[str]]
    # Why the run may lack spans it produced (``queue_full``: capture dropped one of its trace's spans);
    # absent in a run stored whole, and in runs stored before issue 31.
    incomplete: NotRequired[str]
    requested_tools: NotRequired[list[str]]
    blocked_tools: NotRequired[list[str]]


def data_failed(data: RunData) -> bool:
    """``Run.failed`` of a run's plain-dict form."""
    return (
        data["stop"] != "answered" or any(c["status"] != "ok" for c in data["calls"]) or data["feedback"] == "negative"
    )
