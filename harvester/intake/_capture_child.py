"""The capture process: assembly, sampling, redaction and writing, beside the app instead of inside it.

``CaptureProcess`` starts this module's ``main`` with ``python -c`` (never ``multiprocessing``, whose
spawn and forkserver import the app's ``__main__`` again) and feeds it span records on its stdin
(``_span_records``). It runs what the processor's worker thread runs (``LocalRootAssembler`` ->
``RunWriter``, the same bounds and counters), on a core of its own, so a busy app no longer starves
it of the interpreter, and the app's thread no longer waits behind it for the GIL.

Its stdout carries one JSON line per message: ``{"ready": true}``, ``{"failed": why}`` (the store
cannot be used), and its counters (``{"stats": ..., "flushed": n}``: every span sent before flush
barrier ``n`` is assembled and its finished runs committed). It ignores Ctrl-C and SIGTERM: the app
stops it by closing its stdin, after the last spans; it also leaves, writing what it holds, when the
pipe ends or its parent is gone (a ``kill -9`` of the app), within a second.
"""

from __future__ import annotations

import logging
import os
import pickle
import select
import signal
import sys
import time
from typing import Any

import orjson

from ._assembly import LocalRootAssembler
from ._lost import QUEUE_FULL, LostTraces, Refused
from ._opened import UnusableStore, open_store
from ._pipeline import RunWriter
from ._span_records import read_frames, span_from_record

__all__ = ["main"]

log = logging.getLogger("harvester.intake")
_READ = 1 << 20
_GATHER_S = 0.02


def main() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    out = os.dup(1)
    os.dup2(2, 1)  # a stray print goes to stderr, never into the messages
    parent = os.getppid()

    def send(message: dict[str, Any]) -> None:
        data = orjson.dumps(message) + b"\n"
        try:
            while data:
                data = data[os.write(out, data) :]
        except OSError:  # the app is gone: what it sent is still written
            pass

    buffer = bytearray()
    config = _config(buffer)
    opened = open_store(config["store"])  # a PostgreSQL store connects at its first write, as in the app
    if isinstance(opened, UnusableStore):
        send({"failed": opened.error})
        return
    try:
        writer = RunWriter(
            opened,
            sample_rate=config["sample_rate"],
            redact=config["redact"],
            batch_size=config["batch_size"],
            flush_interval_s=config["flush_interval_s"],
            defer=config["defer"],
        )
    except Exception as exc:
        send({"failed": str(exc) or type(exc).__name__})
        return
    lost = LostTraces(config["max_lost_traces"])
    assembler = LocalRootAssembler(writer, *config["bounds"])
    assembler.lost = lost
    send({"ready": True})
    Child(writer, assembler, lost, send, parent).run(buffer)
    opened.close()


def _config(buffer: bytearray) -> dict[str, Any]:
    """The first frame: the processor's options, pickled (a spawned process of our own: trusted)."""
    while True:
        for kind, body in read_frames(buffer):
            if kind == b"c":
                return pickle.loads(body)  # written by the processor that started us
        data = os.read(0, 1 << 16)
        if not data:
            sys.exit(0)
        buffer += data


class Child:
    def __init__(self, writer: RunWriter, assembler: LocalRootAssembler, lost: LostTraces, send: Any, parent: int):
        self.writer, self.assembler, self.lost, self.send, self.parent = writer, assembler, lost, send, parent
        self.refused = Refused(lost.capacity)
        self.resources: dict[int, dict[str, Any]] = {}
        self.captured = 0

    def run(self, buffer: bytearray) -> None:
        """The worker loop of the processor's thread mode, fed by the pipe (see ``_processor._run``)."""
        writer = self.writer
        half = writer.flush_interval_s / 2
        due: float | None = None
        ended = False
        while not ended:
            wait = half if due is None else max(due - time.monotonic(), 0.0)
            if select.select([0], [], [], min(wait, 1.0))[0]:
                data = os.read(0, _READ)
                ended = not data
                buffer += data
                if 0 < len(data) < _READ // 2:  # keeping up: let records gather (a read per write would wake
                    time.sleep(_GATHER_S)  # us at each one, taking a core from the app's threads each time)
            elif os.getppid() != self.parent:  # the app is gone (a kill -9): write what is held, leave
                ended = True
            barrier: int | None = None
            asked = False
            try:
                now = time.monotonic()
                for kind, body in read_frames(buffer):
                    if kind == b"s":
                        self.add(body, now)
                    elif kind == b"f":
                        barrier = int(body)
                    elif kind == b"q":
                        asked = True
                    else:
                        self.control(kind, body)
                self.refused.take(self.lost, self.assembler)
                self.assembler.expire(time.monotonic())
                if ended:
                    self.assembler.finish_all()
                self.lost.take()
            except BaseException:
                log.debug("harvester capture process error", exc_info=True)
                writer.drop("internal_error")
            if due is None and writer.buffered:
                due = time.monotonic() + half
            try:
                if (
                    ended
                    or barrier is not None
                    or writer.buffered >= writer.batch_size
                    or (due is not None and time.monotonic() >= due)
                ):
                    writer.flush()
                    due = None
            except BaseException:
                log.debug("harvester capture process error", exc_info=True)
                writer.drop("internal_error")
            if not writer.buffered:
                due = None
            if barrier is not None or asked or ended:
                self.send({"stats": self.stats(), "flushed": barrier})
        writer.close()

    def add(self, body: bytes, now: float) -> None:
        self.captured += 1
        try:
            span, local_root = span_from_record(body, self.resources)
        except Exception:
            self.writer.drop("convert_error")
            return
        if self.refused.drops(span.trace_id, local_root):
            return
        try:
            self.assembler.add(span, local_root, now)
        except Exception:
            log.debug("harvester could not process a span", exc_info=True)
            self.writer.drop("internal_error")
            self.lost.lose(span.trace_id, "internal_error")

    def control(self, kind: bytes, body: bytes) -> None:
        if kind == b"r":
            key, resource = orjson.loads(body)
            self.resources[key] = resource
        elif kind == b"l":
            for trace_id, reason in orjson.loads(body):
                self.lost.lose(trace_id, reason)
                if reason == QUEUE_FULL:
                    self.lost.refused.append(trace_id)

    def stats(self) -> dict[str, Any]:
        s = self.writer.stats()
        return {
            **s,
            "lost_traces": self.lost.count + s.pop("lost_traces", 0),
            "captured": self.captured,
            "open_traces": len(self.assembler.open),
            "open_bytes": self.assembler.open_bytes,
            "lost_unmarked": self.lost.forgotten,
        }
