"""``@tool``: a function the agent's own loop dispatches, recorded as an ``execute_tool`` span.

It is also a replay seam: it asks ``seam.route()`` where the call goes, so inside a replay the function
body never runs (a framework's own dispatch is routed by ``adapters``, this is for the app's own loop).
The tool's own result or exception is what the caller gets, once.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import re
from collections.abc import Callable, Iterator
from typing import Any, TypeVar, overload

from opentelemetry import context as otel_context
from opentelemetry import trace

from .. import seam
from ._genai import json_text
from ._run import RUN, TRACER_NAME, AgentRun

__all__ = ["tool"]

F = TypeVar("F", bound=Callable[..., Any])
# Parameters a framework fills in and the model never sees: never args, never in a fixture key.
_CONTEXT_TYPES = re.compile(
    r"\b(RunContext|RunContextWrapper|ToolContext|ToolRuntime|RunnableConfig|"
    r"Injected\w*|(Async)?CallbackManagerForToolRun|Callbacks)\b"
)
_CONTEXT_NAMES = ("run_manager", "callbacks")


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

        def bind(args: tuple[Any, ...], kwargs: dict[str, Any], *, defaults: bool = False) -> dict[str, Any]:
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError:
                return {k: v for k, v in kwargs.items() if k not in hidden and not _is_context(v)}
            if defaults:
                bound.apply_defaults()
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
                executor = _served_by(tool_name, call_args)
                call_args = _as_recorded(executor, tool_name, call_args, lambda: bind(args, kwargs, defaults=True))
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
            executor = _served_by(tool_name, call_args)
            call_args = _as_recorded(executor, tool_name, call_args, lambda: bind(args, kwargs, defaults=True))
            with _tool_span(tool_name, call_args, spans, executor is not None) as record:
                result = executor.execute(tool_name, call_args) if executor is not None else func(*args, **kwargs)
                record(result)
                return result

        return wrapper  # type: ignore[return-value]

    return deco(fn) if fn is not None else deco


def _as_recorded(
    executor: seam.Executor | None, name: str, args: dict[str, Any], full: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """The call's args as its recording holds them: with the defaults the caller left out when only that
    form was recorded (another tracer's tool decorator above this one records them, OpenInference's
    does), else as the caller gave them. When neither form is recorded (a default or an argument
    changed), the form the tool's recordings are in, so the ``no_fixture`` names only the arguments
    that differ, not every default the caller left out."""
    recorded = getattr(executor, "recorded", None)
    if recorded is None:
        return args
    whole = full()
    if whole == args or recorded(name, args):
        return args
    if recorded(name, whole):
        return whole
    holds = getattr(executor, "holds_args", None)
    return whole if holds is not None and holds(name, whole.keys() - args.keys()) else args


def _served_by(name: str, args: Any) -> seam.Executor | None:
    """The executor that answers this call, or None when its body runs: no replay, or a sandbox tool."""
    executor = seam.route()
    return None if executor is None or seam.sandboxed(executor, name, args) else executor


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
    run = otel_context.get_value(RUN)
    tracer = run._tracer if isinstance(run, AgentRun) else trace.get_tracer(TRACER_NAME)
    attrs: dict[str, Any] = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool_name,
        "gen_ai.tool.call.arguments": json_text(args),
    }
    call_id = run.take_call_id(tool_name) if isinstance(run, AgentRun) else None
    if call_id:
        attrs["gen_ai.tool.call.id"] = call_id
    # The span records the exception itself (status ERROR + exception event) and re-raises.
    with tracer.start_as_current_span(f"execute_tool {tool_name}", attributes=attrs) as span:
        yield lambda result: span.set_attribute("gen_ai.tool.call.result", json_text(result))
