"""OpenTelemetry's GenAI semantic conventions: pydantic-ai, and harvester's own ``agent_run``/``@tool``.

``invoke_agent`` / ``chat`` / ``execute_tool`` spans (``gen_ai.operation.name``), messages as
``gen_ai.input.messages`` / ``gen_ai.output.messages`` parts, tool calls as ``gen_ai.tool.*``, tokens as
``gen_ai.usage.*``. pydantic-ai's older data formats (2 and 3) and the indexed ``gen_ai.prompt.N`` /
``gen_ai.completion.N`` keys of older OpenLLMetry instrumentors are read here too.
"""

from __future__ import annotations

from typing import Any

import orjson

from ..model import McpToolData, MessageData, ModelRequestData, ToolSpecData
from ..spans import SpanData
from ._history import genai_messages
from ._readings import AgentReading, LlmReading, ToolReading, tool_reading
from ._requests import message_text, model_request, tool_specs
from ._values import (
    MISSING,
    USER_ROLES,
    count,
    endpoint,
    first_user,
    last_user,
    loads,
    structured,
    text,
    to_int,
    tool_call_indices,
)

__all__ = [
    "agent_name",
    "llm_first_user",
    "llm_messages",
    "llm_request",
    "mcp_tools",
    "output_tools",
    "read_agent",
    "read_llm",
    "read_tool",
]

# The metadata pydantic-ai's MCP toolset gives each tool it lists (pydantic-ai tells MCP tools by it too).
_MCP_METADATA = frozenset({"meta", "annotations", "task"})


def read_llm(span: SpanData) -> LlmReading:
    a = span.attributes
    out = LlmReading(
        span,
        model=text(a.get("gen_ai.response.model")) or text(a.get("gen_ai.request.model")),
        input_tokens=count(a.get("gen_ai.usage.input_tokens", a.get("gen_ai.usage.prompt_tokens"))),
        output_tokens=count(a.get("gen_ai.usage.output_tokens", a.get("gen_ai.usage.completion_tokens"))),
        server=endpoint(a.get("server.address"), a.get("server.port")),
        provider=text(a.get("gen_ai.provider.name")) or text(a.get("gen_ai.system")),
    )
    out.request, out.truncated = llm_request(a)
    out.streamed = a.get("gen_ai.request.stream") is True or a.get("llm.is_streaming") is True
    reasons = a.get("gen_ai.response.finish_reasons")
    if isinstance(reasons, list) and reasons and isinstance(reasons[0], str):
        out.finish = reasons[0]
    if "gen_ai.output.messages" not in a and "gen_ai.completion.0.role" in a:
        _read_legacy_completion(a, out)
        return out
    messages = loads(a.get("gen_ai.output.messages"))
    out.truncated |= _cut(a.get("gen_ai.output.messages"), messages)
    if isinstance(messages, list):
        for msg in messages:
            if not isinstance(msg, dict):
                continue
            if out.finish is None and isinstance(msg.get("finish_reason"), str) and msg["finish_reason"]:
                out.finish = msg["finish_reason"]
            for part in msg.get("parts") or ():
                if not isinstance(part, dict):
                    continue
                ptype = part.get("type")
                if ptype == "tool_call":
                    args = part.get("arguments", MISSING)
                    if args is MISSING:
                        out.hidden = True
                        args = None
                    elif not isinstance(args, dict):
                        args, cut = structured(args)
                        out.truncated |= cut
                    out.requests.append((text(part.get("name")) or "", text(part.get("id")), args))
                elif ptype == "text":
                    if "content" in part:
                        out.text = text(part.get("content"))
                    else:
                        out.hidden = True
    return out


# GenAI request settings (``gen_ai.request.<name>``) by their OpenAI names.
_SETTINGS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "max_tokens": "max_tokens",
    "seed": "seed",
    "stop_sequences": "stop",
}


def llm_request(a: dict[str, Any]) -> tuple[ModelRequestData | None, bool]:
    """What a model call was asked, and whether its input payload was cut. GenAI semconv keeps it in
    ``gen_ai.input.messages`` + ``gen_ai.system_instructions`` + ``gen_ai.tool.definitions`` (pydantic-ai:
    its ``model_request_parameters`` too) + ``gen_ai.request.*``; older OpenLLMetry instrumentors in
    ``gen_ai.prompt.N.*`` + ``llm.request.functions.N.*``. None when the messages were not captured."""
    raw = a.get("gen_ai.input.messages")
    messages = genai_messages(a)
    if messages is None:
        return None, _cut(raw, loads(raw))
    system = loads(a.get("gen_ai.system_instructions"))
    said = message_text(system) if isinstance(system, list) else text(a.get("gen_ai.system_instructions"))
    settings = {v: a[f"gen_ai.request.{k}"] for k, v in _SETTINGS.items() if f"gen_ai.request.{k}" in a}
    asked = text(a.get("gen_ai.request.model"))
    return model_request(
        messages, system=[said] if said else (), tools=_tools(a), settings=settings, model=asked
    ), False


def _cut(raw: Any, parsed: Any) -> bool:
    """A JSON payload that does not parse: the producer cut it at the attribute length limit."""
    return parsed is MISSING and isinstance(raw, str) and raw.lstrip()[:1] in ("[", "{")


def _tools(a: dict[str, Any]) -> list[ToolSpecData] | None:
    """The tools offered: ``gen_ai.tool.definitions``, pydantic-ai's ``model_request_parameters`` (function
    and output tools), OpenLLMetry's ``llm.request.functions.N.*``; None when the span does not say."""
    defined = loads(a.get("gen_ai.tool.definitions"))
    if isinstance(defined, list):
        return tool_specs(defined)
    params = loads(a.get("model_request_parameters"))
    if isinstance(params, dict):
        return tool_specs([*(params.get("function_tools") or ()), *(params.get("output_tools") or ())])
    if "llm.request.functions.0.name" not in a:
        return None
    found, n = [], 0
    while f"llm.request.functions.{n}.name" in a:
        base = f"llm.request.functions.{n}."
        found.append({k: a.get(base + k) for k in ("name", "description", "parameters")})
        n += 1
    return tool_specs(found)


def _read_legacy_completion(a: dict[str, Any], out: LlmReading) -> None:
    """The indexed ``gen_ai.completion.N.*`` keys of older OpenLLMetry instrumentors (OpenAI, Anthropic...)."""
    at = tool_call_indices(a)
    n = 0
    while f"gen_ai.completion.{n}.role" in a:
        base = f"gen_ai.completion.{n}."
        if isinstance(a.get(base + "content"), str) and a[base + "content"]:
            out.text = text(a[base + "content"])
        if out.finish is None and isinstance(a.get(base + "finish_reason"), str):
            out.finish = a[base + "finish_reason"]
        for m in at.get(base + "tool_calls.", ()):
            tc = f"{base}tool_calls.{m}."
            if tc + "name" in a:
                args, cut = structured(a.get(tc + "arguments"))
                out.truncated |= cut
                out.requests.append((text(a.get(tc + "name")) or "", text(a.get(tc + "id")), args))
        n += 1


def llm_first_user(span: SpanData) -> str | None:
    """The user message a model call answered (its last one: earlier turns are history)."""
    a = span.attributes
    messages = loads(a.get("gen_ai.input.messages"))
    if isinstance(messages, list):
        return last_user(messages)
    n = 0  # older OpenLLMetry: gen_ai.prompt.N.role / .content
    while f"gen_ai.prompt.{n}.role" in a:
        if a[f"gen_ai.prompt.{n}.role"] in USER_ROLES and text(a.get(f"gen_ai.prompt.{n}.content")):
            return text(a.get(f"gen_ai.prompt.{n}.content"))
        n += 1
    return None


def llm_messages(span: SpanData) -> list[MessageData] | None:
    """The messages a model call was given, in the neutral form (``_history``)."""
    return genai_messages(span.attributes)


def output_tools(span: SpanData) -> set[str]:
    """pydantic-ai's output tools (``final_result``): requested by the model, the answer, not a call."""
    params = loads(span.attributes.get("model_request_parameters"))
    if isinstance(params, dict) and isinstance(params.get("output_tools"), list):
        return {t["name"] for t in params["output_tools"] if isinstance(t, dict) and isinstance(t.get("name"), str)}
    return set()


def mcp_tools(span: SpanData) -> list[McpToolData]:
    """The MCP servers' tools a pydantic-ai model call was offered (``model_request_parameters``)."""
    raw = span.attributes.get("model_request_parameters")
    if not isinstance(raw, str) or '"annotations"' not in raw:  # no MCP tool: skip the parse
        return []
    params = loads(raw)
    tools = params.get("function_tools") if isinstance(params, dict) else None
    out: list[McpToolData] = []
    for t in tools if isinstance(tools, list) else ():
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            continue
        meta = t.get("metadata")
        if not isinstance(meta, dict) or not _MCP_METADATA <= meta.keys():
            continue
        out.append(
            {
                "name": t["name"],
                "toolset": text(t.get("toolset_id")),
                "description": text(t.get("description")),
                "input_schema": _object(t.get("parameters_json_schema")) or {},
                "output_schema": _object(t.get("return_schema")),
                "annotations": _object(meta.get("annotations")),
                "meta": _object(meta.get("meta")),
            }
        )
    return out


def _object(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def read_tool(span: SpanData) -> ToolReading:
    a = span.attributes
    name = text(a.get("gen_ai.tool.name")) or text(a.get("traceloop.entity.name")) or text(span.name) or ""
    # pydantic-ai's data formats 2 and 3 say tool_arguments / tool_response.
    raw_args = a.get("gen_ai.tool.call.arguments", a.get("traceloop.entity.input", a.get("tool_arguments", MISSING)))
    raw_result = a.get("gen_ai.tool.call.result", a.get("traceloop.entity.output", a.get("tool_response", MISSING)))
    msg = a.get("logfire.msg")
    if (
        isinstance(msg, str)
        and msg.startswith("running output function")
        and isinstance(raw_args, str)
        and raw_args[:1] == '"'
    ):
        # A text output function (TextOutput(fn)): code of the app's, a call; its input is the model's
        # text, written as a JSON string.
        raw_args = loads(raw_args)
    return tool_reading(span, name, text(a.get("gen_ai.tool.call.id")), raw_args, raw_result)


def read_agent(span: SpanData) -> AgentReading:
    a = span.attributes
    out = AgentReading()
    messages = loads(a.get("pydantic_ai.all_messages"))
    if isinstance(messages, list):
        new = to_int(a.get("pydantic_ai.new_message_index"))
        out.prompt = (first_user(messages[new:]) if 0 < new < len(messages) else None) or first_user(messages)
    if "gen_ai.input.messages" in a and out.prompt is MISSING:
        msgs = loads(a.get("gen_ai.input.messages"))
        out.prompt = last_user(msgs) if isinstance(msgs, list) else MISSING  # earlier turns come before it
    final = a.get("final_result", a.get("gen_ai.agent.output", MISSING))
    if final is not MISSING:
        value, _ = structured(final)
        if (
            isinstance(value, dict)
            and ("approvals" in value or "calls" in value)
            and set(value) <= {"calls", "approvals", "metadata", "_kinds", "validated_args"}  # 2.7x adds the last
        ):
            out.deferred = bool(value.get("approvals") or value.get("calls"))
            out.answer = None
        elif isinstance(final, (str, bytes)):
            out.answer = text(final)  # structured output stays the JSON text the agent returned
        elif value is not None:
            out.answer = orjson.dumps(value).decode()
    return out


def agent_name(span: SpanData, *, span_name: bool = True) -> str | None:
    a = span.attributes
    return text(a.get("gen_ai.agent.name")) or text(a.get("agent_name")) or text(a.get("traceloop.entity.name"))
