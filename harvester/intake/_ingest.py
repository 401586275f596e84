"""OTLP/JSON import: ``ingest_files`` (``harvester ingest``), in-process or on worker processes.

One document per file, or the Collector file exporter's JSON lines (one request per line, files of
many GB). Spans are grouped by trace, normalized, redacted (never sampled: an import keeps
everything) and stored by the same ``RunWriter`` pipeline as live capture.

Small inputs (below ``PARALLEL_MIN_BYTES``) are read whole in this process. A big one is cut into
chunks (``Input``) and read a segment (``SEGMENT_BYTES``, 64 MB) at a time, so that memory holds one
segment whatever the file's size: on ``jobs`` worker processes, the parent only reading bytes and
writing SQLite (``Workers``), or with ``jobs=1`` here, cut and parsed the same way. Per segment:

1. parse: each chunk goes to the least busy worker, which parses it, groups its spans by trace and
   KEEPS them, answering only with the chunk's trace ids in order and counts. Parsed spans never
   cross a process boundary in the common case (pickling them costs more than parsing them).
2. merge: the parent knows which chunks hold each trace. The rare trace whose parts sit on two
   workers is moved whole to the worker holding its first part; what the store holds of a trace
   (stored before, or by an earlier segment) and what earlier segments left without an agent span
   (``Carried``) join it as parts.
3. write: traces go back as ids, in batches, in their order of first appearance; the owning worker
   concatenates the parts in file order, runs them through ``RunWriter`` (normalize, redact,
   serialize) and returns ready rows, which the parent stores in that order in large transactions.

A trace whose parts lie in several segments becomes the runs it would be read whole (stored again
from all its spans), counted once. A malformed file raises the same ``OtlpFormatError`` either way
(the first error in file order, naming the file and line), before anything of its segment is stored;
the segments before it are stored, and ingesting the fixed file again stores each run once. A
worker that dies is a ``HarvesterError`` naming it; an interrupt terminates the workers.
"""

from __future__ import annotations

import itertools
import os
import sys
from collections.abc import Iterable, Mapping, Sized
from dataclasses import dataclass, field
from typing import Any

from .._progress import Progress
from ..errors import OtlpFormatError
from ..redact import Redactor
from ..spans import OtlpStats, SpanData, numbered_otlp_documents, spans_of_document
from ..store import TraceStore, spans_blob
from ._carried import Carried
from ._collector import Held, paused
from ._input import SEGMENT_END, Input, InputFile, read
from ._pipeline import RunWriter, merged_spans
from ._worker import LineError, parse_chunk
from ._workers import Workers, can_share

PARALLEL_MIN_BYTES = 8 * 1024 * 1024  # smaller inputs are read in-process: no worker start-up

__all__ = ["IngestStats", "default_jobs", "ingest_files", "ingest_traces"]


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

    def end_file(self, no_agent_left: int) -> None:
        """A file read a segment at a time is done: the traces still carried held no agent span."""
        self.traces += no_agent_left
        self.no_agent += no_agent_left
        self.files += 1

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
    naming it: runs from the files before it are stored, and from its segments (64 MB each) before the
    bad line, nothing after it.

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
            with InputFile(path) as stream:
                head = read(stream, PARALLEL_MIN_BYTES, path)
                if len(head) < PARALLEL_MIN_BYTES or head[:3] in (b"\xef\xbb\xbf", b"\x1f\x8b\x08"):
                    _ingest_bytes(head + read(stream, -1, path), name, writer, stats)  # a BOM or gzip: read whole
                elif jobs == 1 or not can_share(redactor):
                    _ingest_segments(Input(stream, head, path, name), writer, stats)
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
    with paused():
        for line, doc in numbered_otlp_documents(data, file=name):
            for span in spans_of_document(doc, otlp, file=name, line=line):
                traces.setdefault(span.trace_id, []).append(span)
    del data
    stats.files += 1
    stats.add_otlp(otlp.spans, otlp.skipped, otlp.reasons)
    _store_traces(traces, writer, stats)


def _ingest_segments(source: Input, writer: RunWriter, stats: IngestStats) -> None:
    """A big file in this process (``jobs=1``): cut and parsed as the workers do it, a segment at a time,
    so memory holds one segment and the rows stored are the workers' rows, in their order."""
    carried = Carried()
    held: dict[int, dict[str, list[SpanData]]] = {}
    frozen = Held()
    lines = key = 0
    try:
        for chunk in itertools.chain(source.chunks(), [SEGMENT_END]):
            if chunk is not SEGMENT_END:
                try:
                    with paused():
                        parsed = parse_chunk(held, key, chunk[0], source.name, chunk[1])
                except LineError as exc:
                    raise OtlpFormatError(exc.args[0], file=source.name, field=f"line {lines + exc.args[1]}") from None
                frozen.hold()
                lines += parsed.lines
                key += 1
                stats.add_otlp(parsed.spans, parsed.skipped, parsed.reasons)
                continue
            traces: dict[str, list[SpanData]] = {}
            for k in sorted(held):
                for tid, spans in held.pop(k).items():
                    traces.setdefault(tid, []).extend(spans)
            _store_traces(traces, writer, stats, carried)
            del traces
            frozen.release()
        stats.end_file(carried.left())
    finally:
        frozen.release()
        carried.close()


def ingest_traces(traces: Mapping[str, list[SpanData]], store: TraceStore, *, redact: Any = True) -> IngestStats:
    """Store whole traces read elsewhere (a backend's API, an exported file) exactly as ``ingest`` stores
    a file's: merged with what is stored of them, normalized, redacted, every run kept. Written in one
    flush at the end, so an error before it leaves the store as it was."""
    stats = IngestStats()
    writer = RunWriter(store, redact=Redactor.from_option(redact), batch_size=1 << 30)
    stats.add_otlp(sum(len(s) for s in traces.values()), 0, {})
    _store_traces(traces, writer, stats)
    return stats


def _store_traces(
    traces: Mapping[str, list[SpanData]], writer: RunWriter, stats: IngestStats, carried: Carried | None = None
) -> None:
    """Store whole traces, each merged with what is stored of it; ``carried``: one segment of a file
    (``_carried`` says how its parts meet those of the segments before and after)."""
    stored = writer.store.spans_of(traces)
    earlier = carried.runs_of(traces) if carried is not None else {}
    kept = carried.take(traces) if carried is not None else {}
    before = dict(writer.dropped)
    runs: list[tuple[str, int]] = []
    no_agent: list[tuple[str, bytes]] = []
    for tid, spans in traces.items():
        merged = merged_spans([*stored.get(tid, ()), *kept.get(tid, ())], spans)
        written = writer.process_trace(merged, replace=tid in stored)
        if written is None and carried is not None:
            no_agent.append((tid, spans_blob(merged)))  # counted when the file ends, unless a part joins it
            continue
        stats.traces += tid not in earlier
        if written is None:
            stats.no_agent += 1
        else:
            stats.runs += written - earlier.get(tid, 0)
            runs.append((tid, written))
    writer.flush(raise_errors=True)
    if carried is not None:
        carried.keep(no_agent)
        carried.stored(runs)
    stats.add_lost({k: n - before.get(k, 0) for k, n in writer.dropped.items() if n > before.get(k, 0)})
