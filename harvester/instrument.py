"""Instrumentation for apps without a framework: ``agent_run()`` and ``@tool``.

They emit the same GenAI-semconv spans pydantic-ai does (``invoke_agent``, ``chat``,
``execute_tool``), so the conventions code reads them like any framework's. ``@tool`` is also a
replay seam: it asks ``seam.route()`` where the call goes, so inside a replay the function body
never runs (a framework's own dispatch is routed by ``adapters``, this is for the app's own loop).

Production code calls these, so they never raise into the app: a value orjson refuses (a non-string
key, an int of 64 bits or more, a lone surrogate, nesting past orjson's depth) is recorded in a
best-effort form, and the tool's own result or exception is what the caller gets, once.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar, overload

import orjson
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span

from . import seam
from .canonical import canonical_json

__all__ = ["TRACER_NAME", "AgentRun", "agent_run", "tool"]

F = TypeVar("F", bound=Callable[..., Any])
TRACER_NAME = "harvester"
_RUN = otel_context.create_key("harvester.agent_run")
# Parameters a framework fills in and the model never sees: never args, never in a fixture key.
_CONTEXT_TYPES = re.compile(
    r"\b(RunContext|RunContextWrapper|ToolContext|ToolRuntime|RunnableConfig|"
    r"Injected\w*|(Async)?CallbackManagerForToolRun|Callbacks)\b"
)
_CONTEXT_NAMES = ("run_manager", "callbacks")


def _json(value: Any) -> str:
    """JSON text for a span attribute; never raises (what orjson refuses takes the canonical encoding)."""
    if isinstance(value, str):
        return value
    try:
        return orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS).decode()
    except Exception:
        return canonical_json(value)


def _message(role: str | None, text: str | None, tool_calls: Any = ()) -> dict[str, Any]:
    """One GenAI-semconv message: its text and the tool calls (``id``, ``name``, ``arguments``) it asks for."""
    parts: list[dict[str, Any]] = [{"type": "text", "content": text}] if text else []
    parts += [
        {"type": "tool_call", "id": tc.get("id"), "name": tc.get("name"), "arguments": tc.get("arguments", {})}
        for tc in tool_calls
    ]
    return {"role": role, "parts": parts}


def _messages(role: str, text: str | None, tool_calls: Any = (), finish_reason: str | None = None) -> str:
    msg = _message(role, text, tool_calls)
    if finish_reason:
        msg["finish_reason"] = finish_reason
    return _json([msg])


def _conversation(history: Iterable[Any], prompt: str) -> str:
    """``gen_ai.input.messages`` of a turn: the earlier messages (neutral form), then the prompt."""
    out: list[dict[str, Any]] = []
    for m in history:
        m = m.model_dump() if hasattr(m, "model_dump") else m
        if not isinstance(m, dict):
            continue
        if m.get("role") == "tool":
            part = {"type": "tool_call_response", "id": m.get("tool_call_id"), "result": m.get("content")}
            out.append({"role": "tool", "parts": [part]})
            continue
        calls = [
            {"id": c.get("call_id", c.get("id")), "name": c.get("name"), "arguments": c.get("args")}
            for c in m.get("tool_calls") or ()
            if isinstance(c, dict)
        ]
        out.append(_message(m.get("role"), m.get("content"), calls))
    out.append(_message("user", prompt))
    return _json(out)


class AgentRun:
    """Handle of an ``agent_run``: record model calls, the answer and, when not answered, the stop."""

    def __init__(self, span: Span, name: str, tracer: trace.Tracer) -> None:
        self.span = span
        self.name = name
        self._tracer = tracer
        self._ids = itertools.count(1)
        self._pending: dict[str, list[str]] = {}  # tool name -> requested call ids not yet executed
        self._lock = threading.Lock()  # tools of one model turn may run in parallel threads
        self.answer: str | None = None

    def model_call(
        self,
        model: str,
        *,
        input_tokens: int | None = None,
        output_tokens: int | None = None,
        tool_calls: Any = (),
        text: str | None = None,
    ) -> list[dict[str, Any]]:
        """Record one model call and the tool calls it requested; returns them with call ids filled in.

        Token counts left out are unknown (the run's cost then is too), never recorded as 0."""
        calls = []
        for tc in tool_calls:
            call = {
                "id": tc.get("id") or f"call_{next(self._ids)}",
                "name": tc["name"],
                "arguments": tc.get("arguments", tc.get("args", {})),
            }
            with self._lock:
                self._pending.setdefault(call["name"], []).append(call["id"])
            calls.append(call)
        attrs = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": model,
            "gen_ai.response.model": model,
            **({"gen_ai.usage.input_tokens": int(input_tokens)} if input_tokens is not None else {}),
            **({"gen_ai.usage.output_tokens": int(output_tokens)} if output_tokens is not None else {}),
            "gen_ai.output.messages": _messages("assistant", text, calls, "tool_call" if calls else "stop"),
        }
        with self._tracer.start_as_current_span(f"chat {model}", kind=trace.SpanKind.CLIENT, attributes=attrs):  # type: ignore[arg-type]
            pass
        return calls

    def take_call_id(self, tool_name: str) -> str | None:
        with self._lock:
            pending = self._pending.get(tool_name)
            return pending.pop(0) if pending else None

    def finish(self, answer: str | None) -> None:
        """The final answer; the run stops ``answered``."""
        self.answer = answer
        if answer is not None:
            self.span.set_attribute("final_result", answer)
            self.span.set_attribute("gen_ai.output.messages", _messages("assistant", answer, (), "stop"))

    def stop(self, reason: str, message: str = "") -> None:
        """Say why the run ended without an answer: ``deferred``, ``budget_exceeded``, ``max_steps``, ..."""
        self.span.set_attribute("harvester.stop", reason)
        if message:
            self.span.set_attribute("harvester.stop_message", message)

    def feedback(self, value: str) -> None:
        """Flag the run (``negative`` keeps it whatever the sampling rate)."""
        self.span.set_attribute("harvester.feedback", value)


@contextlib.contextmanager
def agent_run(
    name: str,
    prompt: str,
    *,
    history: Iterable[Any] | None = None,
    model: str | None = None,
    tracer_provider: trace.TracerProvider | None = None,
) -> Iterator[AgentRun]:
    """One agent invocation as an ``invoke_agent`` span; tool and model calls inside become its children.

    ``history`` is the conversation before this turn, as replay hands it to an agent with a
    ``history`` parameter: messages ``{"role", "content", "tool_calls": [{"name", "call_id", "args"}],
    "tool_call_id"}``. Recorded with the prompt, it lets a harvested later turn replay with it.

    The run travels in the OpenTelemetry context, which threads now inherit too (``seam``): a tool
    run in a thread pool is still this run's call, executed, under its span.
    """
    seam.propagate_into_threads()
    tracer = trace.get_tracer(TRACER_NAME, tracer_provider=tracer_provider)
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": name,
        "gen_ai.input.messages": _conversation(history or (), prompt),
    }
    if model:
        attrs["gen_ai.request.model"] = model
    with tracer.start_as_current_span(f"invoke_agent {name}", attributes=attrs) as span:
        handle = AgentRun(span, name, tracer)
        token = otel_context.attach(otel_context.set_value(_RUN, handle))
        try:
            yield handle
        finally:
            otel_context.detach(token)


@overload
def tool(fn: F) -> F: ...


@overload
def tool(*, name: str | None = None, spans: bool | None = None) -> Callable[[F], F]: ...


def tool(fn: Any = None, *, name: str | None = None, spans: bool | None = None) -> Any:
    """Make a function a harvester tool: real in production, served from fixtures inside a replay.

    The tool span is emitted unless a tool span is already the current span (a framework's, or another
    tracer's decorator above this one: that one is the record, and the function only gains the replay
    seam). It may go above or below another tracer's tool decorator (OpenInference's ``@tracer.tool``)
    or any ``functools.wraps`` decorator: nested tool spans of one call read as one call. ``spans=False``
    emits none in production (a decorator below records the call); in a replay, where nothing below it
    runs, the served call still gets its span. Signature and docstring are kept (frameworks read them).
    Parameters a framework fills in (``self``, ``cls``, a ``RunContext``, LangChain's injected
    arguments) are not the call's args.
    """

    def deco(func: F) -> F:
        tool_name = name or func.__name__
        sig = inspect.signature(func)
        hidden = _hidden_params(sig)

        def bind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError:
                return {k: v for k, v in kwargs.items() if k not in hidden and not _is_context(v)}
            out: dict[str, Any] = {}
            for pname, value in bound.arguments.items():
                kind = sig.parameters[pname].kind
                if kind is inspect.Parameter.VAR_KEYWORD:
                    out.update((k, v) for k, v in value.items() if not _is_context(v))
                elif pname in hidden or _is_context(value):
                    continue
                elif kind is inspect.Parameter.VAR_POSITIONAL:
                    out[pname] = list(value)
                else:
                    out[pname] = value
            return out

        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def awrapper(*args: Any, **kwargs: Any) -> Any:
                call_args = bind(args, kwargs)
                executor = seam.route()
                with _tool_span(tool_name, call_args, spans, executor is not None) as record:
                    result = await (
                        executor.aexecute(tool_name, call_args) if executor is not None else func(*args, **kwargs)
                    )
                    record(result)
                    return result

            return awrapper  # type: ignore[return-value]

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            call_args = bind(args, kwargs)
            executor = seam.route()
            with _tool_span(tool_name, call_args, spans, executor is not None) as record:
                result = executor.execute(tool_name, call_args) if executor is not None else func(*args, **kwargs)
                record(result)
                return result

        return wrapper  # type: ignore[return-value]

    return deco(fn) if fn is not None else deco


def _hidden_params(sig: inspect.Signature) -> set[str]:
    """Names of the parameters a framework or Python fills in: ``self``/``cls``, contexts, callbacks."""
    params = list(sig.parameters.values())
    hidden = {params[0].name} if params and params[0].name in ("self", "cls") else set()
    for p in params:
        ann = p.annotation
        text = ann if isinstance(ann, str) else ("" if ann is inspect.Parameter.empty else repr(ann))
        if p.name in _CONTEXT_NAMES or _CONTEXT_TYPES.search(text):
            hidden.add(p.name)
    return hidden


def _is_context(value: Any) -> bool:
    """A framework's context object passed without an annotation that says so."""
    return value is not None and _CONTEXT_TYPES.fullmatch(type(value).__name__) is not None


def _in_tool_span() -> bool:
    """The current span is a tool span a framework already emits for this call."""
    attrs = getattr(trace.get_current_span(), "attributes", None)
    if not attrs:
        return False
    return (
        attrs.get("gen_ai.operation.name") == "execute_tool"
        or attrs.get("openinference.span.kind") == "TOOL"
        or attrs.get("traceloop.span.kind") == "tool"
    )


def _noop(_result: Any) -> None:
    return None


@contextlib.contextmanager
def _tool_span(
    tool_name: str, args: dict[str, Any], enabled: bool | None, served: bool
) -> Iterator[Callable[[Any], None]]:
    """The call's span, unless another tracer's records it: a tool span already current (a decorator or
    a framework above this one), or ``spans=False`` (one below it). In a replay (``served``) what is
    below never runs, so only a tool span already current records the call."""
    if (enabled is not True and _in_tool_span()) or (enabled is False and not served):
        yield _noop
        return
    run = otel_context.get_value(_RUN)
    tracer = run._tracer if isinstance(run, AgentRun) else trace.get_tracer(TRACER_NAME)
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool_name,
        "gen_ai.tool.call.arguments": _json(args),
    }
    call_id = run.take_call_id(tool_name) if isinstance(run, AgentRun) else None
    if call_id:
        attrs["gen_ai.tool.call.id"] = call_id
    # The span records the exception itself (status ERROR + exception event) and re-raises.
    with tracer.start_as_current_span(f"execute_tool {tool_name}", attributes=attrs) as span:
        yield lambda result: span.set_attribute("gen_ai.tool.call.result", _json(result))
