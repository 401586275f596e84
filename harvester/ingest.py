"""OTLP/JSON import: ``ingest_files`` (``harvester ingest``), in-process or on worker processes.

One document per file, or the Collector file exporter's JSON lines (one request per line, files of
hundreds of MB). Spans are grouped by trace within each file, normalized, redacted (never sampled:
an import keeps everything) and stored by the same ``RunWriter`` pipeline as live capture.

Small inputs (below ``PARALLEL_MIN_BYTES``, or ``jobs=1``) are read in this process. A big file is
shared out to ``jobs`` worker processes, the parent only reading bytes and writing SQLite:

1. parse: the file is cut into line-aligned chunks (a single big document: into slices of its
   ``resourceSpans``) and each chunk goes to the least busy worker, which parses it, groups its
   spans by trace and KEEPS them, answering only with the chunk's trace ids in order and counts.
   Parsed spans never cross a process boundary in the common case (pickling them costs more than
   parsing them).
2. merge: once the whole file is parsed (a trace may be split over several lines anywhere in the
   file), the parent knows which chunks hold each trace. The rare trace whose parts sit on two
   workers is moved whole to the worker holding its first part.
3. write: traces go back as ids, in batches, in their order of first appearance in the file; the
   owning worker concatenates the parts in file order, runs them through ``RunWriter``
   (normalize, redact, serialize) and returns ready rows, which the parent stores in that order
   in large transactions. The stored rows are the ones the in-process path stores, in the same order.

A malformed file raises the same ``OtlpFormatError`` as the in-process path (the first error in
file order, naming the file and line) before anything from it is stored. A worker that dies is a
``HarvesterError`` naming it; an interrupt terminates the workers.
"""

from __future__ import annotations

import gc
import io
import multiprocessing
import os
import pickle
import queue
import signal
import stat
import sys
import threading
import traceback
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import IO, Any, Callable, Iterable, Iterator, Sequence

import orjson

from .capture import RunWriter
from .errors import HarvesterError, OtlpFormatError
from .redact import Redactor
from .spans import (OtlpStats, SpanData, iter_otlp_documents, line_message, numbered_otlp_documents,
                    spans_of_document)
from .store import Row, TraceStore, merged_spans

PARALLEL_MIN_BYTES = 8 * 1024 * 1024  # smaller inputs are read in-process: no worker start-up
CHUNK_BYTES = 4 * 1024 * 1024  # bytes of JSON lines per parse request
SLICE_SPANS = 20_000  # spans of a single big document per parse request
_TRACES_PER_BATCH = 200  # traces per write request
_WINDOW = 6  # write requests in flight per worker
_PARSE_AHEAD = 2  # parse requests in flight per worker


@dataclass
class IngestStats:
    files: int = 0
    spans: int = 0
    runs: int = 0
    traces: int = 0
    skipped: int = 0  # malformed spans
    no_agent: int = 0  # traces without an agent span: nothing to store
    reasons: dict[str, int] = field(default_factory=dict)
    lost: dict[str, int] = field(default_factory=dict)  # read, but not stored: RunWriter's drops by reason

    def as_dict(self) -> dict[str, Any]:
        return {"files": self.files, "spans": self.spans, "runs": self.runs, "traces": self.traces,
                "skipped": self.skipped, "no_agent_traces": self.no_agent, "skip_reasons": self.reasons,
                "lost": self.lost}

    def add_lost(self, dropped: dict[str, int]) -> None:
        for reason, n in dropped.items():
            if reason != "no_agent":  # counted in no_agent_traces
                self.lost[reason] = self.lost.get(reason, 0) + n

    def add_otlp(self, spans: int, skipped: int, reasons: dict[str, int]) -> None:
        self.spans += spans
        self.skipped += skipped
        for reason, n in reasons.items():
            self.reasons[reason] = self.reasons.get(reason, 0) + n


def default_jobs() -> int:
    """Worker processes for a big import: one per core, at most 2 (the parent writes SQLite)."""
    return max(1, min(2, os.cpu_count() or 1))


def ingest_files(paths: Iterable[str], store: TraceStore, *, redact: Any = True, batch_size: int = 2000,
                 jobs: int | None = None, progress: Callable[[str], None] | None = None) -> IngestStats:
    """Import OTLP/JSON files (one document, or the Collector file exporter's JSON lines; ``-`` = stdin).

    Spans are grouped by trace within each file and normalized; every run is redacted (no sampling:
    an import keeps everything) and stored in batches of ``batch_size`` runs. Malformed spans are
    skipped and counted. A file that is not OTLP/JSON stops the import with an ``OtlpFormatError``
    naming it: runs from the files before it are stored, nothing from it.

    ``jobs``: worker processes for inputs of ``PARALLEL_MIN_BYTES`` or more (default
    ``default_jobs()``; 1 reads everything in this process). The stored rows are the same either way.
    ``progress`` is called with each file's name once its runs are stored.
    """
    jobs = default_jobs() if jobs is None else int(jobs)
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, not {jobs}")
    redactor = Redactor.from_option(redact)
    stats = IngestStats()
    writer = RunWriter(store, redact=redactor, batch_size=batch_size)  # the same path as live capture
    workers: _Workers | None = None
    try:
        for path in paths:
            name = "<stdin>" if path == "-" else path
            with _InputFile(path) as stream:
                head = b"" if jobs == 1 else _read(stream, PARALLEL_MIN_BYTES, path)
                if jobs == 1 or len(head) < PARALLEL_MIN_BYTES or not _can_share(redactor) \
                        or head[:3] in (b"\xef\xbb\xbf", b"\x1f\x8b\x08"):  # a BOM or gzip: read as a whole says what
                    _ingest_bytes(head + _read(stream, -1, path), name, writer, stats)
                else:
                    if workers is None:
                        workers = _Workers(jobs, redactor)
                    workers.ingest(_Input(stream, head, path, name), store, stats, batch_size)
            if progress is not None:
                progress(name)
        return stats
    finally:
        if workers is not None:
            workers.close(kill=sys.exc_info()[0] is not None)


def _ingest_bytes(data: bytes, name: str, writer: RunWriter, stats: IngestStats) -> None:
    """One file in this process (the reference path: the parallel one stores the same rows)."""
    otlp = OtlpStats()
    traces: dict[str, list[SpanData]] = {}
    for line, doc in numbered_otlp_documents(data, file=name):
        for span in spans_of_document(doc, otlp, file=name, line=line):
            traces.setdefault(span.trace_id, []).append(span)
    del data
    stats.files += 1
    stats.add_otlp(otlp.spans, otlp.skipped, otlp.reasons)
    stored = writer.store.spans_of(traces)
    before = dict(writer.dropped)
    for tid, spans in traces.items():
        stats.traces += 1
        written = writer.process_trace(merged_spans(stored.get(tid, ()), spans), replace=tid in stored)
        if written is None:
            stats.no_agent += 1
        else:
            stats.runs += written
    writer.flush(raise_errors=True)
    stats.add_lost({k: n - before.get(k, 0) for k, n in writer.dropped.items() if n > before.get(k, 0)})


# -- reading ----------------------------------------------------------------------------------
class _InputFile:
    def __init__(self, path: str) -> None:
        self.path = path
        self.stream: IO[bytes] | None = None

    def __enter__(self) -> IO[bytes]:
        if self.path == "-":
            return sys.stdin.buffer
        try:
            self.stream = open(self.path, "rb")
        except OSError as exc:
            raise OtlpFormatError(f"cannot read ({exc.strerror})", file=self.path) from None
        return self.stream

    def __exit__(self, *exc: Any) -> None:
        if self.stream is not None:
            self.stream.close()


def _read(stream: IO[bytes], n: int, path: str) -> bytes:
    try:
        return stream.read(n) if n >= 0 else stream.read()
    except OSError as exc:
        raise OtlpFormatError(f"cannot read ({exc.strerror})", file=path) from None


class _Input:
    """A big input cut into parse requests ``(kind, payload)``, as ``iter_otlp_documents`` reads it.

    JSON lines (the first line is a whole document): ``("range", (path, start, end))`` byte ranges
    of whole lines that the worker reads itself, or for a pipe ``("lines", bytes)``. One document:
    ``("doc", bytes)`` slices of its ``resourceSpans``.
    """

    def __init__(self, stream: IO[bytes], head: bytes, path: str, name: str) -> None:
        self.stream, self.head, self.path, self.name = stream, head, path, name

    def _more(self) -> bytes:
        return _read(self.stream, CHUNK_BYTES, self.path)

    def chunks(self) -> Iterator[tuple[str, Any]]:
        buf = self.head.lstrip()  # iter_otlp_documents numbers the lines of the stripped text
        self.head = b""
        while not buf:
            more = self._more()
            if not more:
                return
            buf = more.lstrip()
        while (nl := buf.find(b"\n")) < 0:
            more = self._more()
            if not more:
                break
            buf += more
        lines = False
        if nl >= 0:
            try:
                orjson.loads(buf[:nl])
                lines = True
            except orjson.JSONDecodeError:
                pass
        if not lines:
            yield from self._document(buf + _read(self.stream, -1, self.path))
        elif self.path != "-" and _regular(self.stream):
            yield from self._ranges(self.stream.tell() - len(buf))
        else:
            yield from self._pieces(buf)

    def _ranges(self, pos: int) -> Iterator[tuple[str, Any]]:
        """Whole-line byte ranges of a regular file: only the bytes around each cut are read here."""
        size = os.fstat(self.stream.fileno()).st_size  # the file as it is now, as a read_bytes would see it
        path = os.path.abspath(self.path)
        while pos < size:
            end = pos + CHUNK_BYTES
            if end >= size:
                end = size
            else:
                self.stream.seek(end)
                while True:
                    block = _read(self.stream, 1 << 16, self.path)
                    nl = block.find(b"\n")
                    if nl >= 0 or not block:
                        end = min(size, end + nl + 1 if nl >= 0 else size)
                        break
                    end += len(block)
            yield "range", (path, pos, end)
            pos = end

    def _pieces(self, buf: bytes) -> Iterator[tuple[str, Any]]:
        """Whole-line pieces of a stream (stdin, a pipe): sent to the workers as bytes."""
        parts = [buf]
        size = len(buf)
        while True:
            more = self._more()
            if more:
                parts.append(more)
                size += len(more)
                if size < CHUNK_BYTES:
                    continue
            data = b"".join(parts)
            cut = data.rfind(b"\n") + 1 if more else len(data)
            if cut == 0:  # one line longer than a chunk: keep reading
                parts, size = [data], len(data)
                continue
            if cut:
                yield "lines", data[:cut]
            if not more:
                return
            parts = [data[cut:]]
            size = len(parts[0])

    def _document(self, data: bytes) -> Iterator[tuple[str, Any]]:
        """One big document: parsed here, its ``resourceSpans`` re-cut into slices for the workers."""
        enabled = gc.isenabled()
        gc.disable()  # orjson builds a tree without cycles: collections while it grows only cost time
        try:
            docs = list(iter_otlp_documents(data, file=self.name))  # its errors, exactly
        finally:
            if enabled:
                gc.enable()
        del data
        for doc in docs:
            if not isinstance(doc, dict) or "resourceSpans" not in doc:
                raise OtlpFormatError("not an OTLP/JSON traces document (no resourceSpans)", file=self.name,
                                      field="resourceSpans")
            rspans = doc["resourceSpans"]
            if not isinstance(rspans, list):
                raise OtlpFormatError("must be a list", file=self.name, field="resourceSpans")
            start, weight = 0, 0
            for i, rs in enumerate(rspans):
                weight += _span_count(rs)
                if weight >= SLICE_SPANS:
                    yield "doc", orjson.dumps({"resourceSpans": rspans[start:i + 1]})
                    start, weight = i + 1, 0
            if start < len(rspans) or not rspans:
                yield "doc", orjson.dumps({"resourceSpans": rspans[start:]})


def _regular(stream: IO[bytes]) -> bool:
    try:
        return stat.S_ISREG(os.fstat(stream.fileno()).st_mode)
    except (OSError, ValueError, io.UnsupportedOperation):
        return False


def _span_count(rs: Any) -> int:
    if not isinstance(rs, dict):
        return 1
    n = 0
    for ss in rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or ():
        spans = ss.get("spans") if isinstance(ss, dict) else None
        n += len(spans) if isinstance(spans, list) else 1
    return n


# -- workers ----------------------------------------------------------------------------------
def _can_share(redactor: Redactor | None) -> bool:
    """Workers get the redactor; a spawned worker gets it pickled (a fork inherits it)."""
    if _start_method() == "fork":
        return True
    try:
        pickle.dumps(redactor)
        return True
    except Exception:  # noqa: BLE001 - e.g. a rule holding a lambda: read in-process instead
        return False


def _start_method() -> str:
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


class _RowSink(TraceStore):
    """The worker's "store": ``RunWriter`` hands it ready rows, which go back to the parent."""

    def __init__(self) -> None:  # no file: nothing of TraceStore but add_many is used
        self.path = "<ingest worker>"
        self.readonly = False
        self.rows: list[tuple[Any, ...]] = []

    def add_many(self, items: Iterable[Any]) -> int:
        before = len(self.rows)
        self.rows.extend(tuple(r) for r in items)  # plain tuples pickle several times faster than Row
        return len(self.rows) - before


def _worker_main(requests: Connection, replies: Connection, redactor: Redactor | None,
                 inherited: Sequence[Connection]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the parent, which terminates us
    for conn in inherited:  # a forked child holds the parent's ends of every pipe: drop them
        conn.close()
    inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
    outbox: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()

    def receive() -> None:  # always drain the request pipe, so the parent never blocks sending
        try:
            while True:
                inbox.put(requests.recv())
        except (EOFError, OSError):
            inbox.put(None)  # the parent is gone

    def send() -> None:  # replies are written while the next request is worked on
        try:
            while (data := outbox.get()) is not None:
                replies.send_bytes(data)
        except OSError:
            pass

    threading.Thread(target=receive, daemon=True).start()
    sender = threading.Thread(target=send, daemon=True)
    sender.start()

    def reply(msg: tuple[Any, ...]) -> None:
        outbox.put(pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))

    sink = _RowSink()
    writer = RunWriter(sink, redact=redactor, batch_size=1 << 62)
    held: dict[int, dict[str, list[SpanData]]] = {}  # chunk key -> trace id -> its spans in that chunk
    try:
        while (msg := inbox.get()) is not None:
            op = msg[0]
            if op == "parse":
                _, key, kind, name, payload = msg
                del msg
                gc.disable()  # parsing builds trees without cycles: collections would only cost time
                try:
                    reply(_parse(held, key, kind, name, payload))
                except _LineError as exc:
                    reply(("error", key, exc.args[0], name, None, exc.args[1]))
                except OtlpFormatError as exc:
                    reply(("error", key, str(exc), exc.file, exc.field, None))
                del payload
                gc.freeze()  # the held spans live until written: keep the collector off them
                gc.enable()
            elif op == "write":
                _, batch, items = msg
                counts: list[int | None] = []
                for tid, keys in items:
                    spans = held[keys[0]].pop(tid)
                    for k in keys[1:]:
                        spans.extend(held[k].pop(tid))
                    counts.append(writer.process_trace(merged_spans([], spans)))
                writer.flush(raise_errors=True)
                rows, sink.rows = sink.rows, []
                lost, writer.dropped = writer.dropped, {}
                reply(("rows", batch, counts, rows, lost))
            elif op == "export":
                reply(("parts", [(tid, k, held[k].pop(tid)) for tid, k in msg[1]]))
            elif op == "import":
                for tid, k, spans in msg[1]:
                    held.setdefault(k, {})[tid] = spans
            elif op == "clear":
                held.clear()
                gc.unfreeze()
            elif op == "stop":
                break
    except BaseException as exc:  # noqa: BLE001 - a bug: tell the parent what, then go
        reply(("fail", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
    outbox.put(None)
    sender.join()


class _LineError(Exception):
    """Invalid JSON at a line of a chunk: (message, line number within the chunk)."""


def _parse(held: dict[int, dict[str, list[SpanData]]], key: int, kind: str, name: str,
           payload: Any) -> tuple[Any, ...]:
    """One chunk: what ``iter_otlp_documents`` + ``spans_from_otlp`` read from those lines."""
    stats = OtlpStats()
    groups: dict[str, list[SpanData]] = {}
    held[key] = groups
    nlines = 0
    if kind == "doc":
        docs: Iterable[tuple[int | None, Any]] = ((None, orjson.loads(payload)),)
    else:
        if kind == "range":
            path, start, end = payload
            try:
                with open(path, "rb") as f:
                    f.seek(start)
                    payload = f.read(end - start)
            except OSError as exc:
                raise OtlpFormatError(f"cannot read ({exc.strerror})", file=name) from None
        lines = payload.splitlines()
        nlines = len(lines)  # every chunk but the last ends with a newline
        docs = _docs(lines)
    for line, doc in docs:
        try:
            spans = list(spans_of_document(doc, stats, file=name, line=None))
        except OtlpFormatError as exc:
            if line is None:
                raise
            raise _LineError(line_message(exc), line) from None
        for span in spans:
            group = groups.get(span.trace_id)
            if group is None:
                groups[span.trace_id] = [span]
            else:
                group.append(span)
    return ("parsed", key, list(groups), stats.spans, stats.skipped, stats.reasons, nlines)


def _docs(lines: list[bytes]) -> Iterator[tuple[int, Any]]:
    for n, line in enumerate(lines, 1):
        line = line.strip()
        if not line:
            continue
        try:
            yield n, orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise _LineError(f"invalid JSON ({exc})", n) from None


def _format_error(message: str, file: str | None, field: str | None) -> OtlpFormatError:
    """A worker's ``OtlpFormatError`` again (its message, file and field)."""
    where = ": ".join(p for p in (file, field) if p)
    if where and message.startswith(where + ": "):
        message = message[len(where) + 2:]
    return OtlpFormatError(message, file=file, field=field)


def _grow_pipe(conn: Connection) -> None:
    """1 MB pipe buffers (Linux): fewer wake-ups per request or reply of a few MB. Best effort."""
    try:
        import fcntl

        fcntl.fcntl(conn.fileno(), fcntl.F_SETPIPE_SZ, 1 << 20)  # type: ignore[attr-defined]
    except (ImportError, AttributeError, OSError):
        pass


class _Workers:
    """``jobs`` worker processes, each with a request pipe and a reply pipe."""

    def __init__(self, jobs: int, redactor: Redactor | None) -> None:
        method = _start_method()
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
                proc = ctx.Process(target=_worker_main, args=(req_r, rep_w, redactor, inherited), daemon=True,
                                   name=f"harvester-ingest-{i + 1}")
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
        try:
            self.requests[i].send(msg)
        except OSError:
            raise self._died(i) from None

    def recv(self) -> tuple[int, tuple[Any, ...]]:
        """The next reply of any worker; a dead worker raises, never hangs."""
        while True:
            ready = wait([*self.replies, *(p.sentinel for p in self.procs)])
            for i, conn in enumerate(self.replies):
                if conn in ready or conn.poll():
                    try:
                        msg = conn.recv()
                    except (EOFError, OSError):
                        raise self._died(i) from None
                    if msg[0] == "fail":
                        err = HarvesterError(f"ingest worker {i + 1} failed: {msg[1]}")
                        err.add_note(msg[2])  # the worker's traceback, for a debugger; not in the message
                        raise err
                    return i, msg
            for i, proc in enumerate(self.procs):
                if proc.sentinel in ready:
                    raise self._died(i)

    def _died(self, i: int) -> HarvesterError:
        proc = self.procs[i]
        proc.join(1)
        code = proc.exitcode
        how = (f"killed by signal {-code}" if code is not None and code < 0 else
               f"exit code {code}" if code is not None else "its pipe closed")
        return HarvesterError(f"ingest worker {i + 1} (pid {proc.pid}) stopped unexpectedly ({how}) while "
                              f"reading {self.reading}; its runs may be stored in part (retry with --jobs 1)")

    def close(self, *, kill: bool = False) -> None:
        if not kill:
            for i in range(len(self.requests)):
                try:
                    self.requests[i].send(("stop",))
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
    def ingest(self, source: _Input, store: TraceStore, stats: IngestStats, batch_size: int) -> None:
        n = len(self.procs)
        self.reading = source.name
        # 1. parse: chunks to the least busy worker; the first error in file order wins
        owner: dict[int, int] = {}
        parsed: dict[int, tuple[Any, ...]] = {}
        errors: dict[int, tuple[Any, ...]] = {}
        busy = [0] * n
        chunks = source.chunks()
        more = True
        key = 0
        while True:
            while more and not errors and min(busy) < _PARSE_AHEAD:
                chunk = next(chunks, None)
                if chunk is None:
                    more = False
                    break
                i = busy.index(min(busy))
                self.send(i, ("parse", key, chunk[0], source.name, chunk[1]))
                del chunk
                owner[key] = i
                busy[i] += 1
                key += 1
            if not any(busy):
                break
            i, msg = self.recv()
            busy[i] -= 1
            (parsed if msg[0] == "parsed" else errors)[msg[1]] = msg
        if errors:
            k = min(errors)
            _, _, message, file, field, line = errors[k]
            if line is None:
                raise _format_error(message, file, field)
            line += sum(parsed[j][6] for j in range(k))
            raise OtlpFormatError(message, file=file, field=f"line {line}")

        # 2. merge: each trace's chunks in file order; a trace split over workers goes to its first one
        order: dict[str, list[int]] = {}
        for k in sorted(parsed):
            _, _, tids, n_spans, skipped, reasons, _ = parsed[k]
            stats.add_otlp(n_spans, skipped, reasons)
            for tid in tids:
                keys = order.get(tid)
                if keys is None:
                    order[tid] = [k]
                else:
                    keys.append(k)
        del parsed
        stats.files += 1
        self._gather(order, owner)
        # traces already in the store: their stored spans join as one more part, on the same worker
        stored = store.spans_of(order)
        replaced = set(stored)  # their stored runs are read again from all their spans: those rows go
        if stored:
            extra: dict[int, list[tuple[str, int, list[SpanData]]]] = {}
            for tid, spans in stored.items():
                key += 1
                owner[key] = owner[order[tid][0]]
                extra.setdefault(owner[key], []).append((tid, key, spans))
                order[tid].insert(0, key)  # first, so the new copy of a span wins
            for i, parts in extra.items():
                self.send(i, ("import", parts))

        # 3. write: batches of traces in file order; rows stored in that order
        items = list(order.items())
        del order
        batches = [items[b:b + _TRACES_PER_BATCH] for b in range(0, len(items), _TRACES_PER_BATCH)]
        results: dict[int, dict[int, tuple[list[int | None], list[tuple[Any, ...]]]]] = {}
        waiting: dict[int, int] = {}
        sent = done = 0
        pending: list[Row] = []
        while done < len(batches):
            while sent < len(batches) and sent - done < _WINDOW * n:
                parts: dict[int, list[tuple[str, list[int]]]] = {}
                for tid, keys in batches[sent]:
                    parts.setdefault(owner[keys[0]], []).append((tid, keys))
                for i, part in parts.items():
                    self.send(i, ("write", sent, part))
                results[sent], waiting[sent] = {}, len(parts)
                sent += 1
            i, msg = self.recv()
            _, b, counts, rows, lost = msg
            stats.add_lost(lost)
            results[b][i] = (counts, rows)
            waiting[b] -= 1
            while done < sent and waiting[done] == 0:
                got = {w: (iter(c), iter(r)) for w, (c, r) in results.pop(done).items()}
                for tid, keys in batches[done]:
                    count_it, row_it = got[owner[keys[0]]]
                    written = next(count_it)
                    stats.traces += 1
                    if written is None:
                        stats.no_agent += 1
                        continue
                    stats.runs += written
                    for _ in range(written):
                        pending.append(Row(next(row_it)))
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
            self.send(i, ("clear",))

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
            self.send(i, ("export", asks))
        moved: dict[int, list[tuple[str, int, list[SpanData]]]] = {}
        for _ in wanted:
            _, msg = self.recv()
            for tid, k, spans in msg[1]:
                moved.setdefault(owner[order[tid][0]], []).append((tid, k, spans))
        for i, parts in moved.items():
            self.send(i, ("import", parts))
