"""The production hook: ``HarvestingSpanProcessor``, an OpenTelemetry span processor.

Modelled on the SDK's ``BatchSpanProcessor``: the app's thread only hands the finished span to a bounded
queue (never raises, never blocks; a full queue refuses the span's whole trace and counts it), and the
rest happens elsewhere: spans are grouped per trace, finished traces recognized, sampled, redacted and
written in batches. Where that happens is the processor's one choice:

- in the **capture process** (``_capture_child``, the default where it can run): the app's thread
  encodes the span into a record (``_span_records``, a few µs, in proportion to the spans the app
  makes) and the records go down a pipe to a process of ours, so a busy app no longer starves the
  writing of the interpreter, nor waits for the GIL behind it (``CaptureProcess``);
- on a **worker thread** of the app's (``capture_process=False``, a ``keep`` predicate, a
  ``TraceStore`` object, no POSIX): the queue holds the SDK spans themselves, weighed by
  ``readable_size``, and the thread does what the capture process does.

Everything is bounded, in bytes as well as in counts (queue, open traces, spans and bytes per trace,
trace age), and every loss is counted in ``stats()``; a trace that lost a span is remembered
(``LostTraces``), its runs stored marked incomplete, unless the queue dropped it whole. A store that
cannot be opened (``open_store``) never stops the app: nothing is written, ``stats()`` says why.

When is a run finished? Children end before their parents, and agent spans nest, so the assembler waits
for the LOCAL ROOT of the spans it holds to end (a span with no parent, or a remote one): that root's
subtree is complete (``LocalRootAssembler``). A trace that sampling keeps whatever it holds is stored
whole in the store's inbox and normalized at the store's first read (``RunWriter.process_trace``). The
same ``RunWriter`` serves this processor, ``harvester ingest`` and the OTLP receiver.

Imports stay light: no click, no case/harvest/fixtures/replay/report, no pydantic model built, no
subprocess until a capture process is started.
"""

from __future__ import annotations

import atexit
import collections
import functools
import logging
import os
import sys
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

from .. import seam
from ..redact import Redactor
from ..spans import readable_size
from ..store import TraceStore
from ._assembly import LocalRootAssembler
from ._capture_thread import worker
from ._lost import QUEUE_FULL, LostTraces, Refused
from ._opened import UnusableStore, open_store
from ._pipeline import RunWriter
from ._span_records import Resources, span_record
from ._tally import Tally

if TYPE_CHECKING:
    from ..model import Run
    from ._capture_process import CaptureProcess

__all__ = ["HarvestingSpanProcessor"]

log = logging.getLogger("harvester.intake")
_REPLAY = seam.STATE  # read on every span: a replay running in this process stores nothing
_OPTIONS = ("store", "sample_rate", "redact", "batch_size", "flush_interval_s", "defer", "max_lost_traces", "bounds")


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
    remembered to mark their runs incomplete, ``batch_size`` runs per transaction, ``flush_interval_s``,
    and ``capture_process``: assemble, redact and write in a process beside the app (the default where
    it can: a POSIX system, a store path, no ``keep`` predicate; ``False``: on a thread of the app's).
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
        capture_process: bool = True,
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
        self._queue_dropped = Tally()  # traces refused whole at the queue
        self._unreadable = Tally()  # spans the capture process could not be handed (their traces refused)
        self._refused_here = Refused(max_lost_traces)  # the worker's side
        self._replay_dropped = Tally()
        self._refused: dict[int, None] = {}  # the app's side of ``Refused``: ids whose later spans are dropped
        self._shutdown = False
        self._process: CaptureProcess | None = None
        # A replay's process stores nothing (its spans are never production runs): no child to start, and
        # none to start inside a sealed replay, where a process spawn is refused.
        replaying = _REPLAY.harness or _REPLAY.active
        usable = self._store_error is None and keep is None and not replaying
        if capture_process and usable and not isinstance(store, TraceStore):
            bounds = (max_open_traces, max_trace_age_s, max_spans_per_trace, max_open_bytes, max_bytes_per_trace)
            options = (sample_rate, redact, batch_size, flush_interval_s, defer_normalize, max_lost_traces)
            path = os.fspath(store) if store is not None else None  # a URL with its password: the child connects
            self._process = _started(dict(zip(_OPTIONS, (path, *options, bounds))), self._lost)
        self._close_timeout = 30.0
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

    @property
    def capture_pid(self) -> int | None:
        """The capture process's pid, or None when capture runs on a thread of the app's."""
        return self._process.pid if self._process is not None else None

    def _start_worker(self) -> None:
        # (span, its bytes) for the worker thread; span records (bytes) for the capture process
        self._queue: collections.deque[Any] = collections.deque()
        self._resources = Resources()
        # The queue's bytes are what app threads added minus what the worker took: two counters, each
        # written by one side only, so the worker's never races the app's. App threads may race each
        # other on theirs (a lost update under-counts; the span count still bounds the queue).
        self._queued_in = 0
        self._queued_out = 0
        self._wake = threading.Event()
        self._flush_lock = threading.Lock()
        self._flush_waiters: list[threading.Event] = []
        self._captured = 0
        if self._process is not None:
            self._process.queue = self._queue
        run: Any = functools.partial(worker, self)
        if self._process is not None:
            from ._capture_process import sender

            run = functools.partial(sender, self, self._process)
        self._worker = threading.Thread(target=run, name="harvester-capture", daemon=True)
        self._worker.start()

    def _at_fork_reinit(self) -> None:
        """In a forked child: the parent's queued spans and open traces are the parent's to write."""
        self._assembler.clear()
        self._lost.clear()
        self.writer.reset()
        self._queue_dropped = Tally()
        self._refused = {}
        self._replay_dropped.after_fork()
        if self._process is not None:
            self._process.after_fork()
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
            refused = self._refused
            if refused and (tid := span.context.trace_id) in refused:  # the rest of a trace the queue refused
                if (parent := span.parent) is None or parent.is_remote:  # its local root: the trace is over
                    refused.pop(tid, None)
                return
            q, process = self._queue, self._process
            full = len(q) >= self.max_queue or self._shutdown
            if not full:
                if process is None:
                    item: Any = (span, readable_size(span))
                    size, taken = item[1], self._queued_out
                else:
                    try:
                        item = span_record(span, self._resources, q)
                    except Exception:  # a span that cannot be read or encoded: its trace is lost whole
                        self._unreadable.add()
                        self._refuse(span)
                        return
                    size, taken = len(item), process.taken_bytes
                full = bool(q) and self._queued_in - taken + size > self.max_queue_bytes  # one always fits
            if full:
                self._queue_dropped.add()
                self._refuse(span)
                return
            self._queued_in += size
            q.append(item)
            if process is not None:
                if len(q) >= 256:  # a batch: send it now if no one is (see ``CaptureProcess``)
                    process.send()
            elif len(q) >= self.batch_size and not self._wake.is_set():
                self._wake.set()
        except Exception:
            pass

    def _refuse(self, span: ReadableSpan) -> None:
        """Drop the trace of ``span`` whole: its later spans here, its earlier ones on the worker."""
        self._lost.note(span, QUEUE_FULL)
        if (parent := span.parent) is not None and not parent.is_remote:  # not its local root: more will come
            refused = self._refused
            refused[span.context.trace_id] = None
            if len(refused) > self._lost.capacity:
                refused.pop(next(iter(refused)), None)

    # -- control -------------------------------------------------------------------------------
    def force_flush(self, timeout_millis: int | None = 30_000) -> bool:
        """Write every run that has finished so far; False if that did not happen within the timeout."""
        if self._shutdown or not self._worker.is_alive():
            return False
        ms = _millis(timeout_millis)
        if self._process is not None:  # a barrier behind every span ended so far, answered once they are stored
            if (mine := self._process.barrier()) is None:
                return False
            self._wake.set()
            return self._process.wait_flushed(mine, ms / 1000)
        done = threading.Event()
        with self._flush_lock:
            self._flush_waiters.append(done)
        self._wake.set()
        if done.wait(ms / 1000):
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
        timeout = _millis(timeout_millis)
        if _exiting():  # the SDK's own exit hook passes its 30 s default: the process must not hang that long
            timeout = min(timeout, _EXIT_TIMEOUT_MS)
        self._close_timeout = timeout / 1000  # set before the worker wakes: it bounds the worker's last writes
        self._wake.set()
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
        process = self._process
        s = self.writer.stats() if process is None else process.stats()
        dropped = s.pop("dropped", {})
        if process is not None:
            for reason, tally in (("convert_error", self._unreadable), ("capture_process", process.dropped)):
                if n := tally.value():
                    dropped[reason] = dropped.get(reason, 0) + n
        if queue_full := self._queue_dropped.value():
            dropped["queue_full"] = queue_full
        if replayed := self._replay_dropped.value():
            dropped["replay"] = replayed
        out = {
            "lost_traces": self._lost.count + s.pop("lost_traces", 0),
            "captured": s.pop("captured", self._captured),
            "queued": len(self._queue),
            "queued_bytes": self._queued_in - (self._queued_out if process is None else process.taken_bytes),
            "open_traces": s.pop("open_traces", len(self._assembler.open)),
            "open_bytes": s.pop("open_bytes", self._assembler.open_bytes),
            **s,
            "dropped": dropped,
        }
        if forgotten := self._lost.forgotten + out.pop("lost_unmarked", 0):
            out["lost_unmarked"] = forgotten
        if process is not None and (process.ended or process.error):
            out["capture_process"] = process.error or "ended"
        if self._store_error is not None:
            out["store_unusable"] = self._store_error
        return out


def _started(config: dict[str, Any], lost: LostTraces) -> CaptureProcess | None:
    """The capture process, or None where it cannot run (then a worker thread does its work)."""
    from ._capture_process import CaptureProcess, can_start  # not at import: the hook's import stays light

    try:
        return CaptureProcess(config, collections.deque(), lost) if can_start() else None
    except Exception:  # options that do not pickle (a custom Redactor), no process to be had
        log.debug("harvester: no capture process; capturing on a thread", exc_info=True)
        return None
