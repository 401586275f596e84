"""The production hook: ``HarvestingSpanProcessor``, an OpenTelemetry span processor.

Modelled on the SDK's ``BatchSpanProcessor``: the app's thread only appends the finished span to a
bounded deque (O(1), never raises, never blocks; a full queue drops and counts), and one daemon
thread does the rest: converts spans, groups them per trace, recognizes finished traces, samples,
redacts and writes them in batches. Everything is bounded (queue, open traces, spans per trace,
trace age) and every loss is counted in ``stats()``.

Normalizing a trace into runs costs more CPU than all the rest, so the worker does it only where it
must judge the runs: a trace that sampling keeps whatever it holds is stored whole (redacted) in the
store's inbox, and the store's first read normalizes it (``TraceStore.settle``), exactly as ingest
would have. See ``RunWriter.process_trace``.

When is a run finished? Children end before their parents, and agent spans nest (OpenLLMetry's
``invoke_agent`` > ``workflow``, openai-agents' AGENT > CHAIN > AGENT are ONE run), so an agent span
ending says nothing about whether an outer agent span is still open. The worker therefore waits for
the LOCAL ROOT of the spans it holds to end: a span with no parent, or whose parent is remote (in
another process). That root's subtree is complete; the outermost agent spans in it are the runs
(sibling runs under one request come out together). Spans whose root never arrives (a parent
dropped, a long-lived root) are finished by age or at shutdown: kept if they contain an agent span
(a half-seen failure is still worth keeping), dropped and counted otherwise.

After grouping, the same ``RunWriter`` (runs -> sample -> redact -> store) serves this processor,
``harvester ingest`` and the OTLP receiver, so a run is treated identically however it arrived.

Imports stay light: no click, no case/harvest/fixtures/replay/report.
"""

from __future__ import annotations

import atexit
import collections
import itertools
import logging
import multiprocessing.util
import os
import threading
import time
import weakref
from typing import Any, Callable, Mapping, Sequence

from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, attach, set_value
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from . import seam
from .conventions import ancestors, is_agent_span, may_hold_run, run_data_from_spans
from .errors import StoreError
from .model import Run, data_failed
from .redact import Redactor
from .spans import SpanData, from_readable
from .store import TraceStore, inbox_row, merged_spans, run_rows, spans_blob

log = logging.getLogger(__name__)
_REPLAY = seam.STATE  # read on every span: a replay running in this process stores nothing


def sampled_in(trace_id: str, rate: float) -> bool:
    """Keep a trace at ``rate``, decided by its id (like OTel's ratio sampler: the low 64 bits)."""
    if rate >= 1.0:
        return True
    if rate <= 0.0:
        return False
    try:
        low = int(trace_id[-16:], 16)
    except ValueError:
        return False
    return low < rate * (1 << 64)


class RunWriter:
    """The pipeline after grouping: a finished trace's spans -> runs -> sample -> redact -> store.

    ``submit(spans)`` takes every span of one finished trace (or local subtree); runs are buffered
    and written in one transaction per ``batch_size`` runs, or when ``flush_interval_s`` has passed
    since the oldest buffered run; call ``flush()`` when you want them written now. A store error
    is counted (``dropped["store_error"]``) and never raised from ``submit``. Thread-safe.

    Sampling: every failed run (``Run.failed``) and every run ``keep(run)`` flags is kept; other
    runs are kept at ``sample_rate``, decided by trace id so a trace is kept or dropped whole.
    """

    def __init__(self, store: TraceStore | str | os.PathLike[str] | None = None, *, sample_rate: float = 1.0,
                 keep: Callable[[Run], bool] | None = None,
                 redact: bool | Redactor | Mapping[str, Any] | None = True, batch_size: int = 512,
                 flush_interval_s: float = 1.0, defer: bool = False) -> None:
        if not 0.0 <= sample_rate <= 1.0:
            raise ValueError(f"sample_rate must be between 0 and 1, not {sample_rate!r}")
        self._owns_store = not isinstance(store, TraceStore)
        self.store = store if isinstance(store, TraceStore) else TraceStore(store)
        self.sample_rate = sample_rate
        self.keep = keep
        self.redactor = Redactor.from_option(redact)
        self.batch_size = batch_size
        self.flush_interval_s = flush_interval_s
        # Deferring needs the reader to redact the runs exactly as we would: the built-in rules, unkeyed.
        self.defer = defer and (self.redactor is None or self.redactor.is_builtin_only())
        self._reset()

    def _reset(self) -> None:
        """Fresh buffer, counters and lock (also in a forked child: those were the parent's)."""
        self._pending: list[tuple[Any, ...]] = []  # rows ready for the store, serialized outside its lock
        self._inbox: list[bytes] = []  # traces kept whole (``spans_blob``), to normalize at the first read
        self._inbox_pieces = 0  # of them, pieces of a trace written in parts
        self._pending_since = 0.0
        self._replace: set[str] = set()  # traces whose pending rows replace every run stored for them
        self._lock = threading.RLock()
        self.counts: dict[str, int] = {"traces": 0, "runs_seen": 0, "written": 0, "sampled_out": 0,
                                       "kept_failed": 0}
        if self.defer:
            self.counts["deferred"] = 0
        self.dropped: dict[str, int] = {}

    def drop(self, reason: str, n: int = 1) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + n

    def _wanted(self, data: dict[str, Any]) -> bool:
        if data_failed(data):
            self.counts["kept_failed"] += 1
            return True
        if self.keep is not None:
            try:
                if self.keep(Run.model_validate(data)):
                    return True
            except BaseException:  # noqa: BLE001 - a broken predicate (even sys.exit()) must not lose the run or kill the worker
                self.counts["keep_errors"] = self.counts.get("keep_errors", 0) + 1
        if sampled_in(data["trace_id"], self.sample_rate):
            return True
        self.counts["sampled_out"] += 1
        return False

    def merge_stored(self, spans: list[SpanData]) -> list[SpanData]:
        """``spans`` with the spans already stored for their trace (written earlier in parts), each once.

        Buffered rows are flushed first: a part written a moment ago must be read back too.
        """
        if not spans:
            return spans
        self.flush()
        stored = self.store.spans_of([spans[0].trace_id]).get(spans[0].trace_id)
        return merged_spans(stored, spans) if stored else spans

    def process_trace(self, spans: Sequence[SpanData], *, replace: bool = False, partial: bool = False,
                      piece: bool = False) -> int | None:
        """Normalize, sample, redact and serialize one trace's spans into the buffer; None if it had no agent run.

        Runs stay in their plain-dict form throughout (see ``run_data_from_spans``): a ``Run`` model
        is built only for a ``keep`` predicate or a run the redactor must rewrite. ``partial``: part
        of the trace may be stored already; it is read back and the trace's runs replaced. ``piece``:
        more of the trace may follow (it was finished before its root ended).

        With ``defer``, a trace sampled in by its id is kept whatever its runs hold, so nothing here
        needs to read them: its redacted spans go to the store's inbox, and the first read normalizes
        them (returns 0). Only a trace sampled out is normalized here, to keep its failed runs. A
        piece of a trace is marked as such, so the reader settles the pieces in the order written.
        """
        with self._lock:
            self.counts["traces"] += 1
            if self.defer and spans and sampled_in(spans[0].trace_id, self.sample_rate):
                return self._defer(spans, piece or partial)
            if partial:
                spans, replace = self.merge_stored(list(spans)), True
            try:
                runs = run_data_from_spans(spans)
            except Exception:  # noqa: BLE001 - the conventions code never should, but one trace never kills us
                log.debug("could not normalize a trace", exc_info=True)
                self.drop("normalize_error")
                return 0
            if not runs:
                self.drop("no_agent")
                return None
            self.counts["runs_seen"] += len(runs)
            if replace:  # every run of the trace is read again here: the stored ones go
                self._replace.add(runs[0]["trace_id"])
            wanted = [self._wanted(r) for r in runs]
            if not any(wanted):
                return 0
            rows = run_rows(runs, spans, self.redactor, self.drop, wanted)
            self._buffer(rows, self._pending)
            return len(rows)

    def _defer(self, spans: Sequence[SpanData], piece: bool) -> int:
        try:
            kept = self.redactor.redact_spans(spans) if self.redactor is not None else spans
        except Exception:  # noqa: BLE001 - a trace that cannot be redacted is never written
            log.debug("could not redact a trace", exc_info=True)
            self.drop("redact_error_traces")
            return 0
        try:
            trace = spans_blob(kept)
        except Exception:  # noqa: BLE001
            log.debug("could not serialize a trace", exc_info=True)
            self.drop("serialize_error_traces")
            return 0
        self.counts["deferred"] += 1
        self._inbox_pieces += piece
        self._buffer([trace], self._inbox)
        return 0

    def _buffer(self, rows: list[Any], into: list[Any]) -> None:
        if not self._pending and not self._inbox:
            self._pending_since = time.monotonic()
        into.extend(rows)
        if len(self._pending) + len(self._inbox) >= self.batch_size:
            self.flush()

    def submit(self, spans: list[SpanData]) -> None:
        """The receiver's entry point: one finished trace. Never raises."""
        try:
            self.process_trace(spans)
            if (self._pending or self._inbox) and time.monotonic() - self._pending_since >= self.flush_interval_s:
                self.flush()
        except Exception:  # noqa: BLE001
            log.debug("dropped a trace", exc_info=True)
            self.drop("internal_error")

    def flush(self, *, raise_errors: bool = False) -> int:
        """Write the buffered runs and deferred traces in one transaction; on a store error count them lost, go on."""
        with self._lock:
            batch, self._pending = self._pending, []
            inbox, self._inbox = self._inbox, []
            pieces, self._inbox_pieces = self._inbox_pieces, 0
            replace, self._replace = self._replace, set()
            if not batch and not inbox:
                return 0
            try:
                if replace or inbox:
                    rows = [inbox_row(inbox, redacted=self.redactor is not None, pieces=pieces)] if inbox else []
                    self.store.add_many(batch, replace_traces=replace, inbox=rows)
                else:  # ingest's workers hand rows to a sink with only this form
                    self.store.add_many(batch)
            except Exception as exc:  # noqa: BLE001 - a full disk or a locked file never reaches the app
                if batch:
                    self.drop("store_error", len(batch))
                if inbox:
                    self.drop("store_error_traces", len(inbox))
                if raise_errors:
                    raise exc if isinstance(exc, StoreError) else StoreError(f"{self.store.path}: {exc}") from exc
                log.warning("harvester: could not store %d runs and %d traces: %s", len(batch), len(inbox), exc)
                return 0
            self.counts["written"] += len(batch)
            return len(batch) + len(inbox)

    def close(self, timeout: float | None = None) -> None:
        self.flush()
        if self._owns_store:
            self.store.close()

    def stats(self) -> dict[str, Any]:
        """The counters, without taking the lock: a flush holds it while the store waits on a busy
        file (up to minutes), and the app's health check must not wait with it. Copying a dict of
        str keys is atomic under the GIL."""
        return {**self.counts, "dropped": dict(self.dropped)}


class _OpenTrace:
    __slots__ = ("spans", "children", "born", "last", "size")

    def __init__(self, now: float) -> None:
        self.spans: dict[str, SpanData] = {}
        self.children: dict[str, list[str]] = {}
        self.born = now  # since when its runs have waited (reset when the ended ones are written)
        self.last = now  # its latest span
        self.size = 0


class _Assembler:
    """Open traces, keyed by trace id, the least recently active first (for eviction and expiry).

    A trace written before its root ended (evicted, idle, or its finished runs written while it stays
    open) is remembered in ``partial``: when more of it is written, its stored spans are read back and
    its runs replaced, so a run cut in two is stored whole, never as two halves.
    """

    def __init__(self, writer: RunWriter, max_open_traces: int, max_trace_age_s: float,
                 max_spans_per_trace: int) -> None:
        self.writer = writer
        self.max_open = max_open_traces
        self.max_age = max_trace_age_s
        self.max_spans = max_spans_per_trace
        self.open: dict[str, _OpenTrace] = {}
        self.partial: collections.OrderedDict[str, None] = collections.OrderedDict()

    def add(self, span: SpanData, local_root: bool, now: float) -> None:
        trace = self.open.get(span.trace_id)
        if trace is None:
            while len(self.open) >= self.max_open:
                self._finish(next(iter(self.open)), "too_many_open_traces")
            trace = self.open[span.trace_id] = _OpenTrace(now)
        elif trace.last != now:  # the most recently active last: expiry and eviction take the idle first
            trace.last = now
            del self.open[span.trace_id]
            self.open[span.trace_id] = trace
        if trace.size >= self.max_spans and not local_root and not is_agent_span(span):
            self.writer.drop("trace_too_big")  # agent and root spans are always kept: they bound the run
            return
        trace.spans[span.span_id] = span
        trace.size += 1
        if span.parent_id is not None and not local_root:
            trace.children.setdefault(span.parent_id, []).append(span.span_id)
        if local_root:
            self._complete(span.trace_id, trace, span.span_id)

    @staticmethod
    def _take(trace: _OpenTrace, roots: list[str]) -> list[SpanData]:
        """Remove and return the spans of the subtrees under ``roots``."""
        taken: list[SpanData] = []
        todo = list(roots)
        while todo:
            sid = todo.pop()
            sp = trace.spans.pop(sid, None)
            if sp is not None:
                taken.append(sp)
                trace.size -= 1
            todo.extend(trace.children.pop(sid, ()))
        return taken

    def _complete(self, trace_id: str, trace: _OpenTrace, root_id: str) -> None:
        subtree = self._take(trace, [root_id])
        if not trace.spans:
            del self.open[trace_id]
        if trace_id in self.partial:
            self.partial.pop(trace_id)
            self._process(subtree, partial=True)  # what was written of it before joins what came since
        else:
            self._write(subtree)

    def _write(self, spans: list[SpanData]) -> None:
        if any(may_hold_run(s) for s in spans):
            self._process(spans)
        else:
            self.writer.drop("no_agent")

    def _process(self, spans: list[SpanData], *, partial: bool = False, piece: bool = False) -> None:
        """``process_trace``, counted and contained: ``expire`` and ``finish_all`` loop over many
        traces, and an error escaping from one would skip the rest and the final flush."""
        try:
            self.writer.process_trace(spans, partial=partial, piece=piece)
        except Exception:  # noqa: BLE001
            log.debug("harvester could not process a trace", exc_info=True)
            self.writer.drop("internal_error")

    def _remember_partial(self, trace_id: str) -> None:
        self.partial[trace_id] = None
        self.partial.move_to_end(trace_id)
        while len(self.partial) > 4 * self.max_open:
            self.partial.popitem(last=False)

    def _finish(self, trace_id: str, reason: str) -> None:
        """Finish a trace that never completed: keep its runs if an agent span ended, else count it lost."""
        trace = self.open.pop(trace_id)
        spans = list(trace.spans.values())
        if any(may_hold_run(s) for s in spans):
            self.writer.counts["incomplete_written"] = self.writer.counts.get("incomplete_written", 0) + 1
            self._process(spans, partial=trace_id in self.partial, piece=True)
            self._remember_partial(trace_id)  # its root may still arrive, with more of the run
        else:
            self.writer.drop(reason)

    def expire(self, now: float) -> None:
        """Finish traces idle for ``max_age``; in busy ones open that long, write the runs that ended.

        Age alone must not finish a trace: a run still going inside a long-lived root (a chat session,
        a stream) would be cut, its ended model and tool spans dropped and the rest stored as a run of
        its own. Idle is a safe sign; a busy trace only gives up the runs whose agent spans ended.
        """
        for trace_id, trace in list(self.open.items()):
            if now - trace.last < self.max_age:
                break  # the least recently active first: the rest are busier still
            self._finish(trace_id, "trace_too_old")
        for trace_id, trace in list(self.open.items()):
            if now - trace.born >= self.max_age:
                trace.born = now
                self._write_ended_runs(trace_id, trace)

    def _write_ended_runs(self, trace_id: str, trace: _OpenTrace) -> None:
        """Write the subtrees of the trace's ended agent spans that no ended agent span contains."""
        tops = [sid for sid, sp in trace.spans.items() if is_agent_span(sp)
                and not any(is_agent_span(trace.spans[a]) for a in ancestors(sp, trace.spans))]
        if not tops:
            return
        written = self._take(trace, tops)
        self.writer.counts["incomplete_written"] = self.writer.counts.get("incomplete_written", 0) + 1
        self._process(written, partial=trace_id in self.partial, piece=True)
        self._remember_partial(trace_id)

    def finish_all(self) -> None:
        for trace_id in list(self.open):
            self._finish(trace_id, "open_at_shutdown")


# Set when the interpreter starts to exit (threading's exit hooks run before any atexit handler): a
# shutdown from then on, whoever calls it and with whatever timeout, waits at most _EXIT_TIMEOUT_MS.
_exiting = False
_EXIT_TIMEOUT_MS = 5_000


def _mark_exiting() -> None:
    global _exiting
    _exiting = True


try:
    threading._register_atexit(_mark_exiting)  # type: ignore[attr-defined]
except (AttributeError, RuntimeError):  # pragma: no cover - another Python, or already exiting
    pass


def _finalize_at_process_exit(processor: "HarvestingSpanProcessor") -> None:
    weak_shutdown = weakref.WeakMethod(processor.shutdown)

    def shutdown() -> None:
        if (method := weak_shutdown()) is not None:
            method(timeout_millis=5_000)

    multiprocessing.util.Finalize(processor, shutdown, exitpriority=100)


def _millis(timeout_millis: Any) -> float:
    """A timeout as the SDK may pass it: ``None`` (the SDK's "no timeout given") is 30 s; never below 0."""
    return 30_000.0 if timeout_millis is None else max(float(timeout_millis), 0.0)


class HarvestingSpanProcessor(SpanProcessor):
    """Capture agent runs from this process's spans into the trace store.

    ``provider.add_span_processor(HarvestingSpanProcessor())`` is the whole setup. Options:
    ``store`` (a path or a ``TraceStore``; default ``.harvester/traces.db`` or ``HARVESTER_STORE``),
    ``sample_rate`` for successful runs (failures are always kept), ``keep`` (a predicate that keeps
    any run it flags), ``redact`` (``True``, ``False``, a ``Redactor`` or its rules as a mapping),
    ``defer_normalize`` (keep sampled-in traces whole for the store's first read to normalize), and
    the bounds: ``max_queue`` spans waiting for the worker, ``max_open_traces``, ``max_trace_age_s``,
    ``max_spans_per_trace``, ``batch_size`` runs per transaction, ``flush_interval_s``.
    """

    def __init__(self, store: TraceStore | str | os.PathLike[str] | None = None, *, sample_rate: float = 1.0,
                 keep: Callable[[Run], bool] | None = None,
                 redact: bool | Redactor | Mapping[str, Any] | None = True, max_queue: int = 20_000,
                 max_open_traces: int = 2_000, max_trace_age_s: float = 600.0, max_spans_per_trace: int = 10_000,
                 batch_size: int = 256, flush_interval_s: float = 1.0, defer_normalize: bool = True) -> None:
        self.writer = RunWriter(store, sample_rate=sample_rate, keep=keep, redact=redact, batch_size=batch_size,
                                flush_interval_s=flush_interval_s, defer=defer_normalize)
        self.max_queue = max_queue
        self.batch_size = batch_size
        self.flush_interval_s = flush_interval_s
        self._assembler = _Assembler(self.writer, max_open_traces, max_trace_age_s, max_spans_per_trace)
        self._queue_dropped = itertools.count()
        self._replay_dropped = itertools.count()
        self._shutdown = False
        self._start_worker()
        weak_reinit = weakref.WeakMethod(self._at_fork_reinit)
        weak_shutdown = weakref.WeakMethod(self.shutdown)

        def _after_in_child() -> None:
            if (reinit := weak_reinit()) is not None:
                reinit()

        def _at_exit() -> None:
            if (shutdown := weak_shutdown()) is not None:
                shutdown(timeout_millis=5_000)

        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_after_in_child)
        atexit.register(_at_exit)
        # A multiprocessing child ends in os._exit(): atexit never runs there, multiprocessing's own
        # finalizers do (and its fork clears the parent's, so each child registers its own).
        _finalize_at_process_exit(self)
        multiprocessing.util.register_after_fork(self, _finalize_at_process_exit)

    def _start_worker(self) -> None:
        self._queue: collections.deque[ReadableSpan] = collections.deque()
        self._wake = threading.Event()
        self._flush_lock = threading.Lock()
        self._flush_waiters: list[threading.Event] = []
        self._captured = 0
        self._worker = threading.Thread(target=self._run, name="harvester-capture", daemon=True)
        self._worker.start()

    def _at_fork_reinit(self) -> None:
        """In a forked child: the parent's queued spans and open traces are the parent's to write."""
        self._assembler.open.clear()
        self.writer._reset()
        self._queue_dropped = itertools.count()
        if not self._shutdown:
            self._start_worker()

    # -- the app's thread ----------------------------------------------------------------------
    def on_start(self, span: Any, parent_context: Any = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        try:
            if _REPLAY.active or _REPLAY.traces or _REPLAY.harness:  # a replay's spans are never production runs
                if seam.replay_trace(span.context.trace_id):
                    next(self._replay_dropped)
                    return
            q = self._queue
            if len(q) >= self.max_queue or self._shutdown:
                next(self._queue_dropped)
                return
            q.append(span)
            if len(q) >= self.batch_size and not self._wake.is_set():
                self._wake.set()
        except Exception:  # noqa: BLE001 - the app never sees our failures
            pass

    # -- the worker ----------------------------------------------------------------------------
    def _run(self) -> None:
        """The worker loop.

        The flush waiters are taken BEFORE the queue is drained: a waiter that arrives while an
        iteration is already past its drain is answered by the next iteration (its ``force_flush``
        set the wake event), never by this one, which has not seen the spans ended before it.
        ``BaseException`` is caught too: user code runs here (``keep``, a custom ``Redactor``), and a
        ``SystemExit`` from it would end the thread, and with it all capture, silently.
        """
        attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))  # our own SQLite writes are not traced
        last_flush = time.monotonic()
        while True:
            self._wake.wait(self.flush_interval_s)
            self._wake.clear()
            stopping = self._shutdown
            with self._flush_lock:
                waiters, self._flush_waiters = self._flush_waiters, []
            try:
                self._drain()
                now = time.monotonic()
                self._assembler.expire(now)
                if stopping:
                    self._assembler.finish_all()
            except BaseException:  # noqa: BLE001 - the worker must outlive any bug
                log.debug("harvester capture worker error", exc_info=True)
                self.writer.drop("internal_error")
            try:
                now = time.monotonic()
                if stopping or waiters or now - last_flush >= self.flush_interval_s \
                        or len(self.writer._pending) + len(self.writer._inbox) >= self.batch_size:
                    self.writer.flush()
                    last_flush = now
            except BaseException:  # noqa: BLE001
                log.debug("harvester capture worker error", exc_info=True)
                self.writer.drop("internal_error")
            for w in waiters:
                w.set()
            if stopping:
                return

    def _drain(self) -> None:
        q = self._queue
        add = self._assembler.add
        now = time.monotonic()
        while q:
            rs = q.popleft()
            self._captured += 1
            try:
                parent = rs.parent
                span = from_readable(rs)
            except Exception:  # noqa: BLE001
                self.writer.drop("convert_error")
                continue
            try:
                add(span, parent is None or parent.is_remote, now)
            except Exception:  # noqa: BLE001
                log.debug("harvester could not process a span", exc_info=True)
                self.writer.drop("internal_error")

    # -- control -------------------------------------------------------------------------------
    def force_flush(self, timeout_millis: int | None = 30_000) -> bool:
        """Write every run that has finished so far; False if that did not happen within the timeout."""
        if self._shutdown or not self._worker.is_alive():
            return False
        timeout_millis = _millis(timeout_millis)
        done = threading.Event()
        with self._flush_lock:
            self._flush_waiters.append(done)
        self._wake.set()
        if done.wait(timeout_millis / 1000):
            return True
        # Timed out (the store is locked, say): withdraw, or an app that flushes after every
        # request would pile up one Event per request for as long as the worker is stuck.
        with self._flush_lock:
            try:
                self._flush_waiters.remove(done)
            except ValueError:
                pass  # the worker took it meanwhile
        return done.is_set()

    def shutdown(self, timeout_millis: int = 30_000) -> None:
        """Stop capturing; write what finished (and open traces that have an agent span). Idempotent."""
        if self._shutdown:
            return
        self._shutdown = True
        self._wake.set()
        timeout = _millis(timeout_millis)
        if _exiting:  # the SDK's own exit hook passes its 30 s default: the process must not hang that long
            timeout = min(timeout, _EXIT_TIMEOUT_MS)
        self._worker.join(timeout / 1000)
        if not self._worker.is_alive():
            # An on_end that saw _shutdown still False may have appended after the worker's last
            # drain: those spans will never be processed, so count them instead of leaving them.
            late = len(self._queue)
            if late:
                self._queue.clear()
                self.writer.drop("after_shutdown", late)
            if self.writer._owns_store:
                self.writer.store.close()

    def stats(self) -> dict[str, Any]:
        s = self.writer.stats()
        dropped = s.pop("dropped")
        queue_full = int(repr(self._queue_dropped)[6:-1])  # itertools.count has no peek
        if queue_full:
            dropped["queue_full"] = queue_full
        replayed = int(repr(self._replay_dropped)[6:-1])
        if replayed:
            dropped["replay"] = replayed
        return {"captured": self._captured, "queued": len(self._queue), "open_traces": len(self._assembler.open),
                **s, "dropped": dropped}
