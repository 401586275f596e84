"""``harvester ingest``'s worker processes, from the parent's side: start them, share a file out, store
what they answer, in file order.

The protocol (``ingest_files`` describes the three phases): the parent sends ``Parse`` for each chunk
and gets ``Parsed`` (or ``ParseError``); moves the parts of a trace split over workers with
``Export``/``Parts`` and ``Import``; sends ``Write`` batches in file order and stores the ``Rows``
they answer with; ``Clear`` ends a file, ``Stop`` the worker. A worker that breaks says ``Failed``.
Parsed spans stay in the worker that parsed them, unless a trace is split.
"""

from __future__ import annotations

import gc
import multiprocessing
import pickle
import threading
from collections.abc import Iterator
from multiprocessing.connection import Connection, wait
from typing import TYPE_CHECKING, Any

from ..errors import HarvesterError, OtlpFormatError
from ..redact import Redactor
from ..spans import SpanData
from ..store import Row, TraceStore
from ._carried import Carried
from ._input import SEGMENT_END
from ._messages import Clear, Export, Failed, Import, Parse, Parsed, ParseError, Stop, Write
from ._worker import worker_main

if TYPE_CHECKING:
    from ._ingest import IngestStats
    from ._input import Input


__all__ = ["Workers", "can_share", "start_method"]

_TRACES_PER_BATCH = 200  # traces per write request
_WINDOW = 6  # write requests in flight per worker
_PARSE_AHEAD = 2  # parse requests in flight per worker


def can_share(redactor: Redactor | None) -> bool:
    """Workers get the redactor; a spawned worker gets it pickled (a fork inherits it)."""
    if start_method() == "fork":
        return True
    try:
        pickle.dumps(redactor)
        return True
    except Exception:
        return False


def start_method() -> str:
    """``fork`` when this process has a single thread, else ``forkserver`` (or ``spawn``).

    Forking is unsafe only because another thread may hold a lock (logging, an SDK exporter, the
    allocator) that the child then never sees released; with one thread there is no such lock.
    The child never touches anything it inherited but its pipes (it closes the others' ends and
    never uses the parent's SQLite connection) and leaves with ``os._exit``. Forking costs ~1 ms
    where ``spawn`` costs ~0.4 s of interpreter start-up and imports per worker.
    """
    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return "fork"
    return "forkserver" if "forkserver" in methods else "spawn"


def _format_error(message: str, file: str | None, field: str | None) -> OtlpFormatError:
    """A worker's ``OtlpFormatError`` again (its message, file and field)."""
    where = ": ".join(p for p in (file, field) if p)
    if where and message.startswith(where + ": "):
        message = message[len(where) + 2 :]
    return OtlpFormatError(message, file=file, field=field)


def _grow_pipe(conn: Connection) -> None:
    """1 MB pipe buffers (Linux): fewer wake-ups per request or reply of a few MB. Best effort."""
    try:
        import fcntl

        fcntl.fcntl(conn.fileno(), fcntl.F_SETPIPE_SZ, 1 << 20)  # type: ignore[attr-defined,unused-ignore]
    except (ImportError, AttributeError, OSError):
        pass


class Workers:
    """``jobs`` worker processes, each with a request pipe and a reply pipe."""

    def __init__(self, jobs: int, redactor: Redactor | None) -> None:
        method = start_method()
        ctx = multiprocessing.get_context(method)
        self.procs: list[Any] = []
        self.requests: list[Connection] = []
        self.replies: list[Connection] = []
        self.reading = "?"
        # While the import runs, the collector leaves this process's existing objects alone (they are
        # not ours, and a forked child that scanned them would copy their memory pages): gc.freeze().
        self._froze = gc.get_freeze_count() == 0  # a caller's own freeze is left as it is
        if self._froze:
            gc.freeze()
        try:
            for i in range(jobs):
                req_r, req_w = ctx.Pipe(duplex=False)
                rep_r, rep_w = ctx.Pipe(duplex=False)
                _grow_pipe(req_w)
                _grow_pipe(rep_r)
                inherited = [*self.requests, *self.replies, req_w, rep_r] if method == "fork" else []
                proc = ctx.Process(  # type: ignore[attr-defined]
                    target=worker_main,
                    args=(req_r, rep_w, redactor, inherited),
                    daemon=True,
                    name=f"harvester-ingest-{i + 1}",
                )
                proc.start()
                req_r.close()
                rep_w.close()
                self.procs.append(proc)
                self.requests.append(req_w)
                self.replies.append(rep_r)
        except BaseException:
            self.close(kill=True)
            raise

    # -- messages ------------------------------------------------------------------------------
    def send(self, i: int, msg: tuple[Any, ...]) -> None:
        """Send one of the messages above to worker ``i``."""
        try:
            self.requests[i].send(msg)
        except OSError:
            raise self._died(i) from None

    def recv(self) -> tuple[int, Any]:
        """The next reply of any worker; a dead worker raises, never hangs."""
        while True:
            ready = wait([*self.replies, *(p.sentinel for p in self.procs)])
            for i, conn in enumerate(self.replies):
                if conn in ready or conn.poll():
                    try:
                        msg = conn.recv()
                    except (EOFError, OSError):
                        raise self._died(i) from None
                    if isinstance(msg, Failed):
                        err = HarvesterError(f"ingest worker {i + 1} failed: {msg.error}")
                        if hasattr(err, "add_note"):  # Python 3.11+: the worker's traceback, for a debugger
                            err.add_note(msg.traceback)
                        raise err
                    return i, msg
            for i, proc in enumerate(self.procs):
                if proc.sentinel in ready:
                    raise self._died(i)

    def _died(self, i: int) -> HarvesterError:
        proc = self.procs[i]
        proc.join(1)
        code = proc.exitcode
        how = (
            f"killed by signal {-code}"
            if code is not None and code < 0
            else f"exit code {code}"
            if code is not None
            else "its pipe closed"
        )
        return HarvesterError(
            f"ingest worker {i + 1} (pid {proc.pid}) stopped unexpectedly ({how}) while "
            f"reading {self.reading}; its runs may be stored in part (retry with --jobs 1)"
        )

    def close(self, *, kill: bool = False) -> None:
        if not kill:
            for i in range(len(self.requests)):
                try:
                    self.requests[i].send(Stop())
                except OSError:
                    pass
        for proc in self.procs:
            if kill:
                proc.terminate()
            proc.join(1 if kill else 5)
            if proc.is_alive():
                proc.kill()
                proc.join(1)
        for conn in [*self.requests, *self.replies]:
            conn.close()
        if self._froze:
            self._froze = False
            gc.unfreeze()

    # -- one file ------------------------------------------------------------------------------
    def ingest(self, source: Input, store: TraceStore, stats: IngestStats, batch_size: int) -> None:
        """One file, a segment at a time (``Input.chunks`` marks their ends): each segment is parsed,
        merged and written before the next is read, so memory holds one segment, not the file.
        ``Carried`` has what a segment leaves the next (parts without their agent span yet)."""
        self.reading = source.name
        chunks = source.chunks()
        carried = Carried()
        self._key = self._lines = 0
        try:
            while True:
                parsed, owner, more = self._parse(chunks, source.name)
                self._write(parsed, owner, store, stats, batch_size, carried)
                if not more:
                    break
            stats.end_file(carried.left())
        finally:
            carried.close()

    def _parse(self, chunks: Iterator[tuple[str, Any]], name: str) -> tuple[dict[int, Parsed], dict[int, int], bool]:
        """1. parse one segment's chunks on the least busy worker; the first error in file order wins.
        Returns what each chunk held, which worker holds it, and whether another segment follows."""
        n = len(self.procs)
        owner: dict[int, int] = {}
        parsed: dict[int, Parsed] = {}
        errors: dict[int, ParseError] = {}
        busy = [0] * n
        more = segment = True
        while True:
            while segment and not errors and min(busy) < _PARSE_AHEAD:
                chunk = next(chunks, None)
                if chunk is None or chunk is SEGMENT_END:
                    more, segment = chunk is not None, False
                    break
                i = busy.index(min(busy))
                self.send(i, Parse(self._key, chunk[0], name, chunk[1]))
                del chunk
                owner[self._key] = i
                busy[i] += 1
                self._key += 1
            if not any(busy):
                break
            i, msg = self.recv()
            busy[i] -= 1
            if isinstance(msg, Parsed):
                parsed[msg.key] = msg
            else:
                errors[msg.key] = msg
        if errors:
            first = errors[min(errors)]
            if first.line is None:
                raise _format_error(first.message, first.file, first.field)
            line = self._lines + first.line + sum(p.lines for k, p in parsed.items() if k < first.key)
            raise OtlpFormatError(first.message, file=first.file, field=f"line {line}")
        self._lines += sum(p.lines for p in parsed.values())
        return parsed, owner, more

    def _write(
        self,
        parsed: dict[int, Parsed],
        owner: dict[int, int],
        store: TraceStore,
        stats: IngestStats,
        batch_size: int,
        carried: Carried,
    ) -> None:
        n = len(self.procs)
        # 2. merge: each trace's chunks in file order; a trace split over workers goes to its first one
        order: dict[str, list[int]] = {}
        for k in sorted(parsed):
            chunk_read = parsed[k]
            stats.add_otlp(chunk_read.spans, chunk_read.skipped, chunk_read.reasons)
            for tid in chunk_read.trace_ids:
                keys = order.get(tid)
                if keys is None:
                    order[tid] = [k]
                else:
                    keys.append(k)
        del parsed
        self._gather(order, owner)
        # What earlier segments left without an agent span, then what the store holds (stored before,
        # or by an earlier segment): each joins as one more part, first, so the new copy of a span wins.
        earlier = carried.runs_of(order)  # stored by an earlier segment: counted there already
        stored = store.spans_of(order)
        replaced = set(stored)  # their stored runs are read again from all their spans: those rows go
        extra: dict[int, list[tuple[str, int, list[SpanData]]]] = {}
        for part in (carried.take(order), stored):
            for tid, spans in part.items():
                self._key += 1
                owner[self._key] = owner[order[tid][0]]
                extra.setdefault(owner[self._key], []).append((tid, self._key, spans))
                order[tid].insert(0, self._key)
        for i, parts in extra.items():
            self.send(i, Import(parts))
        del extra, stored

        # 3. write: batches of traces in file order; rows stored in that order
        items = list(order.items())
        del order
        batches = [items[b : b + _TRACES_PER_BATCH] for b in range(0, len(items), _TRACES_PER_BATCH)]
        del items
        results: dict[int, dict[int, tuple[Iterator[int | None], Iterator[tuple[Any, ...]]]]] = {}
        waiting: dict[int, int] = {}
        sent = done = 0
        pending: list[Row] = []
        while done < len(batches):
            while sent < len(batches) and sent - done < _WINDOW * n:
                shares: dict[int, list[tuple[str, list[int]]]] = {}
                for tid, keys in batches[sent]:
                    shares.setdefault(owner[keys[0]], []).append((tid, keys))
                for i, share in shares.items():
                    self.send(i, Write(sent, share))
                results[sent], waiting[sent] = {}, len(shares)
                sent += 1
            i, reply = self.recv()
            stats.add_lost(reply.lost)
            carried.keep(reply.no_agent)
            results[reply.batch][i] = (iter(reply.counts), iter(reply.rows))
            waiting[reply.batch] -= 1
            while done < sent and waiting[done] == 0:
                got = results.pop(done)
                runs: list[tuple[str, int]] = []
                for tid, keys in batches[done]:
                    count_it, row_it = got[owner[keys[0]]]
                    written = next(count_it)
                    if written is None:  # kept (``carried``): counted when the file ends, or joined
                        continue
                    stats.traces += tid not in earlier
                    stats.runs += written - earlier.get(tid, 0)
                    runs.append((tid, written))
                    for _ in range(written):
                        pending.append(Row(next(row_it)))
                carried.stored(runs)
                batches[done] = []
                done += 1
            # Store in transactions of up to batch_size runs, and whenever no reply is waiting: the
            # parent keeps up with the workers, so the file's last transaction is a small one.
            if len(pending) >= batch_size or (pending and not any(c.poll() for c in self.replies)):
                store.add_many(pending, replace_traces=[r[0] for r in pending if r[0] in replaced])
                pending = []
        if pending:
            store.add_many(pending, replace_traces=[r[0] for r in pending if r[0] in replaced])
        for i in range(n):
            self.send(i, Clear())

    def _gather(self, order: dict[str, list[int]], owner: dict[int, int]) -> None:
        """Move the parts of each trace split over several workers to the worker of its first part."""
        wanted: dict[int, list[tuple[str, int]]] = {}
        for tid, keys in order.items():
            if len(keys) > 1:
                first = owner[keys[0]]
                for k in keys[1:]:
                    if owner[k] != first:
                        wanted.setdefault(owner[k], []).append((tid, k))
        if not wanted:
            return
        for i, asks in wanted.items():
            self.send(i, Export(asks))
        moved: dict[int, list[tuple[str, int, list[SpanData]]]] = {}
        for _ in wanted:
            _, msg = self.recv()
            for tid, k, spans in msg.parts:
                moved.setdefault(owner[order[tid][0]], []).append((tid, k, spans))
        for i, parts in moved.items():
            self.send(i, Import(parts))
