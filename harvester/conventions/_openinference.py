"""OpenInference (Arize): the OpenAI Agents SDK, smolagents and LangChain under ``openinference-*``.

``openinference.span.kind`` says AGENT / LLM / TOOL / CHAIN; payloads are ``input.value`` /
``output.value``; a model call's messages are flattened into ``llm.input_messages.N.*`` and
``llm.output_messages.N.message.tool_calls.M.tool_call.*``, its tokens into ``llm.token_count.*``.
What each framework adds (a handoff span, an approval, an answer tool, an agent span's name) is its
own module's (``_frameworks``), asked here; LangChain's agent payloads are graph states.
"""

from __future__ import annotations

from typing import Any

from ..model import MessageData, ModelRequestData
from ..spans import SpanData
from . import _frameworks
from ._genai import agent_name as _named
from ._history import message_said, openinference_messages
from ._readings import AgentReading, LlmReading, ToolReading, payload_reading, tool_reading
from ._requests import model_request, tool_specs
from ._values import MISSING, USER_ROLES, count, endpoint, loads, structured, text, tool_call_indices

__all__ = ["agent_name", "llm_first_user", "llm_messages", "llm_request", "read_agent", "read_llm", "read_tool"]


def read_llm(span: SpanData) -> LlmReading:
    a = span.attributes
    out = LlmReading(
        span,
        model=text(a.get("llm.model_name")),
        input_tokens=count(a.get("llm.token_count.prompt")),
        output_tokens=count(a.get("llm.token_count.completion")),
        finish=text(a.get("llm.finish_reason")),
        server=endpoint(a.get("server.address"), a.get("server.port")),
        provider=text(a.get("llm.provider")) or text(a.get("llm.system")),
    )
    at = tool_call_indices(a)
    n = 0
    while f"llm.output_messages.{n}.message.role" in a or f"llm.output_messages.{n}.message.content" in a:
        base = f"llm.output_messages.{n}.message."
        said = message_said(a, base)
        if said is not None:
            out.text = said
        for m in at.get(base + "tool_calls.", ()):
            tc = base + f"tool_calls.{m}.tool_call."
            if tc + "function.name" in a:
                args, cut = structured(a.get(tc + "function.arguments"))
                out.truncated |= cut
                out.requests.append((text(a.get(tc + "function.name")) or "", text(a.get(tc + "id")), args))
        n += 1
    params = loads(a.get("llm.invocation_parameters"))
    params = params if isinstance(params, dict) else {}
    out.request = llm_request(a, params, at)
    out.streamed = params.get("stream") is True
    return out


def llm_request(
    a: dict[str, Any], params: dict[str, Any], at: dict[str, list[int]] | None = None
) -> ModelRequestData | None:
    """What a model call was asked: ``llm.input_messages.N.message.*`` (system ones lifted out),
    ``llm.tools.N.tool.json_schema`` (None when no tool is listed: not recorded is not none offered),
    the settings in ``llm.invocation_parameters`` and the model asked for (``llm.request.model_name``,
    else the invocation parameters' ``model``; never ``llm.model_name``, which may be the answer's).
    None when the messages were not captured."""
    messages = openinference_messages(a, at)
    if messages is None:
        return None
    tools, n = [], 0
    while f"llm.tools.{n}.tool.json_schema" in a:
        tools.append(a[f"llm.tools.{n}.tool.json_schema"])
        n += 1
    asked = text(a.get("llm.request.model_name")) or text(params.get("model")) or text(params.get("model_name"))
    return model_request(messages, tools=tool_specs(tools) if tools else None, settings=params, model=asked)


def llm_first_user(span: SpanData) -> str | None:
    a = span.attributes
    # openai-agents keeps index 0 for the system instructions: without them the messages start at 1
    n = 0 if "llm.input_messages.0.message.role" in a else 1
    found = None
    while f"llm.input_messages.{n}.message.role" in a:
        if a[f"llm.input_messages.{n}.message.role"] in USER_ROLES:
            said = message_said(a, f"llm.input_messages.{n}.message.")
            if said:
                found = said
        n += 1
    return found


def llm_messages(span: SpanData) -> list[MessageData] | None:
    """The messages a model call was given, in the neutral form (``_history``)."""
    return openinference_messages(span.attributes)


def read_tool(span: SpanData) -> ToolReading:
    a = span.attributes
    name = text(a.get("tool.name")) or text(span.name) or ""
    raw_args, raw_result = a.get("input.value", MISSING), a.get("output.value", MISSING)
    name, raw_args, raw_result = _frameworks.tool_span(span, name, raw_args, raw_result)
    reading = tool_reading(span, name, None, raw_args, raw_result)
    _frameworks.read_tool(span, reading, raw_result)
    return reading


def read_agent(span: SpanData) -> AgentReading:
    a = span.attributes
    return payload_reading(a.get("input.value", MISSING), a.get("output.value", MISSING))


def agent_name(span: SpanData, *, span_name: bool = True) -> str | None:
    name = _named(span) or text(span.attributes.get("agent.name"))
    if name or not span_name:
        return name
    name = text(span.name)
    return _frameworks.agent_span_name(span, name) if name else name
