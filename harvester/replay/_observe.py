"""Observing a replayed run the way production observes it: through its spans, read by the same
``conventions.runs_from_spans``. An agent that emits no agent span still gets a Run: its case's trace
read as one run (``_trace_run``: the tool spans and model calls in it, wherever they sit), else its
answer and the executor's log of tool calls. Tool spans are never dropped for the log's sake: a tool
body that ran for real stays a call of the run, for the live-call cross-check to name.

Each case-trial runs under its own root span; one span processor on the global SDK provider keeps
the spans of the traces being replayed (one dict lookup per span), so concurrent cases never mix.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider

from .. import seam
from ..case import Case
from ..config import Config
from ..conventions import runs_from_spans
from ..fixtures import FixtureTools, ToolLog
from ..model import ErrorInfo, Run, ToolCall
from ..spans import SpanData, from_readable
from ._refusal import open_tools, tool_name

__all__ = ["SpanCollector", "observed_run", "observer"]


class SpanCollector(SpanProcessor):
    """Keeps the finished spans of the traces being replayed, and nothing else (one dict lookup per span)."""

    def __init__(self) -> None:
        self._buckets: dict[int, list[ReadableSpan]] = {}

    def watch(self, trace_id: int) -> None:
        self._buckets[trace_id] = []

    def release(self, trace_id: int) -> list[ReadableSpan]:
        return self._buckets.pop(trace_id, [])

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        if span.context.trace_id in self._buckets and (name := tool_name(span.attributes)) is not None:
            open_tools[span.context.span_id] = name  # what a refusal made in a span inside it names

    def on_end(self, span: ReadableSpan) -> None:
        bucket = self._buckets.get(span.context.trace_id)
        if bucket is not None:
            bucket.append(span)
            if open_tools:
                open_tools.pop(span.context.span_id, None)


_collectors: weakref.WeakKeyDictionary[Any, SpanCollector] = weakref.WeakKeyDictionary()
_install_lock = threading.Lock()


def observer() -> tuple[trace.Tracer, SpanCollector | None]:
    """The tracer for root spans and the collector on the global provider (installed once).

    No provider set yet: set an SDK one, so instrumented frameworks have somewhere to send spans. A
    provider that is not the SDK's cannot take processors: cases then fall back to the returned answer.
    """
    with _install_lock:
        provider = trace.get_tracer_provider()
        if isinstance(provider, trace.ProxyTracerProvider):
            trace.set_tracer_provider(TracerProvider())
            provider = trace.get_tracer_provider()
        collector = _collectors.get(provider)
        if collector is None and isinstance(provider, TracerProvider):
            collector = _collectors[provider] = SpanCollector()
            provider.add_span_processor(collector)
        return provider.get_tracer("harvester.replay"), collector


def observed_run(
    case: Case, answer: Any, spans: list[ReadableSpan], tools: FixtureTools | None, prices: Config | None
) -> Run:
    """The Run of one case-trial: read from its spans, else from what the agent returned."""
    if isinstance(answer, Run):
        run = answer
    else:
        runs = runs_from_spans(spans) if spans else []
        found = _joined(runs) if runs else _trace_run(spans, tools)
        if found is not None:
            run = found
            if run.answer is None and isinstance(answer, str):
                run = run.model_copy(update={"answer": answer, "stop": "answered" if not runs else run.stop})
        elif answer is None or isinstance(answer, str):
            run = _run_from_log(answer, tools)
        else:
            raise TypeError(
                f"agent returned {type(answer).__name__}, expected the answer (str) or a Run, "
                "and emitted no agent span to read the run from"
            )
    if run.prompt is None:
        run = run.model_copy(update={"prompt": case.task})
    if run.cost is None and prices is not None:
        run = run.model_copy(update={"cost": _cost(run, prices)})
    return run


def _joined(runs: list[Run]) -> Run:
    """Several agent runs in one case (a paused run resumed): one Run, calls in order, the last stop."""
    if len(runs) == 1:
        return runs[0]
    usage = runs[0].usage
    for r in runs[1:]:
        usage = usage + r.usage
    return runs[-1].model_copy(
        update={
            "calls": [c for r in runs for c in r.calls],
            "llm_calls": [c for r in runs for c in r.llm_calls],
            "usage": usage,
            "prompt": runs[0].prompt,
        }
    )


def _trace_run(spans: list[ReadableSpan], tools: FixtureTools | None) -> Run | None:
    """No agent span: the case's trace read as one run rooted at the case's replay root, or None when it
    shows no tool call and no model call.

    A raw SDK loop whose loop span is no agent (a CHAIN the client's spans did not promote, because
    nothing traced the client), or an app that traces only its tools, still shows what ran: every tool
    span and model call of the trace is the run's, a span whose parent went to another provider
    included. A request the spans show unanswered that the executor served is that served call.
    """
    datas = [from_readable(s) for s in spans]
    root = next((d for d in datas if d.parent_id is None and d.name.startswith(seam.ROOT_PREFIX)), None)
    if root is None:
        return None
    ids = {d.span_id for d in datas}
    reparented = [
        d if d is root or d.parent_id in ids else SpanData(**{**d.to_dict(), "parent_id": root.span_id}) for d in datas
    ]
    as_agent = SpanData(
        **{**root.to_dict(), "attributes": {**root.attributes, "gen_ai.operation.name": "invoke_agent"}}
    )
    runs = runs_from_spans([as_agent if d is root else d for d in reparented])
    if not runs or not (runs[0].calls or runs[0].llm_calls):
        return None
    return _with_served(runs[0], tools.log if tools is not None else [])


def _with_served(run: Run, log: list[ToolLog]) -> Run:
    """``run`` with the executor's calls as it logged them (what it answered: an injected failure by its
    mode), each in place of the call the spans show for it (same tool and args first, then same tool);
    a call the spans show that it never served stays (it ran for real, or was requested and never
    answered), and a served call the spans never mention is added."""
    left = list(log)
    calls = list(run.calls)
    for i, call in enumerate(calls):
        entry = next((e for e in left if e.name == call.name and e.args == call.args), None)
        entry = entry or next((e for e in left if e.name == call.name), None)
        if entry is not None:
            left.remove(entry)
            calls[i] = _call(entry).model_copy(update={"call_id": call.call_id})
    return run.model_copy(update={"calls": calls + [_call(e) for e in left]})


def _run_from_log(answer: str | None, tools: FixtureTools | None) -> Run:
    """The Run of an agent that emitted no agent span: its answer and the calls that reached the executor."""
    calls = [_call(e) for e in (tools.log if tools is not None else ())]
    return Run(
        trace_id="",
        answer=answer,
        stop="answered" if answer is not None else "unknown",
        calls=calls,
        source="harvester",
    )


def _call(entry: ToolLog) -> ToolCall:
    if entry.error is not None:
        return ToolCall(
            name=entry.name,
            args=entry.args,
            status="error",
            error=ErrorInfo(type=entry.error.type, message=entry.error.message),
        )
    return ToolCall(name=entry.name, args=entry.args, result=entry.result)


def _cost(run: Run, prices: Config) -> float | None:
    if run.llm_calls:
        costs = [prices.cost(c.model or run.model, c.usage) for c in run.llm_calls]
        return None if any(c is None for c in costs) else sum(c for c in costs if c is not None)
    return prices.cost(run.model, run.usage)
