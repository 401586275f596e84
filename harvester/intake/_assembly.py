"""Open traces: spans grouped by trace until their runs are complete, bounded, with one completion
policy per place spans come from.

In process (``LocalRootAssembler``, the span processor) children end before their parents, so a
trace's run is complete when the LOCAL ROOT of the spans held ends: a span with no parent, or whose
parent is in another process. On the network (``IdleAssembler``, the receiver) spans of one trace
come from several services in any order, so a trace is complete once it holds an agent span and
nothing new arrived for ``idle_seconds``. Both keep traces the least recently active first, which
is the order eviction and expiry take them in. Both are bounded in bytes as well as in traces and
spans (``span_size``, from attribute values): one span may carry a 20 KB tool result, the next 20 B.
Over a bound, a trace holding no span of an agent's (no GenAI, OpenInference or OpenLLMetry span: a
health check, a flood of junk) goes first, the least recently active of them, and is dropped and
counted; only when every open trace holds an agent's spans does the least recently active of those
go. One junk request of ten thousand one-span traces therefore evicts junk, never the real runs.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ..conventions import GENAI_OP, OI_KIND, TL_KIND, ancestors, is_agent_span, may_hold_run
from ..spans import SpanData, span_size
from ._lost import LostTraces

if TYPE_CHECKING:
    from ._pipeline import RunWriter

__all__ = ["Assembler", "IdleAssembler", "LocalRootAssembler", "OpenTrace"]

log = logging.getLogger("harvester.intake")


def _agents(span: SpanData) -> bool:
    """True for a span an agent's run is made of (its agent, model, tool or chain spans), by its keys alone.
    Broader than ``may_hold_run`` on purpose: in process the agent span ends last, so a run still going
    holds only its model and tool spans, and those must not be taken for junk."""
    a = span.attributes
    return bool(a) and (GENAI_OP in a or OI_KIND in a or TL_KIND in a)


class OpenTrace:
    __slots__ = ("spans", "children", "sizes", "born", "last_seen", "bytes", "agents", "has_agent", "maybe")

    def __init__(self, now: float) -> None:
        self.spans: dict[str, SpanData] = {}  # by span id: an exporter retry does not duplicate spans
        self.children: dict[str, list[str]] = {}  # in process: parent -> children, to take subtrees
        self.sizes: dict[str, int] = {}  # in process: span id -> its estimated bytes, to take subtrees
        self.born = now  # since when its runs have waited (reset when the ended ones are written)
        self.last_seen = now  # its latest span
        self.bytes = 0  # the estimated size of its spans
        self.agents = False  # holds a span of an agent's (``_agents``): evicted after those that hold none
        self.has_agent = False
        # Holds an OpenInference CHAIN, which may turn out the root of a run (an unnamed LangChain
        # agent): read at the orphan timeout, never at the short idle one (graph nodes end early).
        self.maybe = False


class Assembler:
    """Open traces by trace id, the least recently active first, and their estimated bytes.

    ``plain`` holds, in the same order, the open traces that hold no span of an agent's: over a
    bound, those go first (``victim``).
    """

    def __init__(self) -> None:
        self.open: OrderedDict[str, OpenTrace] = OrderedDict()
        self.plain: OrderedDict[str, None] = OrderedDict()
        self.open_bytes = 0

    def clear(self) -> None:
        self.open.clear()
        self.plain.clear()
        self.open_bytes = 0

    def opened(self, trace_id: str, now: float) -> OpenTrace:
        trace = self.open[trace_id] = OpenTrace(now)
        self.plain[trace_id] = None
        return trace

    def touch(self, trace_id: str, trace: OpenTrace, now: float) -> None:
        """A span of an open trace arrived: it is now the most recently active."""
        if trace.last_seen != now:
            trace.last_seen = now
            self.open.move_to_end(trace_id)
            if not trace.agents:
                self.plain.move_to_end(trace_id)

    def held(self, trace_id: str, trace: OpenTrace, span: SpanData, size: int) -> None:
        """Account for ``span``, now held in ``trace``."""
        trace.bytes += size
        self.open_bytes += size
        if not trace.agents and _agents(span):
            trace.agents = True
            del self.plain[trace_id]

    def victim(self) -> str:
        """The trace to evict: the least recently active holding no agent's span, else the least recently active."""
        return next(iter(self.plain or self.open))

    def closed(self, trace_id: str) -> OpenTrace:
        """Remove an open trace (finished, completed or evicted) and its bytes."""
        trace = self.open.pop(trace_id)
        if not trace.agents:
            del self.plain[trace_id]
        self.open_bytes -= trace.bytes
        return trace


class LocalRootAssembler(Assembler):
    """In process: a trace's run is complete when its local root ends (capture). Not thread-safe: the
    processor's worker is its only user.

    Open traces are kept the least recently active first (for eviction and expiry). A trace over its
    own bound (``max_spans_per_trace`` spans, ``max_bytes_per_trace`` bytes) first writes the runs
    of it that have ended (losing nothing: the rest joins them when it is written); only then are its
    further spans dropped, agent and root spans excepted. Over ``max_open_bytes`` in all, traces are
    evicted as the module says (``victim``): one that may hold a run is written, the others dropped.

    A trace written before its root ended (evicted, idle, or its finished runs written while it stays
    open) is remembered in ``partial``: when more of it is written, its stored spans are read back and
    its runs replaced, so a run cut in two is stored whole, never as two halves.
    """

    def __init__(
        self,
        writer: RunWriter,
        max_open_traces: int,
        max_trace_age_s: float,
        max_spans_per_trace: int,
        max_open_bytes: int = 64 << 20,
        max_bytes_per_trace: int = 16 << 20,
        lost: LostTraces | None = None,
    ) -> None:
        self.writer = writer
        self.lost = lost if lost is not None else LostTraces()
        self.max_open = max_open_traces
        self.max_age = max_trace_age_s
        self.max_spans = max_spans_per_trace
        self.max_bytes = max_open_bytes
        self.max_trace_bytes = max_bytes_per_trace
        super().__init__()
        self.partial: collections.OrderedDict[str, None] = collections.OrderedDict()

    def _over(self, trace: OpenTrace, size: int) -> bool:
        return len(trace.spans) >= self.max_spans or trace.bytes + size > self.max_trace_bytes

    def add(self, span: SpanData, local_root: bool, now: float, size: int | None = None) -> None:
        """Hold ``span`` in its trace; ``size``: its estimated bytes when the caller weighed it already."""
        if size is None:
            size = span_size(span)
        trace_id = span.trace_id
        trace = self.open.get(trace_id)
        if trace is None:
            while len(self.open) >= self.max_open:
                self._finish(self.victim(), "too_many_open_traces")
            trace = self.opened(trace_id, now)
        else:
            self.touch(trace_id, trace, now)
        agent = is_agent_span(span)
        if not (local_root or agent) and self._over(trace, size):
            if trace.has_agent:
                self._write_ended_runs(trace_id, trace)
            if self._over(trace, size):
                self.writer.drop("trace_too_big")  # agent and root spans are always kept: they bound the run
                self.lost.lose(trace_id, "trace_too_big")
                return
        sid = span.span_id
        if sid in trace.spans:  # the same span again (an id collision): held once
            self.open_bytes -= trace.sizes[sid]
            trace.bytes -= trace.sizes[sid]
        trace.spans[sid] = span
        trace.sizes[sid] = size
        self.held(trace_id, trace, span, size)
        trace.has_agent = trace.has_agent or agent
        if span.parent_id is not None and not local_root:
            trace.children.setdefault(span.parent_id, []).append(sid)
        if local_root:
            self._complete(trace_id, trace, sid)
        while self.open_bytes > self.max_bytes and self.open:
            self._finish(self.victim(), "too_many_open_bytes")

    def _take(self, trace: OpenTrace, roots: list[str]) -> list[SpanData]:
        """Remove and return the spans of the subtrees under ``roots``."""
        taken: list[SpanData] = []
        todo = list(roots)
        while todo:
            sid = todo.pop()
            sp = trace.spans.pop(sid, None)
            if sp is not None:
                taken.append(sp)
                size = trace.sizes.pop(sid)
                trace.bytes -= size
                self.open_bytes -= size
            todo.extend(trace.children.pop(sid, ()))
        return taken

    def _complete(self, trace_id: str, trace: OpenTrace, root_id: str) -> None:
        subtree = self._take(trace, [root_id])
        if not trace.spans:
            self.closed(trace_id)
        if trace_id in self.partial:
            self.partial.pop(trace_id)
            self._process(subtree, partial=True)  # what was written of it before joins what came since
        elif any(may_hold_run(s) for s in subtree):
            self._process(subtree)
        else:
            self.writer.drop("no_agent")

    def _process(self, spans: list[SpanData], *, partial: bool = False, piece: bool = False) -> None:
        """``process_trace``, counted and contained: ``expire`` and ``finish_all`` loop over many
        traces, and an error escaping from one would skip the rest and the final flush. A trace that lost a
        span (``lost``: on the app's thread, or here) goes marked."""
        try:
            self.writer.process_trace(self.lost.marked(spans), partial=partial, piece=piece)
        except Exception:
            log.debug("harvester could not process a trace", exc_info=True)
            self.writer.drop("internal_error")

    def _remember_partial(self, trace_id: str) -> None:
        self.partial[trace_id] = None
        self.partial.move_to_end(trace_id)
        while len(self.partial) > 4 * self.max_open:
            self.partial.popitem(last=False)

    def _finish(self, trace_id: str, reason: str) -> None:
        """Finish a trace that never completed: keep its runs if an agent span ended, else count it lost."""
        trace = self.closed(trace_id)
        spans = list(trace.spans.values())
        if any(may_hold_run(s) for s in spans):
            self.writer.note("incomplete_written")
            self._process(spans, partial=trace_id in self.partial, piece=True)
            self._remember_partial(trace_id)  # its root may still arrive, with more of the run
        else:
            self.writer.drop(reason)
            if trace.agents:  # a run's model or tool spans: their run lost them
                self.lost.lose(trace_id, reason)

    def expire(self, now: float) -> None:
        """Finish traces idle for ``max_age``; in busy ones open that long, write the runs that ended.

        Age alone must not finish a trace: a run still going inside a long-lived root (a chat session,
        a stream) would be cut, its ended model and tool spans dropped and the rest stored as a run of
        its own. Idle is a safe sign; a busy trace only gives up the runs whose agent spans ended.
        """
        for trace_id, trace in list(self.open.items()):
            if now - trace.last_seen < self.max_age:
                break  # the least recently active first: the rest are busier still
            self._finish(trace_id, "trace_too_old")
        for trace_id, trace in list(self.open.items()):
            if now - trace.born >= self.max_age:
                trace.born = now
                self._write_ended_runs(trace_id, trace)

    def _write_ended_runs(self, trace_id: str, trace: OpenTrace) -> None:
        """Write the subtrees of the trace's ended agent spans that no ended agent span contains."""
        tops = [
            sid
            for sid, sp in trace.spans.items()
            if is_agent_span(sp) and not any(is_agent_span(trace.spans[a]) for a in ancestors(sp, trace.spans))
        ]
        trace.has_agent = False  # every agent span is a top or under one: all are taken
        if not tops:
            return
        written = self._take(trace, tops)
        self.writer.note("incomplete_written")
        self._process(written, partial=trace_id in self.partial, piece=True)
        self._remember_partial(trace_id)

    def finish_all(self) -> None:
        for trace_id in list(self.open):
            self._finish(trace_id, "open_at_shutdown")


class IdleAssembler(Assembler):
    """On the network: a trace's run is complete once nothing new arrived for a while (the receiver).

    A trace is complete once it holds an agent span and nothing new arrived for ``idle_seconds``
    (the agent span ends last in-process, but other services and nested agents may still be sending).
    A trace without an agent span after ``orphan_seconds`` is not an agent run: dropped, counted.
    Over a bound (``max_traces``, ``max_spans``, ``max_bytes``), the least recently active trace
    holding no agent's span goes first (``victim``), then the least recently active of the rest:
    completed early when it has its agent span, dropped otherwise. Thread-safe: handlers add, the
    sweeper takes.
    """

    def __init__(
        self,
        *,
        idle_seconds: float = 2.0,
        orphan_seconds: float = 60.0,
        max_traces: int = 10_000,
        max_spans: int = 200_000,
        max_bytes: int = 256 << 20,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.idle_seconds = idle_seconds
        self.orphan_seconds = max(orphan_seconds, idle_seconds)
        self.max_traces = max_traces
        self.max_spans = max_spans
        self.max_bytes = max_bytes
        self._clock = clock
        super().__init__()
        self._lock = threading.Lock()
        self.open_spans = 0
        self.completed_early = 0
        self.dropped: dict[str, int] = {}  # reason -> spans

    def _drop(self, reason: str, n: int) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + n

    def add(self, spans: Iterable[SpanData]) -> list[list[SpanData]]:
        """Hold ``spans``; returns the traces pushed out early by the bounds (complete them now)."""
        is_agent = is_agent_span
        early: list[list[SpanData]] = []
        with self._lock:
            now = self._clock()
            opened = self.open
            for span in spans:
                tr = opened.get(span.trace_id)
                if tr is None:
                    tr = self.opened(span.trace_id, now)
                else:
                    self.touch(span.trace_id, tr, now)
                if span.span_id in tr.spans:
                    self._drop("duplicate", 1)
                    continue
                tr.spans[span.span_id] = span
                self.held(span.trace_id, tr, span, span_size(span))
                self.open_spans += 1
                if not tr.has_agent and is_agent(span):
                    tr.has_agent = True
                elif not tr.maybe and not tr.has_agent and may_hold_run(span):
                    tr.maybe = True
            while opened and (
                len(opened) > self.max_traces or self.open_spans > self.max_spans or self.open_bytes > self.max_bytes
            ):
                tr = self.closed(self.victim())
                self.open_spans -= len(tr.spans)
                if tr.has_agent or tr.maybe:
                    self.completed_early += 1
                    early.append(list(tr.spans.values()))
                else:
                    self._drop("evicted", len(tr.spans))
        return early

    def take_complete(self, orphans: list[list[SpanData]] | None = None) -> list[list[SpanData]]:
        """Remove and return the complete traces. Orphans (no agent span after ``orphan_seconds``) go into
        ``orphans`` if given (the caller merges late parts of stored traces, ``drop_orphans`` the rest)."""
        out: list[list[SpanData]] = []
        with self._lock:
            now = self._clock()
            ready = []
            for trace_id, tr in self.open.items():
                idle = now - tr.last_seen
                if idle < self.idle_seconds:
                    break  # ordered by activity: everything after is busier still
                if tr.has_agent or idle >= self.orphan_seconds:
                    ready.append(trace_id)
            for trace_id in ready:
                tr = self.closed(trace_id)
                self.open_spans -= len(tr.spans)
                if tr.has_agent or tr.maybe:
                    out.append(list(tr.spans.values()))
                elif orphans is not None:
                    orphans.append(list(tr.spans.values()))
                else:
                    self._drop("no_agent_span", len(tr.spans))
        return out

    def drop_orphans(self, traces: Iterable[list[SpanData]]) -> None:
        """Count the orphans of ``take_complete``/``take_all`` that were part of no stored trace."""
        if n := sum(map(len, traces)):
            with self._lock:
                self._drop("no_agent_span", n)

    def take_all(self, orphans: list[list[SpanData]] | None = None) -> list[list[SpanData]]:
        """Every trace that holds an agent span, whatever its age (shutdown); orphans as ``take_complete``."""
        with self._lock:
            traces = list(self.open.values())
            self.clear()
            self.open_spans = 0
            out = []
            for tr in traces:
                if tr.has_agent or tr.maybe:
                    out.append(list(tr.spans.values()))
                elif orphans is not None:
                    orphans.append(list(tr.spans.values()))
                else:
                    self._drop("no_agent_span", len(tr.spans))
        return out

    @property
    def open_traces(self) -> int:
        return len(self.open)
