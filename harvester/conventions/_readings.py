"""What a convention reader makes of one span, handed to the assembly: typed, one object per span.

``LlmReading`` (a model call), ``ToolReading`` (a tool call), ``AgentReading`` (what an agent span says
of its prompt and answer). The assembly may adjust a reading (pair a tool call with the request it
answers, mark an approval-pending call blocked), never the span.

Also here, the readers every convention shares because they go by a payload's shape, not by who
wrote it: a tool call's arguments and result (``tool_reading``: serialized tool messages, and a
framework's own forms, ``_frameworks``) and an agent's input and
output (``payload_reading``: a LangChain state, a framework's own form, either way).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from ..model import ModelRequestData
from ..spans import SpanData
from . import _frameworks
from ._errors import deferral, error_of
from ._values import MISSING, Bare, first_user, last_ai, last_user, messages_of, placeholder, structured, text

__all__ = ["AgentReading", "LlmReading", "Request", "ToolReading", "payload_reading", "tool_reading"]

Request = tuple[str, str | None, Any]  # a tool call a model asked for: (name, call id, args)


@dataclass(slots=True)
class LlmReading:
    span: SpanData
    model: str | None = None
    input_tokens: int | None = None  # None: the span does not say (never read as 0)
    output_tokens: int | None = None
    requests: list[Request] = field(default_factory=list)
    text: str | None = None
    hidden: bool = False  # content capture was off: what the model said is unknown
    finish: str | None = None
    server: str | None = None  # the endpoint it called, "host" or "host:port" (GenAI ``server.address``)
    provider: str | None = None  # ``gen_ai.provider.name`` / ``gen_ai.system`` / OpenInference ``llm.provider``
    request: ModelRequestData | None = None  # what it was asked (None: not captured, or the span does not say)
    streamed: bool = False  # the span says the answer was streamed
    truncated: bool = False  # a payload of it was cut (the attribute length limit): not servable as recorded


@dataclass(slots=True)
class ToolReading:
    span: SpanData
    name: str
    call_id: str | None
    args: Any  # a dict, a ``Bare`` value, or MISSING (not captured)
    result: Any
    status: str  # ok | error | blocked
    error: dict[str, str] | None
    truncated: bool
    hidden: bool
    awaiting: bool = False  # openai-agents: input, no output yet (waiting for an approval)
    answer_tool: bool = False  # the agent's way of answering (smolagents' final_answer), not a call


@dataclass(slots=True)
class AgentReading:
    """What an agent span states: MISSING where it says nothing."""

    prompt: Any = MISSING
    answer: Any = MISSING
    deferred: bool = False
    history_user: str | None = None  # the first user message of a conversation state it returned
    structured: Any = MISSING  # a structured response (LangChain ``response_format``)
    requested: dict[str, Any] = field(default_factory=dict)  # call id -> args, of the calls in that state


def _unwrap_tool_message(v: Any) -> tuple[Any, str | None, str | None]:
    """A serialized LangChain ToolMessage (either form, or inside OpenLLMetry's ``output``) -> (content, id, status)."""
    if not isinstance(v, dict):
        return v, None, None
    if isinstance(v.get("output"), dict) and len(v) <= 2:  # OpenLLMetry: {"output": <ToolMessage>, "kwargs": {...}}
        v = v["output"]
    body = None
    if v.get("lc") == 1 and isinstance(v.get("kwargs"), dict) and v["kwargs"].get("type") == "tool":
        body = v["kwargs"]
    elif v.get("type") == "tool" and isinstance(v.get("data"), dict):
        body = v["data"]
    if body is None:
        return v, None, None
    content = body.get("content")
    if isinstance(content, str):
        content, _ = structured(content)
    return content, text(body.get("tool_call_id")), text(body.get("status"))


def tool_reading(span: SpanData, name: str, call_id: str | None, raw_args: Any, raw_result: Any) -> ToolReading:
    """A tool span's reading from its name, id and raw payloads, whoever wrote them."""
    truncated = False
    msg_status = None
    hidden = raw_args is MISSING or placeholder(raw_args)
    args: Any = MISSING
    if not hidden:
        parsed, cut = structured(raw_args)
        truncated |= cut
        if isinstance(parsed, dict):
            own = _frameworks.tool_input(parsed, call_id)  # a framework's own form (a LangChain callback)
            if own is None:
                args = parsed
            else:
                args, call_id = own
        elif parsed is not None:
            args = Bare(parsed)
    result: Any = None
    if raw_result is not MISSING and not placeholder(raw_result):
        result, cut = structured(raw_result)
        truncated |= cut
        result, msg_id, msg_status = _unwrap_tool_message(result)
        call_id = call_id or msg_id
    elif span.status != "ERROR" and placeholder(raw_result):
        hidden = True
    status, error = "ok", None
    if span.attributes.get("pydantic_ai.tool.deferral.name") is not None or (span.events and deferral(span)):
        status = "awaiting"  # paused for approval / external execution: requested, never ran (yet)
    elif span.status == "ERROR":
        status, error = "error", error_of(span)
    elif msg_status == "error":  # the tool caught its own error and returned it (handle_tool_error)
        status, error = "error", {"type": "ToolException", "message": result if isinstance(result, str) else ""}
    return ToolReading(span, name, call_id, args, result if status == "ok" else None, status, error, truncated, hidden)


def _state_tool_calls(messages: list[Any]) -> dict[str, Any]:
    """call id -> args of the tool calls in a LangChain state's AI messages (either serialized form).

    A run resumed after a human approved (or edited) a call has the model's request in the trace
    before it; the resumed state still holds it, so the call's args are known by its id.
    """
    out: dict[str, Any] = {}
    for m in messages:
        if not isinstance(m, dict):
            continue
        body = m["data"] if isinstance(m.get("data"), dict) else m["kwargs"] if isinstance(m.get("kwargs"), dict) else m
        for tc in body.get("tool_calls") or ():
            if isinstance(tc, dict) and isinstance(tc.get("id"), str) and isinstance(tc.get("args"), dict):
                out[tc["id"]] = tc["args"]
    return out


def _structured_response(payload: Any) -> Any:
    """LangChain's ``structured_response`` in an agent's output state (OpenLLMetry wraps it in ``outputs``)."""
    for state in (payload, payload.get("outputs") if isinstance(payload, dict) else None):
        if isinstance(state, dict) and state.get("structured_response") is not None:
            return state["structured_response"]
    return MISSING


def payload_reading(raw_in: Any, raw_out: Any) -> AgentReading:
    """An agent span's reading from its input and output payloads (a string, a task, a LangChain state)."""
    out = AgentReading()
    if raw_in is not MISSING and not placeholder(raw_in):
        value, _ = structured(raw_in)
        if isinstance(value, str):
            out.prompt = value
        elif isinstance(value, dict) and (own := _frameworks.agent_prompt(value)) is not MISSING:
            out.prompt = own  # a framework's own form (smolagents' task)
        else:
            messages = messages_of(value)
            if messages is not None:
                out.prompt = last_user(messages)
    if raw_out is not MISSING and not placeholder(raw_out):
        value, _ = structured(raw_out)
        if isinstance(value, str):
            out.answer = value
        elif isinstance(value, dict) and (own := _frameworks.agent_answer(value)) is not MISSING:
            out.answer = own  # a framework's own form (an event)
        else:
            messages = messages_of(value)
            if messages is not None:
                ends_ai, said = last_ai(messages)
                out.answer = said if ends_ai else None
                out.history_user = first_user(messages)
                out.requested = _state_tool_calls(messages)
            response = _structured_response(value)
            if response is not MISSING:  # LangChain response_format: the answer is the structured response
                out.structured = response
                out.answer = orjson.dumps(response).decode()
    return out
