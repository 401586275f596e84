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
import os
import stat
import sys
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sized
from dataclasses import dataclass, field
from typing import IO, Any

import orjson

from .._progress import Progress
from ..errors import OtlpFormatError
from ..redact import Redactor
from ..spans import OtlpStats, SpanData, iter_otlp_documents, numbered_otlp_documents, spans_of_document
from ..store import TraceStore
from ._pipeline import RunWriter, merged_spans
from ._workers import Workers, can_share

PARALLEL_MIN_BYTES = 8 * 1024 * 1024  # smaller inputs are read in-process: no worker start-up
CHUNK_BYTES = 4 * 1024 * 1024  # bytes of JSON lines per parse request
SLICE_SPANS = 20_000  # spans of a single big document per parse request

__all__ = ["IngestStats", "Input", "default_jobs", "ingest_files", "ingest_traces"]


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
        """Deprecated: ``to_dict()``."""
        warnings.warn("IngestStats.as_dict() is deprecated: use to_dict()", DeprecationWarning, stacklevel=2)
        return self.to_dict()

    def to_dict(self) -> dict[str, Any]:
        return {
            "files": self.files,
            "spans": self.spans,
            "runs": self.runs,
            "traces": self.traces,
            "skipped": self.skipped,
            "no_agent_traces": self.no_agent,
            "skip_reasons": self.reasons,
            "lost": self.lost,
        }

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


def ingest_files(
    paths: Iterable[str],
    store: TraceStore,
    *,
    redact: Any = True,
    batch_size: int = 2000,
    jobs: int | None = None,
    progress: Progress | None = None,
) -> IngestStats:
    """Import OTLP/JSON files (one document, or the Collector file exporter's JSON lines; ``-`` = stdin).

    Spans are grouped by trace within each file and normalized; every run is redacted (no sampling:
    an import keeps everything) and stored in batches of ``batch_size`` runs. Malformed spans are
    skipped and counted. A file that is not OTLP/JSON stops the import with an ``OtlpFormatError``
    naming it: runs from the files before it are stored, nothing from it.

    ``jobs``: worker processes for inputs of ``PARALLEL_MIN_BYTES`` or more (default
    ``default_jobs()``; 1 reads everything in this process). The stored rows are the same either way.
    ``progress(done, total)`` is called as each file's runs are stored (``total``: None for an iterator).
    """
    jobs = default_jobs() if jobs is None else int(jobs)
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, not {jobs}")
    redactor = Redactor.from_option(redact)
    stats = IngestStats()
    writer = RunWriter(store, redact=redactor, batch_size=batch_size)  # the same path as live capture
    workers: Workers | None = None
    total = len(paths) if isinstance(paths, Sized) else None
    try:
        for done, path in enumerate(paths, 1):
            name = "<stdin>" if path == "-" else path
            with _InputFile(path) as stream:
                head = b"" if jobs == 1 else _read(stream, PARALLEL_MIN_BYTES, path)
                if (
                    jobs == 1
                    or len(head) < PARALLEL_MIN_BYTES
                    or not can_share(redactor)
                    or head[:3] in (b"\xef\xbb\xbf", b"\x1f\x8b\x08")
                ):  # a BOM or gzip: read as a whole says what
                    _ingest_bytes(head + _read(stream, -1, path), name, writer, stats)
                else:
                    if workers is None:
                        workers = Workers(jobs, redactor)
                    workers.ingest(Input(stream, head, path, name), store, stats, batch_size)
            if progress is not None:
                progress(done, total)
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
    _store_traces(traces, writer, stats)


def ingest_traces(traces: Mapping[str, list[SpanData]], store: TraceStore, *, redact: Any = True) -> IngestStats:
    """Store whole traces read elsewhere (a backend's API, an exported file) exactly as ``ingest`` stores
    a file's: merged with what is stored of them, normalized, redacted, every run kept. Written in one
    flush at the end, so an error before it leaves the store as it was."""
    stats = IngestStats()
    writer = RunWriter(store, redact=Redactor.from_option(redact), batch_size=1 << 30)
    stats.add_otlp(sum(len(s) for s in traces.values()), 0, {})
    _store_traces(traces, writer, stats)
    return stats


def _store_traces(traces: Mapping[str, list[SpanData]], writer: RunWriter, stats: IngestStats) -> None:
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


class Input:
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
                raise OtlpFormatError(
                    "not an OTLP/JSON traces document (no resourceSpans)", file=self.name, field="resourceSpans"
                )
            rspans = doc["resourceSpans"]
            if not isinstance(rspans, list):
                raise OtlpFormatError("must be a list", file=self.name, field="resourceSpans")
            start, weight = 0, 0
            for i, rs in enumerate(rspans):
                weight += _span_count(rs)
                if weight >= SLICE_SPANS:
                    yield "doc", orjson.dumps({"resourceSpans": rspans[start : i + 1]})
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
