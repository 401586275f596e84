"""``CaptureProcess``: the app's side of the capture process (``_capture_child``).

The app's threads queue span records (``_span_records``); this sends them down a pipe. Sending is
cheap (a ``writev`` of framed bytes, the GIL let go while the kernel copies), but the thread doing it
must first get the interpreter, and beside 16 busy threads a thread waits its turn for up to ~80 ms
(16 switch intervals). So an app thread that finds a batch queued sends it itself, if no one else is
sending (never waiting on the lock) and only as much as the pipe takes at once (never waiting on the
child): the sending keeps pace with the threads that make spans. The sender thread does the rest.

A child that dies (or cannot start) is logged once; what is queued then and all that comes after is
counted dropped (``capture_process``, in spans), and ``stats()["capture_process"]`` says so.
"""

from __future__ import annotations

import collections
import logging
import os
import pickle
import select
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import orjson

from ._lost import LostTraces
from ._span_records import frame
from ._tally import Tally

__all__ = ["CaptureProcess", "can_start", "sender"]

log = logging.getLogger("harvester.intake")
_BATCH = 256  # frames per writev (IOV_MAX is 1,024)
_ROOT = str(Path(__file__).resolve().parent.parent.parent)  # where ``harvester`` is imported from
_CODE = (  # Ctrl-C and SIGTERM are the app's to act on, from the first instant (see ``_capture_child``)
    "import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    f"import sys; sys.path.insert(0, {_ROOT!r}); from harvester.intake._capture_child import main; main()"
)


def can_start() -> bool:
    """A POSIX system and a Python to run: elsewhere the processor keeps its worker thread. An app
    embedded in a server (uWSGI, mod_wsgi) may have the server's binary as ``sys.executable``: run with
    ``-c`` it would start another server, so only an interpreter named like one is run."""
    name = os.path.basename(sys.executable or "").lower()
    return os.name == "posix" and name.startswith(("python", "pypy")) and os.path.exists(sys.executable)


class CaptureProcess:
    """The child process, and the sending of ``queue`` (frames) to it."""

    def __init__(self, config: dict[str, Any], queue: collections.deque[bytes], lost: LostTraces) -> None:
        self.queue = queue
        self.lost = lost
        self.taken_bytes = 0  # of the queue's frames, sent or being sent
        self.dropped = Tally()  # spans queued when the child was gone
        self._config = pickle.dumps(config)
        self._lock = threading.Lock()  # one sender at a time
        self._unsent: list[bytes] = []  # taken from the queue, not yet (wholly) in the pipe
        self._changed = threading.Condition()
        self._flushed = 0  # the last barrier the child answered
        self._barriers = 0
        self._stats: dict[str, Any] = {}
        self.error: str | None = None  # the child cannot be used: why
        self.ended = False  # the child ended before it was told to
        self._closing = False
        self._start()

    def _start(self) -> None:
        child_in, self._out = os.pipe()
        self._in, child_out = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _CODE], stdin=child_in, stdout=child_out, close_fds=True
            )
        finally:
            os.close(child_in)
            os.close(child_out)
        try:
            import fcntl

            fcntl.fcntl(self._out, fcntl.F_SETPIPE_SZ, 1 << 20)  # type: ignore[attr-defined,unused-ignore]
        except (ImportError, AttributeError, OSError):
            pass
        os.write(self._out, frame(b"c", self._config))  # an empty pipe takes it whole
        os.set_blocking(self._out, False)
        self.dead = False
        self._running = True
        self._reader = threading.Thread(target=self._read, name="harvester-capture-reader", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self._proc.pid

    # -- sending -------------------------------------------------------------------------------
    def send(self, *, wait: float | None = None) -> bool:
        """Send what is queued. ``wait=None`` (an app thread): only if no one is sending and only what
        the pipe takes now. Else wait up to ``wait`` seconds for the pipe (the sender thread). True once
        everything queued before the call is in the pipe."""
        if not self._lock.acquire(wait is not None):
            return False
        try:
            return self._send(wait)
        finally:
            self._lock.release()

    def _send(self, wait: float | None) -> bool:
        unsent, queue = self._unsent, self.queue
        sent = False
        if not self._running:  # a forked app's: started by its sender thread once there is something to send
            if wait is None or not queue:
                return not queue
            try:
                self._start()
            except Exception:
                log.warning("harvester: no capture process could be started; spans are counted dropped")
                self.dead = self._running = True
        while True:
            if not unsent:
                if wait is None and sent:  # an app's thread sends one batch at most: its run waits
                    return not queue
                if self.lost.has_notes():
                    unsent.append(frame(b"l", orjson.dumps(self.lost.pop_notes())))
                while queue and len(unsent) < _BATCH:
                    f = queue.popleft()
                    if f[4] == 115:  # b"s": the app's threads count the bytes of span frames only
                        self.taken_bytes += len(f)
                    unsent.append(f)
                if not unsent:
                    return True
            if self.dead:
                self._drop_unsent()
                continue
            try:
                n = os.writev(self._out, unsent)
            except BlockingIOError:
                if wait is None or not select.select([], [self._out], [], wait)[1]:
                    return False
                continue
            except (OSError, ValueError):
                self._died()
                continue
            done = 0
            while done < len(unsent) and n >= len(unsent[done]):
                n -= len(unsent[done])
                done += 1
            del unsent[:done]
            if n:
                unsent[0] = unsent[0][n:]
            sent = True

    def _drop_unsent(self) -> None:
        self.dropped_spans(sum(1 for f in self._unsent if f[4:5] == b"s"))
        self._unsent.clear()

    def dropped_spans(self, n: int) -> None:
        for _ in range(n):
            self.dropped.add()

    def barrier(self) -> int | None:
        """Queue a flush barrier behind every frame queued so far; returns its number. None while 16
        are unanswered (the store stuck): an app flushing per request must not pile them up."""
        with self._changed:
            if self._barriers - self._flushed >= 16:
                return None
            self._barriers += 1
            mine = self._barriers
        self.queue.append(frame(b"f", str(mine).encode()))
        return mine

    def wait_flushed(self, mine: int, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self._flushed >= mine or self.dead, timeout) and not self.dead

    def ask(self) -> None:
        """Ask the child for its counters (answered as they are: no flush), behind what is queued."""
        self.queue.append(frame(b"q", b""))
        self.send(wait=0.5)

    # -- the child's answers -------------------------------------------------------------------
    def _read(self) -> None:
        data = b""
        while True:
            try:
                chunk = os.read(self._in, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                break
            *lines, data = (data + chunk).split(b"\n")
            for line in lines:
                message = orjson.loads(line)
                with self._changed:
                    if "failed" in message:
                        self.error = message["failed"]
                        log.warning("harvester: capture is off, the trace store cannot be used: %s", self.error)
                    if "stats" in message:
                        self._stats = message["stats"]
                    if message.get("flushed"):
                        self._flushed = max(self._flushed, message["flushed"])
                    self._changed.notify_all()
        os.close(self._in)
        self._in = -1
        with self._changed:
            if not self.dead and self.error is None and not self._closing:
                log.error("harvester: the capture process ended; spans from now on are counted dropped")
                self.ended = True
            self.dead = True
            self._changed.notify_all()

    def _died(self) -> None:
        if not self.dead:
            self.dead = True
            with self._changed:
                self._changed.notify_all()

    def stats(self) -> dict[str, Any]:
        return dict(self._stats)

    # -- the end -------------------------------------------------------------------------------
    def close(self, timeout: float) -> bool:
        """Send what is queued, end the pipe, and wait up to ``timeout`` for the child's last write;
        True if it ended in time. A child still writing (the store locked) is left to finish: it
        leaves once its last write is done, its pipe ended."""
        self._closing = True
        self.send(wait=timeout)  # a forked app's child starts here if it has spans and never sent them
        if not self._running:
            return True
        with self._lock:
            if self._unsent or self.queue:  # the pipe stayed full: what was not sent is lost
                self._drop_unsent()
                self.dropped_spans(sum(1 for f in self.queue if f[4:5] == b"s"))
                self.queue.clear()
            os.close(self._out)
            self._out = -1
        try:
            self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log.info("harvester: the capture process is still writing; it leaves when done")
            return False
        self._reader.join(5)
        return True

    def after_fork(self) -> None:
        """In a forked child of the app: the pipes are the parent's; let go of them. Its own capture
        process starts when it first has spans to send (a forked worker that traces nothing costs none)."""
        for fd in (self._out, self._in):
            if fd >= 0:
                os.close(fd)
        self._out = self._in = -1
        self._lock = threading.Lock()
        self._changed = threading.Condition()
        self._unsent = []
        self._flushed = self._barriers = 0
        self._stats = {}
        self.dropped = Tally()
        self._proc.returncode = 0  # not ours to wait for
        self._running = False
        self.taken_bytes = 0


def sender(processor: Any, process: CaptureProcess) -> None:
    """The processor's worker in this mode: send what the app's threads did not, ask for counters; at
    shutdown, send the rest and wait for the child's last write (``close``)."""
    asked = process.taken_bytes
    half = processor.flush_interval_s / 2  # what the app's threads leave waits at most this long
    while True:
        processor._wake.wait(half)  # rarely: each wake takes the GIL from the app's threads
        processor._wake.clear()
        if processor._shutdown:
            process.close(processor._close_timeout)
            return
        try:
            process.send(wait=0.5)
            if process.taken_bytes != asked and not process.queue:
                asked = process.taken_bytes
                process.ask()
        except BaseException:
            log.debug("harvester capture sender error", exc_info=True)
