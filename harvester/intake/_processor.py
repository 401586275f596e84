"""The production hook: ``HarvestingSpanProcessor``, an OpenTelemetry span processor.

Modelled on the SDK's ``BatchSpanProcessor``: the app's thread only appends the finished span to a
bounded deque (O(1), never raises, never blocks; a full queue drops and counts), and one daemon
thread does the rest: converts spans, groups them per trace, recognizes finished traces, samples,
redacts and writes them in batches. Everything is bounded, in bytes as well as in counts (queue,
open traces, spans and bytes per trace, trace age; a span's bytes are estimated on the app's thread
by ``readable_size``, from the lengths of its attribute values), and every loss is counted in
``stats()``; a trace that lost a span is remembered (``LostTraces``), its runs stored marked incomplete.
A store that cannot be opened (``open_store``) never stops the app: nothing is written, ``stats()`` says why.

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

After grouping (``LocalRootAssembler``), the same ``RunWriter`` (runs -> sample -> redact -> store)
serves this processor, ``harvester ingest`` and the OTLP receiver: the processor is a thin facade over
that shared engine, as the SDK's ``BatchSpanProcessor`` is over its batch processor.

Imports stay light: no click, no case/harvest/fixtures/replay/report, no pydantic model built.
"""

from __future__ import annotations

import atexit
import collections
import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, attach, set_value
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from .. import seam
from ..redact import Redactor
from ..spans import from_readable, held_size, readable_size
from ..store import TraceStore
from ._assembly import LocalRootAssembler
from ._lost import LostTraces
from ._opened import UnusableStore, open_store
from ._pipeline import RunWriter
from ._tally import Tally

if TYPE_CHECKING:
    from ..model import Run

__all__ = ["HarvestingSpanProcessor"]

log = logging.getLogger("harvester.intake")
_REPLAY = seam.STATE  # read on every span: a replay running in this process stores nothing


_EXIT_TIMEOUT_MS = 5_000  # the longest a shutdown waits once the interpreter is exiting (``_exiting``)


def _exiting() -> bool:
    """True once the interpreter has started to exit: threading's shutdown marks the main thread done
    before it joins the other threads and before any atexit handler runs (the SDK's exit hook among
    them), so a shutdown from then on, whoever calls it and with whatever timeout, is capped."""
    return not threading.main_thread().is_alive()


def _finalize_at_process_exit(processor: HarvestingSpanProcessor) -> None:
    """Shut ``processor`` down in multiprocessing's exit hooks: a multiprocessing child ends in
    ``os._exit()``, so atexit never runs there; multiprocessing's own finalizers do."""
    import multiprocessing.util

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
    the bounds: ``max_queue`` spans and ``max_queue_bytes`` waiting for the worker, ``max_open_traces``
    and ``max_open_bytes`` held for traces whose runs are not complete, ``max_spans_per_trace`` and
    ``max_bytes_per_trace``, ``max_trace_age_s``, ``max_lost_traces`` ids of traces that lost a span
    remembered to mark their runs incomplete, ``batch_size`` runs per transaction, ``flush_interval_s``.
    """

    def __init__(
        self,
        store: TraceStore | str | os.PathLike[str] | None = None,
        *,
        sample_rate: float = 1.0,
        keep: Callable[[Run], bool] | None = None,
        redact: bool | Redactor | Mapping[str, Any] | None = True,
        max_queue: int = 2_048,
        max_queue_bytes: int = 64 << 20,
        max_open_traces: int = 2_000,
        max_open_bytes: int = 64 << 20,
        max_trace_age_s: float = 600.0,
        max_spans_per_trace: int = 10_000,
        max_bytes_per_trace: int = 16 << 20,
        batch_size: int = 256,
        flush_interval_s: float = 1.0,
        defer_normalize: bool = True,
        max_lost_traces: int = 4_096,
    ) -> None:
        opened = open_store(store)
        self._owns_store = opened is not store  # opened here from a path: closed at shutdown
        self._store_error = opened.error if isinstance(opened, UnusableStore) else None
        self.writer = RunWriter(
            opened,
            sample_rate=sample_rate,
            keep=keep,
            redact=redact,
            batch_size=batch_size,
            flush_interval_s=flush_interval_s,
            defer=defer_normalize,
        )
        self.max_queue = max_queue
        self.max_queue_bytes = max_queue_bytes
        self.batch_size = batch_size
        self.flush_interval_s = flush_interval_s
        self._assembler = LocalRootAssembler(
            self.writer, max_open_traces, max_trace_age_s, max_spans_per_trace, max_open_bytes, max_bytes_per_trace
        )
        self._assembler.lost = self._lost = LostTraces(max_lost_traces)
        self._queue_dropped = Tally()
        self._replay_dropped = Tally()
        self._shutdown = False
        self._start_worker()
        weak_reinit = weakref.WeakMethod(self._at_fork_reinit)
        weak_shutdown = weakref.WeakMethod(self.shutdown)

        def _after_in_child() -> None:
            if (reinit := weak_reinit()) is not None:
                reinit()
                # A multiprocessing child clears the finalizers it inherits, then runs its after-fork
                # hooks: this one registers the child's own there. Only when multiprocessing is in use,
                # so the hook's import stays free of it.
                if "multiprocessing.util" in sys.modules:
                    processor = reinit.__self__  # type: ignore[attr-defined]  # a bound method, weakly held
                    sys.modules["multiprocessing.util"].register_after_fork(processor, _finalize_at_process_exit)

        def _at_exit() -> None:
            if (shutdown := weak_shutdown()) is not None:
                shutdown(timeout_millis=5_000)

        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_after_in_child)
        atexit.register(_at_exit)
        if "multiprocessing" in sys.modules:  # perhaps a spawned multiprocessing child: its exit skips atexit
            _finalize_at_process_exit(self)

    def _start_worker(self) -> None:
        self._queue: collections.deque[tuple[ReadableSpan, int]] = collections.deque()  # (span, its bytes)
        # The queue's bytes are what app threads added minus what the worker took: two counters, each
        # written by one side only, so the worker's never races the app's. App threads may race each
        # other on theirs (a lost update under-counts; the span count still bounds the queue).
        self._queued_in = 0
        self._queued_out = 0
        self._wake = threading.Event()
        self._flush_lock = threading.Lock()
        self._flush_waiters: list[threading.Event] = []
        self._captured = 0
        self._worker = threading.Thread(target=self._run, name="harvester-capture", daemon=True)
        self._worker.start()

    def _at_fork_reinit(self) -> None:
        """In a forked child: the parent's queued spans and open traces are the parent's to write."""
        self._assembler.clear()
        self._lost.clear()
        self.writer.reset()
        self._queue_dropped = Tally()
        self._replay_dropped.after_fork()
        if not self._shutdown:
            self._start_worker()

    # -- the app's thread ----------------------------------------------------------------------
    def on_start(self, span: Any, parent_context: Any = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        try:
            if _REPLAY.active or _REPLAY.traces or _REPLAY.harness:  # a replay's spans are never production runs
                if seam.replay_span_ended(span):
                    self._replay_dropped.add()
                    return
            q = self._queue
            full = len(q) >= self.max_queue or self._shutdown
            if not full:
                size = readable_size(span)
                full = bool(q) and self._queued_in - self._queued_out + size > self.max_queue_bytes  # one always fits
            if full:
                self._queue_dropped.add()
                self._lost.note(span, "queue_full")
                return
            self._queued_in += size
            q.append((span, size))
            if len(q) >= self.batch_size and not self._wake.is_set():
                self._wake.set()
        except Exception:
            pass

    # -- the worker ----------------------------------------------------------------------------
    def _run(self) -> None:
        """The worker loop.

        A run is committed within ``flush_interval_s`` of its end (plus the time a write takes), which
        is all a process killed by SIGTERM loses (``Pool.terminate``; see docs/capture.md): the worker
        wakes every half interval, and writes what it drained at most half an interval after.
        The flush waiters are taken BEFORE the queue is drained: a waiter that arrives while an
        iteration is already past its drain is answered by the next iteration (its ``force_flush``
        set the wake event), never by this one, which has not seen the spans ended before it.
        ``BaseException`` is caught too: user code runs here (``keep``, a custom ``Redactor``), and a
        ``SystemExit`` from it would end the thread, and with it all capture, silently.
        """
        attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))  # our own SQLite writes are not traced
        half = self.flush_interval_s / 2
        due: float | None = None  # when the runs buffered now must be written
        while True:
            self._wake.wait(half if due is None else max(due - time.monotonic(), 0.0))
            self._wake.clear()
            stopping = self._shutdown
            with self._flush_lock:
                waiters, self._flush_waiters = self._flush_waiters, []
            drained = time.monotonic()
            try:
                self._drain()
                self._assembler.expire(time.monotonic())
                if stopping:
                    self._assembler.finish_all()
                self._lost.take()  # counted even when their traces are never written
            except BaseException:
                log.debug("harvester capture worker error", exc_info=True)
                self.writer.drop("internal_error")
            if due is None and self.writer.buffered:
                due = drained + half  # they ended before this drain, and at most half an interval before
            try:
                if (
                    stopping
                    or waiters
                    or self.writer.buffered >= self.batch_size
                    or (due is not None and time.monotonic() >= due)
                ):
                    self.writer.flush()
                    due = None
            except BaseException:
                log.debug("harvester capture worker error", exc_info=True)
                self.writer.drop("internal_error")
            if not self.writer.buffered:
                due = None  # written meanwhile (a full batch is written as it fills)
            for w in waiters:
                w.set()
            if stopping:
                return

    def _drain(self) -> None:
        q = self._queue
        add = self._assembler.add
        now = time.monotonic()
        while q:
            rs, size = q.popleft()
            self._captured += 1
            self._queued_out += size
            if self._store_error is not None:  # nothing can be written: spend nothing on it
                self.writer.drop("store_unusable")
                self._lost.note(rs, "store_unusable")
                continue
            try:
                parent = rs.parent
                span = from_readable(rs)
            except Exception:
                self.writer.drop("convert_error")
                self._lost.note(rs, "convert_error")
                continue
            try:
                add(span, parent is None or parent.is_remote, now, held_size(size))
            except Exception:
                log.debug("harvester could not process a span", exc_info=True)
                self.writer.drop("internal_error")
                self._lost.note(rs, "internal_error")

    # -- control -------------------------------------------------------------------------------
    def force_flush(self, timeout_millis: int | None = 30_000) -> bool:
        """Write every run that has finished so far; False if that did not happen within the timeout."""
        if self._shutdown or not self._worker.is_alive():
            return False
        millis = _millis(timeout_millis)
        done = threading.Event()
        with self._flush_lock:
            self._flush_waiters.append(done)
        self._wake.set()
        if done.wait(millis / 1000):
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
        if _exiting():  # the SDK's own exit hook passes its 30 s default: the process must not hang that long
            timeout = min(timeout, _EXIT_TIMEOUT_MS)
        self._worker.join(timeout / 1000)
        if not self._worker.is_alive():
            # An on_end that saw _shutdown still False may have appended after the worker's last
            # drain: those spans will never be processed, so count them instead of leaving them.
            late = len(self._queue)
            if late:
                for entry in self._queue:
                    self._lost.note(entry[0] if entry else None, "after_shutdown")
                self._queue.clear()
                self.writer.drop("after_shutdown", late)
                self._lost.take()
            if self._owns_store:
                self.writer.store.close()

    def stats(self) -> dict[str, Any]:
        s = self.writer.stats()
        dropped = s.pop("dropped")
        if queue_full := self._queue_dropped.value():
            dropped["queue_full"] = queue_full
        if replayed := self._replay_dropped.value():
            dropped["replay"] = replayed
        out = {
            "lost_traces": self._lost.count + s.pop("lost_traces", 0),
            "captured": self._captured,
            "queued": len(self._queue),
            "queued_bytes": self._queued_in - self._queued_out,
            "open_traces": len(self._assembler.open),
            "open_bytes": self._assembler.open_bytes,
            **s,
            "dropped": dropped,
        }
        if forgotten := self._lost.forgotten:
            out["lost_unmarked"] = forgotten
        if self._store_error is not None:
            out["store_unusable"] = self._store_error
        return out
