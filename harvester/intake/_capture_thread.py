"""The processor's worker thread (its mode without a capture process): spans from the queue to the store.

The processor's own state (``proc``) is what it reads: the queue, the assembler, the writer, the wake
event and the flush waiters (see ``HarvestingSpanProcessor``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, attach, set_value

from ..spans import from_readable, held_size

__all__ = ["drain", "worker"]

log = logging.getLogger("harvester.intake")


def worker(proc: Any) -> None:
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
    half = proc.flush_interval_s / 2
    due: float | None = None  # when the runs buffered now must be written
    while True:
        proc._wake.wait(half if due is None else max(due - time.monotonic(), 0.0))
        proc._wake.clear()
        stopping = proc._shutdown
        with proc._flush_lock:
            waiters, proc._flush_waiters = proc._flush_waiters, []
        drained = time.monotonic()
        try:
            drain(proc)
            proc._refused_here.take(proc._lost, proc._assembler)
            proc._assembler.expire(time.monotonic())
            if stopping:
                proc._assembler.finish_all()
            proc._lost.take()  # counted even when their traces are never written
        except BaseException:
            log.debug("harvester capture worker error", exc_info=True)
            proc.writer.drop("internal_error")
        if due is None and proc.writer.buffered:
            due = drained + half  # they ended before this drain, and at most half an interval before
        try:
            if (
                stopping
                or waiters
                or proc.writer.buffered >= proc.batch_size
                or (due is not None and time.monotonic() >= due)
            ):
                proc.writer.flush()
                due = None
        except BaseException:
            log.debug("harvester capture worker error", exc_info=True)
            proc.writer.drop("internal_error")
        if not proc.writer.buffered:
            due = None  # written meanwhile (a full batch is written as it fills)
        for w in waiters:
            w.set()
        if stopping:
            return


def drain(proc: Any) -> None:
    q = proc._queue
    add = proc._assembler.add
    now = time.monotonic()
    while q:
        rs, size = q.popleft()
        proc._captured += 1
        proc._queued_out += size
        if proc._store_error is not None:  # nothing can be written: spend nothing on it
            proc.writer.drop("store_unusable")
            proc._lost.note(rs, "store_unusable")
            continue
        try:
            parent = rs.parent
            span = from_readable(rs)
        except Exception:
            proc.writer.drop("convert_error")
            proc._lost.note(rs, "convert_error")
            continue
        if proc._refused_here.drops(span.trace_id, parent is None or parent.is_remote):
            continue
        try:
            add(span, parent is None or parent.is_remote, now, held_size(size))
        except Exception:
            log.debug("harvester could not process a span", exc_info=True)
            proc.writer.drop("internal_error")
            proc._lost.note(rs, "internal_error")
