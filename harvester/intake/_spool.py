"""``Spool``: the receiver's write-ahead log, so that a 200 means the spans survive a crash.

An exporter never resends what was answered 200, and a received trace waits in memory (until it is
quiet for ``idle_seconds``) and in the store process's batch before it is stored: a ``kill -9`` lost
all of that. So each accepted request body is appended to a segment file in a folder beside the store,
and flushed to disk (``os.fsync``) before the 200, as the OpenTelemetry Collector's persistent queue
does. Concurrent requests share one ``fsync`` (group commit): the first to need one syncs what all
have written, the others wait for it.

A record is ``length (4 bytes) | crc32 (4) | kind (1) | body``; a torn or corrupt record ends its
segment there (a crash mid-append: that request got no 200). Segments are sealed when they grow past
``SEGMENT_BYTES`` or older than ``SEGMENT_SECONDS``; a sealed segment is deleted once no trace it
holds is still open and everything handed to the store before that moment is committed (the
receiver's sweep checks, ``release``). At start, the segments left by a crash are replayed
(``recover``), and deleted in their turn once stored. Spans replayed twice are stored once: a trace
that completes again is merged with what is stored of it.

The spool is bounded: when its segments hold more than ``max_bytes``, a request is answered 503
(retryable), so a store that cannot keep up pushes back on the exporters instead of filling the disk.
"""

from __future__ import annotations

import hashlib
import os
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

from ..errors import BadRequest, ReceiverError
from ..store import DEFAULT_PATH, default_path, is_postgres_url, store_file

__all__ = ["SEGMENT_BYTES", "SEGMENT_SECONDS", "Segment", "Spool", "SpoolBusy", "spool_folder"]

SEGMENT_BYTES = 16 << 20
SEGMENT_SECONDS = 1.0
_HEAD = struct.Struct("<II")
_SUFFIX = ".wal"


class Segment:
    """One file of records, and the trace ids they hold (to know when it may go)."""

    def __init__(self, path: Path, size: int = 0) -> None:
        self.path = path
        self.size = size
        self.traces: set[str] = set()
        self.opened = time.monotonic()


class Spool:
    """Append-and-fsync records into segments under ``folder``; ``recover`` the ones a crash left."""

    def __init__(self, folder: str | os.PathLike[str], max_bytes: int = 1 << 30) -> None:
        self.folder = Path(folder)
        self.max_bytes = max_bytes
        self.folder.mkdir(parents=True, exist_ok=True)
        self._owner = _claim(self.folder)
        self._lock = threading.Lock()
        self._synced_cv = threading.Condition(self._lock)
        self._sealed: list[Segment] = []
        self._left = sorted(self.folder.glob("*" + _SUFFIX))  # a crash's segments, replayed by ``recover``
        self._next = 1 + max((int(p.stem) for p in self._left if p.stem.isdigit()), default=0)
        self._bytes = sum(p.stat().st_size for p in self._left)
        self._written = self._synced = 0  # records appended, and appended and on disk
        self._syncing = False
        self.syncs = 0  # fsyncs of records: with requests, how well group commit shares them
        self._current = self._open()

    @property
    def held_bytes(self) -> int:
        return self._bytes

    @property
    def segments(self) -> int:
        return len(self._sealed) + 1

    def _open(self) -> Segment:
        path = self.folder / f"{self._next:012d}{_SUFFIX}"
        self._next += 1
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        _sync_folder(self.folder)  # the new name survives a power cut too
        return Segment(path)

    def recover(self) -> Iterator[tuple[Segment, int, bytes]]:
        """The records of the segments a crash left, oldest first, as (segment, kind, body); the caller
        adds each body's trace ids to ``segment.traces``. Each segment is sealed once read."""
        left, self._left = self._left, []
        for path in left:
            seg = Segment(path, path.stat().st_size)
            with open(path, "rb") as f:
                data = f.read()
            at = 0
            while at + _HEAD.size <= len(data):
                length, crc = _HEAD.unpack_from(data, at)
                record = data[at + _HEAD.size : at + _HEAD.size + length]
                if length < 1 or len(record) < length or zlib.crc32(record) != crc:
                    break  # torn by the crash: that request was never answered 200
                at += _HEAD.size + length
                yield seg, record[0], record[1:]
            with self._lock:
                self._sealed.append(seg)

    def check_room(self) -> None:
        """503 (retryable) while the segments hold ``max_bytes`` or more: the store is behind."""
        if self._bytes >= self.max_bytes:
            raise BadRequest(503, f"spool full ({self.max_bytes >> 20} MiB of bodies not yet stored); retry shortly")

    def append(self, kind: int, body: bytes, traces: set[str]) -> None:
        """Write one record and return once it is on disk."""
        tag = bytes((kind,))
        head = _HEAD.pack(1 + len(body), zlib.crc32(body, zlib.crc32(tag)))
        size = len(head) + 1 + len(body)
        with self._lock:
            seg = self._current
            if seg.size >= SEGMENT_BYTES or (seg.size and time.monotonic() - seg.opened >= SEGMENT_SECONDS):
                seg = self._seal()
            try:
                if os.writev(self._fd, (head, tag, body)) != size:
                    raise OSError(f"short write to {seg.path}")
            except OSError:  # a full disk: cut the torn record off, or the records after it could not be read
                os.ftruncate(self._fd, seg.size)
                raise
            seg.size += size
            seg.traces |= traces
            self._bytes += size
            self._written += 1
            self._wait_synced(self._written)

    def _seal(self) -> Segment:
        """Under ``_lock``: seal the current segment (its records on disk first) and open the next."""
        while self._synced < self._written or self._syncing:  # another may write while the lock is let go
            self._wait_synced(self._written) if self._synced < self._written else self._synced_cv.wait()
        os.close(self._fd)
        self._sealed.append(self._current)
        self._current = self._open()
        return self._current

    def _wait_synced(self, mine: int) -> None:
        """Under ``_lock``: return once record ``mine`` is on disk; the first waiter syncs for all."""
        while self._synced < mine:
            if self._syncing:
                self._synced_cv.wait()
                continue
            self._syncing, target, fd = True, self._written, self._fd
            self._lock.release()
            try:
                os.fsync(fd)
            finally:
                self._lock.acquire()
                self._syncing = False
                self.syncs += 1
                self._synced = max(self._synced, target)
                self._synced_cv.notify_all()

    def release(self, is_open: Callable[[str], bool], committed: Callable[[], bool]) -> int:
        """Delete the sealed segments none of whose traces ``is_open``, once ``committed()`` says all
        handed to the store so far is stored (False: keep them, try again later). Returns how many went."""
        with self._lock:
            seg = self._current
            if seg.size and time.monotonic() - seg.opened >= SEGMENT_SECONDS:  # quiet: seal it, so it may go
                self._seal()
            sealed = list(self._sealed)
        done = [seg for seg in sealed if not any(is_open(t) for t in seg.traces)]
        if not done or not committed():
            return 0
        gone = {id(seg) for seg in done}
        with self._lock:
            self._sealed = [seg for seg in self._sealed if id(seg) not in gone]
            self._bytes -= sum(seg.size for seg in done)
        for seg in done:
            seg.path.unlink(missing_ok=True)
        return len(done)

    def close(self, *, stored: bool) -> None:
        """Close the file; with ``stored`` (everything was handed over and committed), delete every segment."""
        with self._lock:
            os.close(self._fd)
            segments = [*self._sealed, self._current]
        if stored:
            for seg in segments:
                seg.path.unlink(missing_ok=True)
        os.close(self._owner)  # the folder is free for the next receiver (the lock file stays)

    @classmethod
    def first_free(cls, folder: Path, max_bytes: int) -> Spool:
        """The spool in ``folder``, or in ``folder-2``, ``folder-3``... when another live receiver holds it
        (replicas on one store): a receiver started after a crash takes over, and replays, a dead one's."""
        for n in range(1, 65):
            try:
                return cls(folder if n == 1 else folder.with_name(f"{folder.name}-{n}"), max_bytes)
            except SpoolBusy:
                continue
        raise SpoolBusy(f"{folder}: 64 spools beside the store are all in use")


class SpoolBusy(ReceiverError):
    """Another live receiver holds this spool folder."""


def _claim(folder: Path) -> int:
    """Lock ``folder`` for this process (``flock``: the kernel frees it when the process dies, SIGKILL too)."""
    fd = os.open(folder / "lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        import fcntl
    except ImportError:  # no flock (Windows): one receiver per store is the user's to keep
        return fd
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise SpoolBusy(f"{folder}: the spool is in use by another harvester serve") from None
    return fd


def spool_folder(store: str | None) -> Path:
    """Beside the store: ``traces.db.spool/`` for ``traces.db``; for a PostgreSQL store,
    ``.harvester/spool-<hash of its URL>/`` in the working directory."""
    named = store_file(store or default_path())
    if is_postgres_url(named):
        key = hashlib.sha256(named.encode()).hexdigest()[:16]
        return Path(DEFAULT_PATH).parent / f"spool-{key}"
    return Path(named + ".spool")


def _sync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
