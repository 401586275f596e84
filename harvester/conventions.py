"""Spans to ``Run``s: the readers for OTel GenAI semconv, OpenInference and OpenLLMetry.

One run per OUTERMOST agent span of a trace: agent spans nested inside it (openai-agents, OpenLLMetry's
``invoke_agent`` > ``<name>.workflow``, a sub-agent) fold into the same run. A trace without an agent span
yields no run: without the invocation root there is no run boundary, no prompt and no stop to trust.

The same key means different things per producer (``gen_ai.tool.call.arguments`` is the args object in
pydantic-ai and a callback payload in OpenLLMetry), so each payload is read by its shape as well as its
producer. Everything here is plain dicts and at most one ``orjson.loads`` per payload: ingest runs this on
every captured trace. Nothing raises on odd input: a payload that does not parse is a string, a value of
the wrong type is ignored, a span of no known convention is skipped.
"""

from __future__ import annotations

import ast
import logging
import re
from bisect import bisect_right
from datetime import datetime, timezone
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence

import orjson

from .model import STOPS, Run
from .spans import SpanData, from_readable, span_from_otlp, spans_from_otlp

log = logging.getLogger(__name__)

OI_KIND = "openinference.span.kind"
TL_KIND = "traceloop.span.kind"
GENAI_OP = "gen_ai.operation.name"
# Attributes an app (or `harvester incident`) sets on any span of a run to flag it.
FEEDBACK_KEYS = ("harvester.feedback", "user.feedback", "feedback")
NEGATIVE = frozenset({"negative", "thumbs_down", "thumbs-down", "down", "bad", "-1", "false"})
POSITIVE = frozenset({"positive", "thumbs_up", "thumbs-up", "up", "good", "1", "true"})
# Placeholders producers write when content capture is off.
PLACEHOLDERS = frozenset({"__REDACTED__", "<redacted>", "[REDACTED]", "REDACTED"})
# Exceptions that pause a run for a human rather than fail it.
DEFERRALS = frozenset({"GraphInterrupt", "NodeInterrupt", "Interrupt", "ApprovalRequired", "CallDeferred"})
STOP_KEY = "harvester.stop"
LIMIT_STOPS = {"UsageLimitExceeded": "budget_exceeded", "GraphRecursionError": "max_steps",
               "MaxTurnsExceeded": "max_steps", "AgentMaxStepsError": "max_steps",
               "ModelCallLimitExceededError": "max_steps", "ToolCallLimitExceededError": "max_steps"}
# LangChain's call-limit middleware with exit_behavior="end" ends the run on a message of its own,
# which no model wrote: the run stopped on a limit, whatever the message says.
_LIMIT_ANSWERS = ("Model call limits exceeded", "Tool call limit reached", "Tool call limits exceeded")
# Error messages that say what stopped a run when no exception event does.
_ERROR_MESSAGES = (("Max turns exceeded", "MaxTurnsExceeded"),
                   ("Guardrail tripwire triggered", "GuardrailTripwireTriggered"))
_RUN_STOPPERS = tuple(prefix for prefix, _ in _ERROR_MESSAGES)
LLM_OPS = frozenset({"chat", "text_completion", "generate_content", "completion", "responses"})
_OI_ROLES = {"AGENT": "agent", "LLM": "llm", "TOOL": "tool"}
_TL_ROLES = {"workflow": "agent", "agent": "agent", "tool": "tool"}
_USER_ROLES = frozenset({"user", "human"})
_AI_ROLES = frozenset({"assistant", "ai", "model"})

_MISSING: Any = object()
HANDOFF_PREFIX = "handoff to "


def handoff_tool_name(agent: str) -> str:
    """openai-agents' default tool name for a handoff to ``agent`` (``Handoff.default_tool_name``)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", re.sub(r"\s", "_", f"transfer_to_{agent}")).lower()


class _Bare:
    """A tool input that is not an object (a one-argument LangChain tool logs the value alone)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def _placeholder(v: Any) -> bool:
    return type(v) is str and v in PLACEHOLDERS


# -- classification -------------------------------------------------------------------------------
def is_agent_span(span: Any) -> bool:
    """True for an agent invocation root; the capture processor calls it on every span ending."""
    a = span.attributes
    if not a:
        return False
    kind = a.get(OI_KIND)
    if kind is not None:
        return kind == "AGENT"
    kind = a.get(TL_KIND)
    if kind is not None:
        return kind == "workflow" or kind == "agent"
    return a.get(GENAI_OP) == "invoke_agent"


def may_hold_run(span: Any) -> bool:
    """True for a span whose trace may hold a run: an agent span, or an OpenInference CHAIN.

    OpenInference's LangChain instrumentor marks a graph AGENT only when its name contains "agent":
    ``create_agent(model, tools)`` is a CHAIN named "LangGraph". Such a chain becomes the run's root
    when it is the outermost OpenInference span and a model call runs under it (``_promote_chains``).
    """
    if is_agent_span(span):
        return True
    a = span.attributes
    return bool(a) and a.get(OI_KIND) == "CHAIN"


def _promote_chains(by_id: Mapping[str, SpanData], roles: dict[str, tuple[str, str]]) -> None:
    """Make the outermost OpenInference CHAIN above an agent's work the agent root (see ``may_hold_run``).

    Only a chain with no OpenInference span above it (nested chains are graph nodes; a LangGraph
    ReAct agent's model node is even named "agent"), with no AGENT span between it and the work (a
    named agent inside an outer graph stays its own run), and only over an agent's work: a model call
    AND a tool span or a requested tool call. A plain chain (prompt | llm | parser) is no agent run.
    """
    model: set[str] = set()
    tools: set[str] = set()
    for sid, (source, role) in roles.items():
        if source != "openinference" or role not in ("llm", "tool"):
            continue
        top = _chain_top(sid, by_id, roles)
        if top is None:
            continue
        if role == "tool":
            tools.add(top)
        else:
            model.add(top)
            if any(".tool_calls." in k for k in by_id[sid].attributes):
                tools.add(top)
    for sid in model & tools:
        roles[sid] = ("openinference", "agent")


def ancestors(span: SpanData, by_id: Mapping[str, SpanData]) -> Iterator[str]:
    """The ids of the spans above ``span`` that ``by_id`` holds, nearest first (bounded: ids can loop)."""
    parent, hops = span.parent_id, 0
    while parent in by_id and hops < 10_000:
        yield parent
        parent, hops = by_id[parent].parent_id, hops + 1


def _chain_top(sid: str, by_id: Mapping[str, SpanData], roles: Mapping[str, tuple[str, str]]) -> Optional[str]:
    """The outermost OpenInference span above ``sid`` if it is a CHAIN and no agent span is in between."""
    top = None
    for parent in ancestors(by_id[sid], by_id):
        source, role = roles[parent]
        if source != "openinference":
            break
        if role == "agent":
            return None
        top = parent
    if top is not None and roles[top][1] == "other" and by_id[top].attributes.get(OI_KIND) == "CHAIN":
        return top
    return None


def _classify(span: SpanData) -> tuple[str, str]:
    """(source, role): role is agent | llm | tool | other; source is "" for a span of no known convention."""
    a = span.attributes
    kind = a.get(OI_KIND)
    if kind is not None:
        return "openinference", _OI_ROLES.get(kind, "other") if type(kind) is str else "other"
    scope = span.scope if type(span.scope) is str else ""
    kind = a.get(TL_KIND)
    op = a.get(GENAI_OP)
    traceloop = kind is not None or "traceloop.workflow.name" in a or scope.startswith("opentelemetry.instrumentation.")
    if type(kind) is str and kind in _TL_ROLES:
        return "openllmetry", _TL_ROLES[kind]
    if type(op) is str:
        source = "openllmetry" if traceloop else ("harvester" if scope.startswith("harvester") else "genai")
        if op == "invoke_agent":
            return source, "agent"
        if op == "execute_tool":
            return source, "tool"
        if op in LLM_OPS:
            return source, "llm"
        return source, "other"
    if traceloop:
        return "openllmetry", "llm" if a.get("llm.request.type") == "chat" else "other"
    return "", "other"


# -- small readers ----------------------------------------------------------------------------------
def _text(v: Any) -> Optional[str]:
    """A string fit for a Run: bytes decoded, lone surrogates replaced (orjson refuses them later)."""
    if type(v) is str and v.isascii():  # almost every value: no copy to find out
        return v
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if not isinstance(v, str):
        return None
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates, from a lenient decode upstream
        return "".join("\ufffd" if "\ud800" <= ch <= "\udfff" else ch for ch in v)
    return v


def _loads(v: Any) -> Any:
    """Parse a JSON payload once; anything that is not valid JSON text comes back as ``_MISSING``."""
    if isinstance(v, (str, bytes)) and v:
        try:
            return orjson.loads(v)
        except (orjson.JSONDecodeError, TypeError):
            return _MISSING
    return _MISSING


def _structured(v: Any) -> tuple[Any, bool]:
    """A payload as its JSON object/array when it is one, else the string; plus "looked cut off"."""
    if isinstance(v, (dict, list)):
        return v, False
    s = _text(v)
    if s is None:
        return (v if isinstance(v, (int, float, bool)) else None), False
    head = s.lstrip()[:1]
    if head == "{" or head == "[":
        parsed = _loads(s)
        if parsed is _MISSING:
            return s, True  # an object that does not close: the producer truncated it
        return parsed, False
    return s, False


def _int(v: Any) -> int:
    """A count (tokens, an index): 0 unless it is one, within 0..2**53 (a float's exact range)."""
    if type(v) is int:
        n = v
    elif type(v) is float or type(v) is str:
        try:
            n = int(float(v))
        except (ValueError, OverflowError):
            return 0
    else:
        return 0
    return n if 0 <= n <= 1 << 53 else 0


def _short_type(t: Any) -> str:
    s = _text(t) or "Error"
    return s.rsplit(".", 1)[-1] or "Error"


def _exception(span: SpanData) -> Optional[tuple[str, str]]:
    for e in span.events or ():
        if isinstance(e, dict) and e.get("name") == "exception":
            ea = e.get("attributes") or {}
            if isinstance(ea, dict):
                return _short_type(ea.get("exception.type")), _text(ea.get("exception.message")) or ""
    return None


def _error_of(span: SpanData) -> dict[str, str]:
    exc = _exception(span)
    if exc is not None:
        return {"type": exc[0], "message": exc[1]}
    msg = _text(span.status_message) or ""
    etype = span.attributes.get("error.type")
    if etype is not None:
        return {"type": _short_type(etype), "message": msg}
    # openai-agents: "Error running tool: {'tool_name': 'get_order', 'error': "'no order B2002'"}" (a dict repr)
    cut = msg.find(": {")
    if cut > 0 and msg.endswith("}") and len(msg) < 20_000:
        try:
            data = ast.literal_eval(msg[cut + 2:])
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            data = None
        if isinstance(data, dict) and isinstance(data.get("error"), str):
            return {"type": "Error", "message": data["error"]}
    for prefix, etype in _ERROR_MESSAGES:  # openai-agents records these without an exception event
        if msg.startswith(prefix):
            return {"type": etype, "message": msg}
    # OpenInference/LangChain: "KeyError('no order B2002')Traceback (most recent call last): ..."
    head = msg.split("Traceback (most recent call last)", 1)[0].strip()
    if "(" in head and head.endswith(")") and head[: head.index("(")].replace(".", "").isidentifier():
        name, _, rest = head.partition("(")
        inner = rest[:-1]
        if len(inner) >= 2 and inner[0] == inner[-1] and inner[0] in "'\"":
            inner = inner[1:-1]
        return {"type": _short_type(name), "message": inner}
    return {"type": "Error", "message": head or msg}


def _deferral(span: SpanData) -> bool:
    exc = _exception(span)
    if exc is not None and exc[0] in DEFERRALS:
        return True
    etype = span.attributes.get("error.type")
    return isinstance(etype, str) and _short_type(etype) in DEFERRALS


def _content_text(content: Any) -> Optional[str]:
    """Message content as text: a string, or the text blocks of a content list."""
    if isinstance(content, str):
        return _text(content)
    if isinstance(content, list):
        texts = [b.get("text") if isinstance(b.get("text"), str) else b.get("content")
                 for b in content if isinstance(b, dict) and b.get("type") in ("text", None)]
        texts = [t for t in texts if isinstance(t, str)]
        return _text("".join(texts)) if texts else None
    return None


def _message(m: Any) -> tuple[str, Optional[str]]:
    """(role, text) of a message in any of the shapes producers serialize."""
    if not isinstance(m, dict):
        return "", None
    if m.get("lc") == 1 and isinstance(m.get("kwargs"), dict):  # LangChain dumpd()
        kw = m["kwargs"]
        ids = m.get("id")
        cls = ids[-1] if isinstance(ids, list) and ids else ""
        role = kw.get("type") or {"HumanMessage": "human", "AIMessage": "ai", "ToolMessage": "tool"}.get(cls, "")
        return str(role), _content_text(kw.get("content"))
    if isinstance(m.get("data"), dict) and "type" in m:  # LangChain message_to_dict()
        return str(m["type"]), _content_text(m["data"].get("content"))
    role = m.get("role", m.get("type", ""))
    parts = m.get("parts")
    if isinstance(parts, list):  # GenAI semconv
        texts = [p.get("content") for p in parts if isinstance(p, dict) and p.get("type") == "text"]
        texts = [t for t in texts if isinstance(t, str)]
        return str(role), (_text("".join(texts)) if texts else None)
    return str(role), _content_text(m.get("content"))


def _messages_of(payload: Any) -> Optional[list[Any]]:
    """The message list inside an agent input/output payload (LangChain state, callback wrappers)."""
    if isinstance(payload, list):
        return payload
    if not isinstance(payload, dict):
        return None
    for key in ("messages", "inputs", "outputs"):
        inner = payload.get(key)
        if isinstance(inner, list) and key == "messages":
            return inner
        if isinstance(inner, dict):
            found = _messages_of(inner)
            if found is not None:
                return found
    return None


def _first_user(messages: Optional[list[Any]]) -> Optional[str]:
    for m in messages or ():
        role, text = _message(m)
        if role in _USER_ROLES and text:
            return text
    return None


def _last_user(messages: Optional[list[Any]]) -> Optional[str]:
    for m in reversed(messages or ()):
        role, text = _message(m)
        if role in _USER_ROLES and text:
            return text
    return None


def _last_ai(messages: Optional[list[Any]]) -> tuple[bool, Optional[str]]:
    """(the conversation ends with a model message, its text)."""
    if not messages:
        return False, None
    role, text = _message(messages[-1])
    return role in _AI_ROLES, text


# -- per-span readers -----------------------------------------------------------------------------
def _read_llm(span: SpanData, source: str) -> dict[str, Any]:
    a = span.attributes
    out: dict[str, Any] = {"span": span, "requests": [], "text": None, "hidden": False, "finish": None}
    if source == "openinference":
        out["model"] = _text(a.get("llm.model_name"))
        out["input_tokens"] = _int(a.get("llm.token_count.prompt"))
        out["output_tokens"] = _int(a.get("llm.token_count.completion"))
        out["finish"] = _text(a.get("llm.finish_reason"))
        n = 0
        while f"llm.output_messages.{n}.message.role" in a or f"llm.output_messages.{n}.message.content" in a:
            base = f"llm.output_messages.{n}.message."
            content = a.get(base + "content")
            if isinstance(content, str):
                out["text"] = _text(content)
            m = 0
            while base + f"tool_calls.{m}.tool_call.function.name" in a:
                tc = base + f"tool_calls.{m}.tool_call."
                args, _ = _structured(a.get(tc + "function.arguments"))
                out["requests"].append((_text(a.get(tc + "function.name")) or "", _text(a.get(tc + "id")), args))
                m += 1
            n += 1
        return out
    out["model"] = _text(a.get("gen_ai.response.model")) or _text(a.get("gen_ai.request.model"))
    out["input_tokens"] = _int(a.get("gen_ai.usage.input_tokens", a.get("gen_ai.usage.prompt_tokens")))
    out["output_tokens"] = _int(a.get("gen_ai.usage.output_tokens", a.get("gen_ai.usage.completion_tokens")))
    reasons = a.get("gen_ai.response.finish_reasons")
    if isinstance(reasons, list) and reasons and isinstance(reasons[0], str):
        out["finish"] = reasons[0]
    if "gen_ai.output.messages" not in a and "gen_ai.completion.0.role" in a:
        _read_legacy_completion(a, out)
        return out
    messages = _loads(a.get("gen_ai.output.messages"))
    if isinstance(messages, list):
        for msg in messages:
            if not isinstance(msg, dict):
                continue
            if out["finish"] is None and isinstance(msg.get("finish_reason"), str) and msg["finish_reason"]:
                out["finish"] = msg["finish_reason"]
            for part in msg.get("parts") or ():
                if not isinstance(part, dict):
                    continue
                ptype = part.get("type")
                if ptype == "tool_call":
                    args = part.get("arguments", _MISSING)
                    if args is _MISSING:
                        out["hidden"] = True
                        args = None
                    elif not isinstance(args, dict):
                        args, _ = _structured(args)
                    out["requests"].append((_text(part.get("name")) or "", _text(part.get("id")), args))
                elif ptype == "text":
                    if "content" in part:
                        out["text"] = _text(part.get("content"))
                    else:
                        out["hidden"] = True
    return out


def _read_legacy_completion(a: dict[str, Any], out: dict[str, Any]) -> None:
    """The indexed ``gen_ai.completion.N.*`` keys of older OpenLLMetry instrumentors (OpenAI, Anthropic...)."""
    n = 0
    while f"gen_ai.completion.{n}.role" in a:
        base = f"gen_ai.completion.{n}."
        if isinstance(a.get(base + "content"), str) and a[base + "content"]:
            out["text"] = _text(a[base + "content"])
        if out["finish"] is None and isinstance(a.get(base + "finish_reason"), str):
            out["finish"] = a[base + "finish_reason"]
        m = 0
        while f"{base}tool_calls.{m}.name" in a:
            tc = f"{base}tool_calls.{m}."
            args, _ = _structured(a.get(tc + "arguments"))
            out["requests"].append((_text(a.get(tc + "name")) or "", _text(a.get(tc + "id")), args))
            m += 1
        n += 1


def _llm_first_user(span: SpanData, source: str) -> Optional[str]:
    a = span.attributes
    if source == "openinference":
        # openai-agents keeps index 0 for the system instructions: without them the messages start at 1
        n = 0 if "llm.input_messages.0.message.role" in a else 1
        found = None
        while f"llm.input_messages.{n}.message.role" in a:
            if a[f"llm.input_messages.{n}.message.role"] in _USER_ROLES:
                text = _text(a.get(f"llm.input_messages.{n}.message.content"))
                if text:
                    found = text
            n += 1
        return found
    messages = _loads(a.get("gen_ai.input.messages"))
    if isinstance(messages, list):
        return _last_user(messages)
    n = 0  # older OpenLLMetry: gen_ai.prompt.N.role / .content
    while f"gen_ai.prompt.{n}.role" in a:
        if a[f"gen_ai.prompt.{n}.role"] in _USER_ROLES and _text(a.get(f"gen_ai.prompt.{n}.content")):
            return _text(a.get(f"gen_ai.prompt.{n}.content"))
        n += 1
    return None


def _output_tools(span: SpanData) -> set[str]:
    """pydantic-ai's output tools (``final_result``): requested by the model, never an execute_tool span."""
    params = _loads(span.attributes.get("model_request_parameters"))
    if isinstance(params, dict) and isinstance(params.get("output_tools"), list):
        return {t.get("name") for t in params["output_tools"] if isinstance(t, dict)}
    return set()


def _unwrap_tool_message(v: Any) -> tuple[Any, Optional[str], Optional[str]]:
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
        content, _ = _structured(content)
    return content, _text(body.get("tool_call_id")), _text(body.get("status"))


def _read_tool(span: SpanData, source: str) -> dict[str, Any]:
    a = span.attributes
    call_id: Optional[str] = None
    truncated = False
    msg_status = None
    if source == "openinference":
        name = _text(a.get("tool.name")) or _text(span.name) or ""
        raw_args, raw_result = a.get("input.value", _MISSING), a.get("output.value", _MISSING)
        if "tool.name" not in a and name.startswith(HANDOFF_PREFIX):
            # openai-agents: the model called transfer_to_<agent>; the span says "handoff to <agent>",
            # with the agents handed from and to as its input and output.
            target = name[len(HANDOFF_PREFIX):]
            name, raw_args, raw_result = handoff_tool_name(target), "{}", target
    else:
        name = _text(a.get("gen_ai.tool.name")) or _text(a.get("traceloop.entity.name")) or _text(span.name) or ""
        call_id = _text(a.get("gen_ai.tool.call.id"))
        # pydantic-ai's data formats 2 and 3 say tool_arguments / tool_response.
        raw_args = a.get("gen_ai.tool.call.arguments", a.get("traceloop.entity.input", a.get("tool_arguments", _MISSING)))
        raw_result = a.get("gen_ai.tool.call.result", a.get("traceloop.entity.output", a.get("tool_response", _MISSING)))
    hidden = raw_args is _MISSING or _placeholder(raw_args)
    args: Any = _MISSING
    msg = a.get("logfire.msg")
    if not hidden and isinstance(msg, str) and msg.startswith("running output function") and isinstance(
            raw_args, str) and raw_args[:1] == '"':
        raw_args = _loads(raw_args)  # a text output function's input: the model's text, as a JSON string
        hidden = raw_args is _MISSING
    if not hidden:
        parsed, cut = _structured(raw_args)
        truncated |= cut
        if isinstance(parsed, dict):
            if "input_str" in parsed or ("inputs" in parsed and "kwargs" in parsed):  # LangChain callback payload
                kw = parsed.get("kwargs")
                if isinstance(kw, dict) and call_id is None:
                    call_id = _text(kw.get("tool_call_id"))
                if isinstance(parsed.get("inputs"), dict):
                    args = parsed["inputs"]
            elif set(parsed) <= {"args", "kwargs", "sanitize_inputs_outputs"} and isinstance(parsed.get("kwargs"), dict) and not parsed.get("args"):
                args = parsed["kwargs"]  # smolagents
            else:
                args = parsed
        elif parsed is not None:
            args = _Bare(parsed)
    result: Any = None
    if raw_result is not _MISSING and not _placeholder(raw_result):
        result, cut = _structured(raw_result)
        truncated |= cut
        result, msg_id, msg_status = _unwrap_tool_message(result)
        call_id = call_id or msg_id
    elif span.status != "ERROR" and _placeholder(raw_result):
        hidden = True
    status, error = "ok", None
    if a.get("pydantic_ai.tool.deferral.name") is not None or (span.events and _deferral(span)):
        status = "blocked"  # paused for approval / external execution: requested, never ran
    elif span.status == "ERROR":
        status, error = "error", _error_of(span)
    elif msg_status == "error":  # the tool caught its own error and returned it (handle_tool_error)
        status, error = "error", {"type": "ToolException", "message": result if isinstance(result, str) else ""}
    # openai-agents: a call waiting for approval is a TOOL span with input and no output that never ran
    awaiting = (source == "openinference" and status == "ok" and raw_result is _MISSING and not hidden)
    # smolagents answers through its FinalAnswerTool: the run's answer, not a call. (pydantic-ai's output
    # functions, ToolOutput(fn) and TextOutput(fn), are code of the app's that may act: calls.)
    answer_tool = source == "openinference" and span.name == "FinalAnswerTool" and name == "final_answer"
    return {"name": name, "call_id": call_id, "args": args, "result": result if status == "ok" else None,
            "status": status, "error": error, "truncated": truncated, "hidden": hidden, "span": span,
            "awaiting": awaiting, "answer_tool": answer_tool}


# -- agent-level readers --------------------------------------------------------------------------
def _agent_name(span: SpanData, source: str, *, span_name: bool = True) -> Optional[str]:
    a = span.attributes
    name = _text(a.get("gen_ai.agent.name")) or _text(a.get("agent_name")) or _text(a.get("traceloop.entity.name"))
    if name:
        return name
    if source != "openinference":
        return None
    name = _text(a.get("agent.name"))
    if name or not span_name:
        return name
    name = _text(span.name)
    if name and name.endswith(".run") and "smolagents.tools_names" in a:  # smolagents: "<agent name>.run"
        name = name[: -len(".run")]
    return name


def _agent_io(span: SpanData, source: str) -> dict[str, Any]:
    """Prompt, answer and deferral as the agent span states them (``_MISSING`` where it says nothing)."""
    a = span.attributes
    out: dict[str, Any] = {"prompt": _MISSING, "answer": _MISSING, "deferred": False, "history_user": None,
                           "structured": _MISSING, "requested": {}}
    if source in ("genai", "harvester"):
        messages = _loads(a.get("pydantic_ai.all_messages"))
        if isinstance(messages, list):
            new = _int(a.get("pydantic_ai.new_message_index"))
            out["prompt"] = (_first_user(messages[new:]) if 0 < new < len(messages) else None) or _first_user(messages)
        if "gen_ai.input.messages" in a and out["prompt"] is _MISSING:
            msgs = _loads(a.get("gen_ai.input.messages"))
            out["prompt"] = _first_user(msgs) if isinstance(msgs, list) else _MISSING
        final = a.get("final_result", a.get("gen_ai.agent.output", _MISSING))
        if final is not _MISSING:
            value, _ = _structured(final)
            if isinstance(value, dict) and ("approvals" in value or "calls" in value) and set(value) <= {
                    "calls", "approvals", "metadata", "_kinds"}:
                out["deferred"] = bool(value.get("approvals") or value.get("calls"))
                out["answer"] = None
            elif isinstance(final, (str, bytes)):
                out["answer"] = _text(final)  # structured output stays the JSON text the agent returned
            elif value is not None:
                out["answer"] = orjson.dumps(value).decode()
        return out
    if source == "openinference":
        raw_in, raw_out = a.get("input.value", _MISSING), a.get("output.value", _MISSING)
    else:
        raw_in, raw_out = a.get("traceloop.entity.input", _MISSING), a.get("traceloop.entity.output", _MISSING)
    if raw_in is not _MISSING and not _placeholder(raw_in):
        value, _ = _structured(raw_in)
        if isinstance(value, str):
            out["prompt"] = value
        elif isinstance(value, dict) and isinstance(value.get("task"), str):  # smolagents
            out["prompt"] = _text(value["task"])
        else:
            messages = _messages_of(value)
            if messages is not None:
                out["prompt"] = _last_user(messages)
    if raw_out is not _MISSING and not _placeholder(raw_out):
        value, _ = _structured(raw_out)
        if isinstance(value, str):
            out["answer"] = value
        else:
            messages = _messages_of(value)
            if messages is not None:
                ends_ai, text = _last_ai(messages)
                out["answer"] = text if ends_ai else None
                out["history_user"] = _first_user(messages)
                out["requested"] = _state_tool_calls(messages)
            response = _structured_response(value)
            if response is not _MISSING:  # LangChain response_format: the answer is the structured response
                out["structured"] = response
                out["answer"] = orjson.dumps(response).decode()
    return out


def _state_tool_calls(messages: list[Any]) -> dict[str, Any]:
    """call id -> args of the tool calls in a LangChain state's AI messages (either serialized form).

    A run resumed after a human approved (or edited) a call has the model's request in the trace
    before it; the resumed state still holds it, so the call's args are known by its id.
    """
    out: dict[str, Any] = {}
    for m in messages:
        if not isinstance(m, dict):
            continue
        body = m.get("data") if isinstance(m.get("data"), dict) else m.get("kwargs") if isinstance(m.get("kwargs"), dict) else m
        for tc in body.get("tool_calls") or ():
            if isinstance(tc, dict) and isinstance(tc.get("id"), str) and isinstance(tc.get("args"), dict):
                out[tc["id"]] = tc["args"]
    return out


def _structured_response(payload: Any) -> Any:
    """LangChain's ``structured_response`` in an agent's output state (OpenLLMetry wraps it in ``outputs``)."""
    for state in (payload, payload.get("outputs") if isinstance(payload, dict) else None):
        if isinstance(state, dict) and state.get("structured_response") is not None:
            return state["structured_response"]
    return _MISSING


def _feedback(spans: Iterable[SpanData]) -> Optional[str]:
    found = None
    for sp in spans:
        a = sp.attributes
        for key in FEEDBACK_KEYS:
            if key in a:
                v = a[key]
                if isinstance(v, bool):
                    v = "true" if v else "false"
                elif isinstance(v, (int, float)):
                    v = "-1" if v < 0 else ("1" if v > 0 else "0")
                v = (_text(v) or "").strip().lower()
                if v in NEGATIVE:
                    return "negative"  # one negative signal flags the run
                if v in POSITIVE:
                    found = "positive"
    return found


def _iso(ns: int) -> Optional[str]:
    global _iso_last
    if not ns or type(ns) is not int:
        return None
    sec = ns // 1_000_000_000
    last = _iso_last  # runs come in bursts: the same second formatted once (one tuple, thread-safe)
    if last[0] == sec:
        head = last[1]
    else:
        try:
            dt = datetime.fromtimestamp(sec, tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            return None
        head = dt.strftime("%Y-%m-%dT%H:%M:%S")
        _iso_last = (sec, head)
    return f"{head}.{(ns // 1_000_000) % 1000:03d}Z"


_iso_last: tuple[Optional[int], str] = (None, "")


# -- assembly -------------------------------------------------------------------------------------
def _same_args(ran: Any, requested: Any) -> bool:
    """A tool span's input is the request's args (or, for a one-argument tool logged bare, its one value)."""
    if isinstance(ran, _Bare):
        return isinstance(requested, dict) and len(requested) == 1 and next(iter(requested.values())) == ran.value
    return ran is not _MISSING and ran is not None and ran == requested


def _pair(llms: list[dict[str, Any]], tools: list[dict[str, Any]],
          answers: Sequence[Any] = ()) -> tuple[list[dict[str, Any]], bool]:
    """Tool spans matched to the model's requests (by id, else by order and name); unexecuted requests blocked.

    Returns the calls in request order (a tool span no request names follows its turn's requests) and
    whether the last model turn's requests all went unexecuted (the run paused on them). A request
    whose args are one of ``answers`` (the agent's structured response) is the answer, not a call.
    """
    reqs: list[tuple[int, int, str, Optional[str], Any]] = []  # (turn, index, name, id, args)
    starts = [llm["span"].start_ns if type(llm["span"].start_ns) is int else 0 for llm in llms]
    for turn, llm in enumerate(llms):
        for i, (name, rid, args) in enumerate(llm["requests"]):
            reqs.append((turn, i, name, rid, args))
    matched: dict[int, dict[str, Any]] = {}
    keyed: list[tuple[tuple[int, int, int], dict[str, Any]]] = []
    lo = 0  # requests before this index are all matched
    # Tool spans with an id first: an id-less one (an OpenInference tool that raised has no output to
    # carry it) must not take the request of a sibling that names its own; and among same-name
    # requests an id-less span takes the one whose args it ran with.
    for t in sorted(tools, key=lambda t: t["call_id"] is None):
        start = t["span"].start_ns if type(t["span"].start_ns) is int else 0
        turn = bisect_right(starts, start) - 1
        while lo in matched:
            lo += 1
        hit = fallback = same_id = None
        for k in range(lo, len(reqs)):
            rturn, _, rname, rid, rargs = reqs[k]
            if rturn > max(turn, 0):
                break
            if k in matched:
                continue
            if t["call_id"] is not None and rid == t["call_id"]:
                if rname == t["name"]:
                    hit = k
                    break
                if same_id is None:  # ids can repeat (a sub-agent numbering its own calls): names decide
                    same_id = k
                continue
            if rname == t["name"] and t["call_id"] is None and _same_args(t["args"], rargs):
                hit = k
                break
            if rname == t["name"] and fallback is None:
                fallback = k
                if rid is None and t["call_id"] is not None:
                    hit = k
                    break
        if hit is None:  # an id the model never emitted (or under another name): fall back to the name
            hit = same_id if same_id is not None else fallback
        req_args = _MISSING
        again = None
        if hit is None and t["call_id"] is None:
            # Another attempt at a request already answered (LangChain's ToolRetryMiddleware runs the tool
            # again; the failed attempts carry no id): the same call, in the order the attempts started.
            again = next((k for k in matched if reqs[k][2] == t["name"] and reqs[k][0] <= max(turn, 0)
                          and _same_args(t["args"], reqs[k][4])), None)
        if hit is not None:
            matched[hit] = t
            rturn, ridx, _, rid, req_args = reqs[hit]
            key = (rturn, ridx, start)
            t["call_id"] = t["call_id"] or rid
        elif again is not None:
            rturn, ridx, _, rid, req_args = reqs[again]
            key = (rturn, ridx, start)
            t["call_id"] = rid
        else:
            key = (turn, 1 << 30, start)
        args = t["args"]
        if args is _MISSING or isinstance(args, _Bare):
            if isinstance(req_args, dict):
                args = req_args
            elif args is not _MISSING:
                args = {"input": args.value}
            else:
                args = None
        elif not isinstance(args, dict) and args is not None:
            args = req_args if isinstance(req_args, dict) else {"input": args}
        if t["answer_tool"]:
            continue  # its request is matched, so it is not reported as blocked either
        keyed.append((key, {"name": t["name"], "call_id": t["call_id"], "args": args, "status": t["status"],
                            "result": t["result"], "error": t["error"], "truncated": t["truncated"]}))
    output_tools: dict[int, set[str]] = {}

    def is_output_tool(turn: int, name: str, args: Any = _MISSING) -> bool:
        if answers and args is not _MISSING and args in answers:
            return True  # LangChain's ToolStrategy: the model "calls" the response schema
        if turn not in output_tools:
            output_tools[turn] = _output_tools(llms[turn]["span"])
        return name in output_tools[turn]

    for k, (rturn, ridx, name, rid, args) in enumerate(reqs):
        if k in matched or is_output_tool(rturn, name, args):
            continue
        keyed.append(((rturn, ridx, 0), {"name": name, "call_id": rid, "args": (
            args if isinstance(args, dict) or args is None else {"input": args}), "status": "blocked",
            "result": None, "error": None, "truncated": False}))
    last = [k for k, r in enumerate(reqs) if r[0] == len(llms) - 1]
    paused = bool(last) and not any(k in matched for k in last) and any(
        not is_output_tool(reqs[k][0], reqs[k][2], reqs[k][4]) for k in last)
    keyed.sort(key=lambda kv: kv[0])
    return [c for _, c in keyed], paused


def _run_by_sub_agents(calls: list[dict[str, Any]], nested: list[tuple[SpanData, str]]) -> None:
    """A request no tool span answered, but a nested agent of that name did: a managed agent (smolagents
    runs a sub-agent the model "calls" by name as an agent span, not a tool span). Executed, once each."""
    by_name: dict[str, list[tuple[SpanData, str]]] = {}
    for sp, src in nested:
        name = _agent_name(sp, src)
        if name:
            by_name.setdefault(name, []).append((sp, src))
    for call in calls:
        runs = by_name.get(call["name"]) if call["status"] == "blocked" else None
        if runs:
            sp, src = runs.pop(0)
            answer = _agent_io(sp, src)["answer"]
            call.update(status="error" if sp.status == "ERROR" else "ok",
                        result=answer if isinstance(answer, str) and sp.status != "ERROR" else None,
                        error=_error_of(sp) if sp.status == "ERROR" else None)


def _answer_from_tools(last: Optional[dict[str, Any]], calls: list[dict[str, Any]]) -> Optional[str]:
    """A run that ended on its tools' output (openai-agents ``stop_on_first_tool``/``StopAtTools``,
    LangChain ``return_direct``): every call of the last model turn ran ok and no model call followed,
    so the last one's result is the answer. Only for OpenInference/OpenLLMetry, whose agent span ends
    cleanly on it; a GenAI trace cut off after its tools stays ``unknown``."""
    if last is None or not last["requests"]:
        return None
    ids = {r[1] for r in last["requests"]}
    mine = [c for c in calls if c["call_id"] in ids]
    if not mine or any(c["status"] != "ok" for c in mine):
        return None
    final = mine[-1]["result"]
    return final if isinstance(final, str) else orjson.dumps(final).decode()


def _nearest_agent(span: SpanData, by_id: Mapping[str, SpanData], roles: Mapping[str, tuple[str, str]]) -> Optional[str]:
    """The id of the closest agent span above ``span`` (a sub-agent's tools are not the run's own)."""
    return next((a for a in ancestors(span, by_id) if roles[a][1] == "agent"), None)


def _forced_answer(agents: list[tuple[SpanData, str]], llms: list[dict[str, Any]], tools: list[dict[str, Any]]) -> bool:
    """smolagents ran out of steps: no final_answer call, and the answer came from a model call made
    by the agent itself (``provide_final_answer``), not from one of its numbered steps."""
    if not agents or not llms or any(t["answer_tool"] for t in tools):
        return False
    limited = {sp.span_id for sp, _ in agents if "smolagents.max_steps" in sp.attributes}
    return bool(limited) and llms[-1]["span"].parent_id in limited


def _nested_llm_spans(by_id: Mapping[str, SpanData], roles: Mapping[str, tuple[str, str]]) -> set[str]:
    """Model-call spans inside another model-call span: the same call, traced twice.

    pydantic-ai's chat span wraps the OpenAI SDK call, which an OpenAI instrumentor (OpenInference's,
    or OpenLLMetry's, which ``Traceloop.init()`` turns on) traces again; counting both would double the
    tokens and report the inner span's requests as never executed. The outer, framework span is kept.
    """
    llm = {sid: sp for sid, sp in by_id.items() if roles[sid][1] == "llm"}
    if len(llm) < 2:
        return set()
    return {sid for sid, sp in llm.items() if any(a in llm for a in ancestors(sp, by_id))}


def _build(root: SpanData, source: str, members: list[SpanData],
           roles: dict[str, tuple[str, str]]) -> dict[str, Any]:
    agents: list[tuple[SpanData, str]] = []
    llms: list[dict[str, Any]] = []
    tools: list[dict[str, Any]] = []
    interrupted = False
    by_id = {sp.span_id: sp for sp in members}
    nested = _nested_llm_spans(by_id, roles)
    for sp in members:
        src, role = roles[sp.span_id]
        if sp.span_id in nested:
            continue
        if role == "agent":
            agents.append((sp, src))
        elif role == "llm":
            llms.append(_read_llm(sp, src))
        elif role == "tool":
            tools.append(_read_tool(sp, src))
        if sp.events and role != "tool" and _deferral(sp):
            interrupted = True
    last_llm = max((llm["span"].start_ns for llm in llms if type(llm["span"].start_ns) is int), default=0)
    for t in tools:  # no model turn after it: the run stopped on it (openai-agents needs_approval)
        if t["awaiting"] and type(t["span"].start_ns) is int and t["span"].start_ns > last_llm:
            t["status"] = "blocked"
            interrupted = True

    agent = model = None
    prompt: Any = _MISSING
    answer: Any = _MISSING
    history_user = None
    deferred = interrupted
    error: Optional[dict[str, str]] = None
    structured: list[Any] = []
    for sp, src in agents:  # outermost first: members are in start order
        agent = agent or _agent_name(sp, src, span_name=False)
        model = model or _text(sp.attributes.get("model_name")) or _text(sp.attributes.get("gen_ai.request.model"))
        io = _agent_io(sp, src)
        if io["structured"] is not _MISSING:
            structured.append(io["structured"])
        for t in tools:  # a bare input (a one-argument tool) whose request is in an earlier trace
            if isinstance(t["args"], _Bare) and t["call_id"] in io["requested"]:
                requested = io["requested"][t["call_id"]]
                # the value it ran with (a human may have edited it), under the argument's name
                t["args"] = {next(iter(requested)): t["args"].value} if len(requested) == 1 else requested
        if prompt is _MISSING or prompt is None:
            prompt = io["prompt"] if io["prompt"] is not _MISSING else prompt
        if answer is _MISSING:
            answer = io["answer"]
        history_user = history_user or io["history_user"]
        deferred = deferred or io["deferred"]
        if error is None and sp.status == "ERROR" and not _deferral(sp):
            error = _error_of(sp)
    own = [t for t in tools if t["answer_tool"] and _nearest_agent(t["span"], by_id, roles) == root.span_id]
    final = next((t for t in reversed(own) if t["status"] == "ok" and t["name"] == "final_answer"), None)
    if final is not None and final["result"] is not None:  # smolagents: what final_answer was given
        answer = final["result"] if isinstance(final["result"], str) else orjson.dumps(final["result"]).decode()
    calls, paused = _pair(llms, tools, structured)
    if len(agents) > 1 and any(c["status"] == "blocked" for c in calls):
        _run_by_sub_agents(calls, agents[1:])
    if error is None and not (isinstance(answer, str) and answer):
        # openai-agents: an input guardrail fails its turn (a CHAIN), never the agent span. Only a
        # message that names such a stop: a node that failed while the agent recovered is no error.
        failed = next((sp for sp in members if sp.status == "ERROR" and roles[sp.span_id][1] == "other"
                       and (sp.status_message or "").startswith(_RUN_STOPPERS)), None)
        if failed is not None:
            error = _error_of(failed)
    if agent is None and agents:  # no agent span names the agent: the outermost span's name
        agent = _agent_name(*agents[0])
    if prompt is _MISSING:
        prompt = None
    # the model that answered: a call that failed (LangChain's ModelFallbackMiddleware tried the
    # primary first) did not, unless every call failed
    first_model = next((llm["model"] for llm in llms if llm["model"] and llm["span"].status != "ERROR"),
                       next((llm["model"] for llm in llms if llm["model"]), None))
    model = first_model or model
    if not prompt and llms:
        prompt = _llm_first_user(llms[0]["span"], roles[llms[0]["span"].span_id][0])
    if not prompt:
        prompt = history_user
    last = llms[-1] if llms else None
    if answer is _MISSING or (answer is None and not deferred and last is not None and not last["requests"]):
        answer = last["text"] if last is not None and not last["requests"] else None
    if answer == "" or (error is not None and error["type"] == "GuardrailTripwireTriggered"):
        answer = None  # an output guardrail blocked it: nobody saw that text

    if answer is None and error is None and not deferred and not paused and source in ("openinference", "openllmetry"):
        answer = _answer_from_tools(last, calls)
    if error is None and (_forced_answer(agents, llms, own)
                          or (isinstance(answer, str) and answer.startswith(_LIMIT_ANSWERS))):
        stop = "max_steps"
    elif error is not None:
        stop = LIMIT_STOPS.get(error["type"], "error")
    elif deferred or (paused and answer is None):
        stop = "deferred"
    elif answer is not None or (last is not None and not last["requests"]):
        stop = "answered"
    else:
        stop = "unknown"
    declared = root.attributes.get(STOP_KEY)  # an app's own explicit stop (``AgentRun.stop``) wins
    if isinstance(declared, str) and declared in STOPS:
        stop = declared
        if error is None and stop not in ("answered", "deferred") and root.attributes.get(STOP_KEY + "_message"):
            error = {"type": stop, "message": _text(root.attributes[STOP_KEY + "_message"]) or ""}

    usage = {"input_tokens": sum(llm["input_tokens"] for llm in llms),
             "output_tokens": sum(llm["output_tokens"] for llm in llms)}
    if not llms:  # no per-call spans: the agent's own aggregate is all there is (never added to them)
        ra = root.attributes
        usage = {"input_tokens": _int(ra.get("gen_ai.aggregated_usage.input_tokens", ra.get(
                     "gen_ai.usage.input_tokens", ra.get("llm.token_count.prompt")))),
                 "output_tokens": _int(ra.get("gen_ai.aggregated_usage.output_tokens", ra.get(
                     "gen_ai.usage.output_tokens", ra.get("llm.token_count.completion"))))}
    hidden = (any(t["hidden"] for t in tools) or any(llm["hidden"] for llm in llms) or not prompt
              or (stop == "answered" and answer is None))
    start, end = root.start_ns, root.end_ns
    ok_times = type(start) is int and type(end) is int and 0 < start <= end
    return {  # the Run's JSON form, every field in model order: valid by construction (see run_data_from_spans)
        "trace_id": root.trace_id, "run_id": root.span_id, "agent": agent, "model": model,
        "prompt": prompt if isinstance(prompt, str) and prompt else None,
        "answer": answer if isinstance(answer, str) else None,
        "stop": stop, "error": error, "calls": calls,
        "llm_calls": [{"model": llm["model"],
                       "usage": {"input_tokens": llm["input_tokens"], "output_tokens": llm["output_tokens"]},
                       "requests": [{"name": n, "call_id": i, "args": a} for n, i, a in llm["requests"]],
                       "finish_reason": llm["finish"]}
                      for llm in llms],
        "usage": usage, "cost": None, "started_at": _iso(start),
        "duration_ms": round((end - start) / 1e6, 3) if ok_times else None,
        "content_captured": not hidden, "feedback": _feedback(members), "source": source,
    }


def _span_datas(spans: Any) -> Iterable[SpanData]:
    if isinstance(spans, dict):
        spans = [spans]
    for s in spans:
        if isinstance(s, SpanData):
            yield s
        elif isinstance(s, dict):
            if "resourceSpans" in s:
                try:
                    yield from spans_from_otlp(s)
                except Exception:  # noqa: BLE001 - a malformed document is skipped, like a malformed span
                    log.debug("skipped a malformed OTLP/JSON document", exc_info=True)
            elif "traceId" in s:
                try:
                    yield span_from_otlp(s)
                except (KeyError, ValueError, TypeError, AttributeError):
                    continue
            elif "trace_id" in s and "span_id" in s:
                try:
                    yield SpanData.from_dict(s)
                except TypeError:
                    continue
        elif hasattr(s, "context") and hasattr(s, "attributes"):
            yield from_readable(s)


def runs_from_spans(spans: Any) -> list[Run]:
    """One Run per outermost agent span, over any mix of traces; spans of other conventions are ignored.

    ``spans``: ``SpanData``, SDK ``ReadableSpan``s, OTLP/JSON span objects or whole OTLP/JSON documents.
    Runs come out in trace order of first appearance, then by start time.
    """
    return [Run.model_validate(data) for data in run_data_from_spans(spans)]


def agent_names(spans: Any) -> set[str]:
    """Names of the agents these spans ran, and of the handoffs to them: calls a framework answers by
    running an agent (a smolagents managed agent, an openai-agents handoff), never by running a tool."""
    out: set[str] = set()
    for sp in _span_datas(spans):
        source, role = _classify(sp)
        if role == "agent":
            name = _agent_name(sp, source)
            if name:
                out.update((name, handoff_tool_name(name)))
    return out


def subtree(root: SpanData, children: Mapping[str, Sequence[SpanData]], taken: set[str]) -> list[SpanData]:
    """``root`` and its descendants, skipping (and adding to ``taken``) span ids already taken."""
    out: list[SpanData] = []
    todo = [root]
    while todo:
        sp = todo.pop()
        if sp.span_id in taken:
            continue
        taken.add(sp.span_id)
        out.append(sp)
        todo.extend(children.get(sp.span_id, ()))
    return out


def run_data_from_spans(spans: Any) -> list[dict[str, Any]]:
    """``runs_from_spans`` in the Run's JSON form (``Run.model_dump(mode="json")`` minus the derived lists).

    Capture and ingest store this form as it is: it is built field by field from checked types, so
    validating it into a ``Run`` (a third of the cost of reading a run) would change nothing.
    """
    traces: dict[str, dict[str, SpanData]] = {}
    for sp in _span_datas(spans):
        if not isinstance(sp.attributes, dict):
            sp.attributes = {}
        traces.setdefault(sp.trace_id, {})[sp.span_id] = sp
    runs: list[dict[str, Any]] = []
    for by_id in traces.values():
        roles = {sid: _classify(sp) for sid, sp in by_id.items()}
        _promote_chains(by_id, roles)
        if not any(r[1] == "agent" for r in roles.values()):
            continue
        children: dict[Optional[str], list[SpanData]] = {}
        for sp in by_id.values():
            children.setdefault(sp.parent_id if sp.parent_id in by_id else None, []).append(sp)
        roots: list[SpanData] = []
        stack = [(sp, False) for sp in children.get(None, ())]
        while stack:  # find outermost agent spans; nothing under one is a root
            sp, inside = stack.pop()
            is_agent = roles[sp.span_id][1] == "agent"
            if is_agent and not inside:
                roots.append(sp)
            stack.extend((c, inside or is_agent) for c in children.get(sp.span_id, ()))
        for root in sorted(roots, key=lambda s: (s.start_ns if type(s.start_ns) is int else 0)):
            members = subtree(root, children, set())
            members.sort(key=lambda s: (s.start_ns if type(s.start_ns) is int else 0))
            try:
                runs.append(_build(root, roles[root.span_id][0], members, roles))
            except Exception:  # noqa: BLE001 - one unreadable run never costs the others
                log.warning("could not read run %s/%s", root.trace_id, root.span_id, exc_info=True)
                runs.append(Run(trace_id=root.trace_id, run_id=root.span_id, content_captured=False,
                                source=roles[root.span_id][0]).model_dump(mode="json"))
    return runs
