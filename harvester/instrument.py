"""Instrumentation for apps without a framework: ``agent_run()`` and ``@tool``.

They emit the same GenAI-semconv spans pydantic-ai does (``invoke_agent``, ``chat``,
``execute_tool``), so the conventions code reads them like any framework's. ``@tool`` is also the
replay seam: inside a replay the runner sets an executor in a context variable and the decorated
function consults it instead of running for real. A context variable, so concurrent cases (threads
or asyncio tasks) never see each other's fixtures. This module must not import ``fixtures``: the
runner sets the variable, the tools only read it.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
from contextvars import ContextVar
from typing import Any, Callable, Iterator, Protocol, TypeVar, overload

import orjson
from opentelemetry import trace
from opentelemetry.trace import Span

F = TypeVar("F", bound=Callable[..., Any])
TRACER_NAME = "harvester"


class Executor(Protocol):
    """What a replay puts in place of live tools: returns the result or raises the recorded failure."""

    def execute(self, name: str, args: dict[str, Any]) -> Any: ...

    async def aexecute(self, name: str, args: dict[str, Any]) -> Any: ...


_executor: ContextVar[Executor | None] = ContextVar("harvester_executor", default=None)
_active_run: ContextVar["AgentRun | None"] = ContextVar("harvester_agent_run", default=None)


def current_executor() -> Executor | None:
    return _executor.get()


@contextlib.contextmanager
def use_executor(executor: Executor | None) -> Iterator[None]:
    """Route every ``@tool`` call in this context (and tasks/threads copied from it) to ``executor``."""
    token = _executor.set(executor)
    try:
        yield
    finally:
        _executor.reset(token)


def _json(value: Any) -> str:
    if isinstance(value, str):
        return value
    return orjson.dumps(value, default=str).decode()


def _messages(role: str, text: str | None, tool_calls: Any = (), finish_reason: str | None = None) -> str:
    parts: list[dict[str, Any]] = []
    if text:
        parts.append({"type": "text", "content": text})
    for tc in tool_calls:
        parts.append({"type": "tool_call", "id": tc.get("id"), "name": tc["name"], "arguments": tc.get("arguments", {})})
    msg: dict[str, Any] = {"role": role, "parts": parts}
    if finish_reason:
        msg["finish_reason"] = finish_reason
    return orjson.dumps([msg], default=str).decode()


class AgentRun:
    """Handle of an ``agent_run``: record model calls, the answer and, when not answered, the stop."""

    def __init__(self, span: Span, name: str, tracer: trace.Tracer) -> None:
        self.span = span
        self.name = name
        self._tracer = tracer
        self._ids = itertools.count(1)
        self._pending: dict[str, list[str]] = {}  # tool name -> requested call ids not yet executed
        self.answer: str | None = None

    def model_call(self, model: str, *, input_tokens: int = 0, output_tokens: int = 0,
                   tool_calls: Any = (), text: str | None = None) -> list[dict[str, Any]]:
        """Record one model call and the tool calls it requested; returns them with call ids filled in."""
        calls = []
        for tc in tool_calls:
            call = {"id": tc.get("id") or f"call_{next(self._ids)}", "name": tc["name"],
                    "arguments": tc.get("arguments", tc.get("args", {}))}
            self._pending.setdefault(call["name"], []).append(call["id"])
            calls.append(call)
        attrs = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": model,
            "gen_ai.response.model": model,
            "gen_ai.usage.input_tokens": int(input_tokens),
            "gen_ai.usage.output_tokens": int(output_tokens),
            "gen_ai.output.messages": _messages("assistant", text, calls, "tool_call" if calls else "stop"),
        }
        with self._tracer.start_as_current_span(f"chat {model}", kind=trace.SpanKind.CLIENT, attributes=attrs):
            pass
        return calls

    def take_call_id(self, tool_name: str) -> str | None:
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
def agent_run(name: str, prompt: str, *, model: str | None = None,
              tracer_provider: trace.TracerProvider | None = None) -> Iterator[AgentRun]:
    """One agent invocation as an ``invoke_agent`` span; tool and model calls inside become its children."""
    tracer = trace.get_tracer(TRACER_NAME, tracer_provider=tracer_provider)
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": name,
        "gen_ai.input.messages": _messages("user", prompt),
    }
    if model:
        attrs["gen_ai.request.model"] = model
    with tracer.start_as_current_span(f"invoke_agent {name}", attributes=attrs) as span:
        handle = AgentRun(span, name, tracer)
        token = _active_run.set(handle)
        try:
            yield handle
        finally:
            _active_run.reset(token)


@overload
def tool(fn: F) -> F: ...


@overload
def tool(*, name: str | None = None, spans: bool = True) -> Callable[[F], F]: ...


def tool(fn: Any = None, *, name: str | None = None, spans: bool = True) -> Any:
    """Make a function a harvester tool: real in production, served from fixtures inside a replay.

    ``spans=False`` when a framework (pydantic-ai, LangChain) already emits the tool span; the
    function then only gains the replay seam. Signature and docstring are kept (frameworks read them).
    """

    def deco(func: F) -> F:
        tool_name = name or func.__name__
        sig = inspect.signature(func)

        def bind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError:
                return dict(kwargs)
            out: dict[str, Any] = {}
            for pname, value in bound.arguments.items():
                kind = sig.parameters[pname].kind
                if kind is inspect.Parameter.VAR_KEYWORD:
                    out.update(value)
                elif kind is inspect.Parameter.VAR_POSITIONAL:
                    out[pname] = list(value)
                else:
                    out[pname] = value
            return out

        if inspect.iscoroutinefunction(func):
            @functools.wraps(func)
            async def awrapper(*args: Any, **kwargs: Any) -> Any:
                call_args = bind(args, kwargs)
                with _tool_span(tool_name, call_args, spans) as record:
                    executor = _executor.get()
                    result = await (executor.aexecute(tool_name, call_args) if executor is not None
                                    else func(*args, **kwargs))
                    record(result)
                    return result

            return awrapper  # type: ignore[return-value]

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            call_args = bind(args, kwargs)
            with _tool_span(tool_name, call_args, spans) as record:
                executor = _executor.get()
                result = executor.execute(tool_name, call_args) if executor is not None else func(*args, **kwargs)
                record(result)
                return result

        return wrapper  # type: ignore[return-value]

    return deco(fn) if fn is not None else deco


@contextlib.contextmanager
def _tool_span(tool_name: str, args: dict[str, Any], enabled: bool) -> Iterator[Callable[[Any], None]]:
    if not enabled:
        yield lambda _result: None
        return
    run = _active_run.get()
    tracer = run._tracer if run is not None else trace.get_tracer(TRACER_NAME)
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool_name,
        "gen_ai.tool.call.arguments": _json(args),
    }
    call_id = run.take_call_id(tool_name) if run is not None else None
    if call_id:
        attrs["gen_ai.tool.call.id"] = call_id
    # The span records the exception itself (status ERROR + exception event) and re-raises.
    with tracer.start_as_current_span(f"execute_tool {tool_name}", attributes=attrs) as span:
        yield lambda result: span.set_attribute("gen_ai.tool.call.result", _json(result))
