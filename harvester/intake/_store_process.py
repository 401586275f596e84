"""``StoreProcess``: the receiver's storing (sampling, redaction, SQLite) in a process of its own.

Receiving a span (HTTP, protobuf decoding, assembly) and storing it (``RunWriter``) cost about the same
CPU, and in one process they share one GIL: on a 2-core machine the receiver could never use more than
one core. ``harvester serve`` therefore runs the ``RunWriter`` in a child process, the same one the
in-process receiver runs, and hands it each batch of complete traces over a pipe in the store's own
compact form (``spans_blob``; secrets cross the pipe, never a file: the child redacts before it writes).

- ``submit`` never waits for the child's answer: a late part that belongs to no stored trace is counted
  by the child (``orphan_spans``, ``orphan_traces``), not returned. A child that falls behind fills the pipe (1 MB), and
  ``submit`` then waits: back-pressure on the exporters, never unbounded memory.
- ``stats`` never waits either: the child sends its counters after each write (at most every 0.2 s),
  and they are read as they come. ``close`` waits for the child's last write and its final counters.
- A child that dies is logged once; what it was handed and never reported stored, and all that comes
  after, is counted ``store_process`` lost, and ``/healthz`` answers 503 (a probe restarts the server).
  It ignores Ctrl-C and SIGTERM: the parent stops it, after its last traces, by closing the pipe; a
  parent that dies (SIGKILL included) closes it too, and the child leaves within a moment, its store whole.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

import orjson

from ..errors import StoreError
from ..spans import SpanData
from ..store import shown_store, spans_blob, spans_from_blob
from ._workers import _grow_pipe, start_method

__all__ = ["StoreProcess"]

log = logging.getLogger("harvester.receiver")
START_TIMEOUT_S = 60.0
STATS_EVERY_S = 0.2


class StoreProcess:
    """A ``RunWriter(store, defer=True)`` in a child process, with the receiver's side of its methods."""

    def __init__(self, store: str | None, *, sample_rate: float, redact: Any) -> None:
        import multiprocessing

        method = start_method()
        ctx = multiprocessing.get_context(method)
        theirs_in, self._out = ctx.Pipe(duplex=False)
        self._in, theirs_out = ctx.Pipe(duplex=False)
        _grow_pipe(self._out)
        # A forked child holds copies of this side's ends too; it closes them, or the parent's death
        # (even by SIGKILL) would never reach it as the end of the pipe, and it would outlive it.
        ours = [self._out, self._in] if method == "fork" else []
        args = (theirs_in, theirs_out, ours, store, sample_rate, redact, method)
        self._proc = ctx.Process(target=_child, args=args, name="harvester-store", daemon=True)  # type: ignore[attr-defined]
        self._proc.start()
        theirs_in.close()
        theirs_out.close()
        self._lock = threading.Lock()  # one message on the way out at a time
        self._reading = threading.Lock()  # and one reader of the counters (a full pipe out never blocks it)
        self._stats: dict[str, Any] = {"written": 0, "traces_written": 0, "sampled_out": 0, "dropped": {}}
        self._lost = self._sent = 0
        self._syncs = self._synced = 0  # barriers asked for, and answered with everything before them stored
        self._sync_ok = True
        self._dead = False
        self._watchdog: threading.Timer | None = None
        if not self._in.poll(START_TIMEOUT_S):
            self._proc.kill()
            raise StoreError(f"{shown_store(str(store))}: the store process did not start within {START_TIMEOUT_S:g} s")
        try:
            kind, detail = self._in.recv()
        except (EOFError, OSError):  # it died before a word (a spawned child whose main module failed)
            self._proc.join(5)
            raise StoreError(
                f"{shown_store(str(store))}: the store process exited at start (code {self._proc.exitcode})"
            ) from None
        if kind != "ready":
            self._proc.join(5)
            raise StoreError(str(detail))

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def submit(self, traces: Sequence[list[SpanData]], *, late: bool = False) -> list[list[SpanData]]:
        traces = [t for t in traces if t]
        if traces:
            lengths = orjson.dumps([len(t) for t in traces])
            self._send((b"L" if late else b"S") + lengths + b"\n" + spans_blob([s for t in traces for s in t]), traces)
        return []

    def flush(self) -> None:
        self._send(b"F")
        self._drain()

    def sync(self, timeout: float = 30.0) -> bool:
        """Everything handed over so far is committed to the store (True), or could not be (False:
        a store error, a dead child, no answer within ``timeout``). The spool deletes what this covers."""
        with self._lock:
            self._syncs += 1
            mine = self._syncs
        self._send(b"Y")
        deadline = time.monotonic() + timeout
        while self._synced < mine and not self._dead and time.monotonic() < deadline:
            self._drain(0.05)
            self._check_alive()
        ok = self._synced >= mine and self._sync_ok
        self._sync_ok = True
        return ok

    def stop_within(self, seconds: float) -> None:
        """From now on, a child still running after ``seconds`` is killed and what it held counted lost:
        the last hand-over waits on a full pipe, and a stuck child (a store locked for minutes, a stopped
        process) must not hold its caller for ever. The kill frees every send waiting on the pipe."""
        if self._watchdog is None:
            self._watchdog = threading.Timer(seconds, self._kill_stuck)
            self._watchdog.daemon = True
            self._watchdog.start()

    def close(self, timeout: float | None = None) -> None:
        self.stop_within(timeout if timeout is not None else 60.0)
        self._send(b"C")
        while self._proc.is_alive():
            self._drain(0.1)
        self._drain()
        self._proc.join()
        assert self._watchdog is not None
        self._watchdog.cancel()
        self._check_alive()
        self._out.close()
        self._in.close()

    def _kill_stuck(self) -> None:
        if self._proc.is_alive():
            log.warning("harvester: the store process did not finish its last write in time; stopped")
            self._proc.kill()

    def stats(self) -> dict[str, Any]:
        self._drain()
        self._check_alive()
        out = dict(self._stats)
        if self._dead:
            out["store_process"] = "died"
        if self._lost:
            out["dropped"] = {**out.get("dropped", {}), "store_process": self._lost}
        return out

    def _send(self, message: bytes, traces: list[list[SpanData]] | None = None) -> None:
        with self._lock:
            if not self._dead:
                try:
                    self._out.send_bytes(message)
                    self._sent += len(traces or ())
                    return
                except (OSError, ValueError):
                    self._died()
            self._lost += len(traces or ())

    def _check_alive(self) -> None:
        if not self._dead and self._proc.exitcode not in (None, 0):
            with self._lock:
                if not self._dead:
                    self._died()

    def _died(self) -> None:
        """Once, under ``_lock``: what it was handed and never reported stored is counted lost with what
        comes after (its last report may be up to ``STATS_EVERY_S`` old, so this is an upper bound)."""
        self._dead = True
        log.error("harvester: the store process died; traces from now on are counted lost")
        self._drain()
        last = self._stats
        unwritten = last.get("deferred", 0) - last.get("traces_written", 0)
        unwritten -= last.get("dropped", {}).get("store_error_traces", 0)
        self._lost += max(0, self._sent - last.get("taken", 0)) + max(0, unwritten)

    def _drain(self, timeout: float = 0.0) -> None:
        """Read the counters the child has sent (the newest wins); never waits past ``timeout``."""
        with self._reading:
            try:
                while self._in.poll(timeout):
                    kind, stats = self._in.recv()
                    if kind == "stats":
                        self._stats = stats
                    elif kind == "synced":
                        self._synced += 1
                        self._sync_ok = self._sync_ok and stats
                    timeout = 0.0
            except (EOFError, OSError, ValueError):
                pass


def _child(
    inbox: Connection,
    outbox: Connection,
    parents: list[Connection],
    store: str | None,
    sample_rate: float,
    redact: Any,
    method: str,
) -> None:
    """The child: one ``RunWriter``, fed by the pipe; writes when the batch fills or the parent says.

    Ctrl-C and a SIGTERM to the process group are the parent's to act on: it completes its open traces,
    hands them over and closes the pipe; the child leaves when the pipe says so, never midway. The pipe
    also ends when the parent dies, however it dies: the child then writes what it holds and leaves.
    """
    import signal

    from ._pipeline import RunWriter

    for conn in parents:  # the parent's ends, inherited by a fork: only the parent may hold them
        conn.close()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    try:
        writer = RunWriter(store, sample_rate=sample_rate, redact=redact, defer=True)
    except Exception as exc:
        outbox.send(("failed", str(exc) or type(exc).__name__))
        return
    outbox.send(("ready", None))
    orphans = orphan_traces = taken = 0
    sent: dict[str, Any] = {}
    last = 0.0
    while True:
        try:
            message = inbox.recv_bytes() if inbox.poll(1.0) else b"F"
        except (EOFError, OSError):  # the parent is gone: write what is buffered and leave
            message = b"C"
        kind = message[:1]
        if kind in (b"S", b"L"):
            head, _, blob = message[1:].partition(b"\n")
            spans = spans_from_blob(blob)
            traces, at = [], 0
            for n in orjson.loads(head):
                traces.append(spans[at : at + n])
                at += n
            taken += len(traces)
            rest = writer.submit(traces, late=kind == b"L")
            orphans += sum(map(len, rest))
            orphan_traces += len(rest)
        elif kind == b"F":
            writer.flush()
        elif kind == b"Y":  # a barrier: all before it written, and said so
            failed = _failures(writer)
            writer.flush()
            try:
                outbox.send(("synced", _failures(writer) == failed))
            except OSError:
                pass
        elif kind == b"C":
            writer.close()
        stats = {**writer.stats(), "orphan_spans": orphans, "orphan_traces": orphan_traces, "taken": taken}
        if kind == b"C" or (stats != sent and time.monotonic() - last >= STATS_EVERY_S):
            try:
                outbox.send(("stats", stats))
            except OSError:
                pass
            sent, last = stats, time.monotonic()
        if kind == b"C":
            inbox.close()
            outbox.close()
            if method == "fork":  # inherited nothing it may flush or join on the way out
                os._exit(0)
            return


def _failures(writer: Any) -> int:
    dropped = writer.stats()["dropped"]
    return int(dropped.get("store_error", 0)) + int(dropped.get("store_error_traces", 0))
