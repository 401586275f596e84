"""The intake pipeline after grouping: a finished trace's spans -> runs -> sample -> redact -> store.

``RunWriter`` serves the span processor, ``harvester ingest`` and the OTLP receiver alike, so a run is
treated identically however it arrived. It writes into a ``RowSink``: the trace store, or what
ingest's worker processes hand their rows to.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..conventions import subtree
from ..errors import StoreError
from ..model import RunData, data_failed
from ..redact import Redactor
from ..spans import SpanData
from ..store import Row, TraceStore, inbox_row, run_row, spans_blob

if TYPE_CHECKING:
    from ..model import Run

__all__ = ["RowSink", "RunWriter", "merged_spans", "run_rows", "run_spans", "sampled_in"]

log = logging.getLogger("harvester.intake")


@runtime_checkable
class RowSink(Protocol):
    """Where ``RunWriter`` puts rows: ``TraceStore`` is one; ingest's workers have their own."""

    path: str

    def add_many(
        self, items: Iterable[Any], *, replace_traces: Iterable[str] = (), inbox: Sequence[tuple[Any, ...]] = ()
    ) -> int: ...

    def spans_of(self, trace_ids: Iterable[str]) -> dict[str, list[SpanData]]: ...

    def close(self) -> None: ...


def merged_spans(earlier: Iterable[SpanData], new: Sequence[SpanData]) -> list[SpanData]:
    """A trace's spans from two reads (the store, and what arrived since), each span once: the new copy wins."""
    by_id = {s.span_id: s for s in earlier}
    by_id.update((s.span_id, s) for s in new)
    return list(by_id.values())


def run_spans(runs: Sequence[RunData], spans: Sequence[SpanData]) -> list[list[SpanData]]:
    """The raw spans to store beside each run: its agent span's subtree.

    Spans outside every run (an HTTP request span above the agent) go with the first run, so the
    trace's spans are all stored once and ``TraceStore.spans`` returns the whole trace.
    """
    if len(runs) == 1:
        return [list(spans)]
    children: dict[str | None, list[SpanData]] = {}
    for s in spans:
        children.setdefault(s.parent_id, []).append(s)
    by_id = {s.span_id: s for s in spans}
    taken: set[str] = set()
    out: list[list[SpanData]] = []
    for run in runs:
        root = by_id.get(run["run_id"])
        out.append(subtree(root, children, taken) if root is not None else [])
    rest = [s for s in spans if s.span_id not in taken]
    if rest and out:
        out[0].extend(rest)
    return out


def run_rows(
    runs: Sequence[RunData],
    spans: Sequence[SpanData],
    redactor: Redactor | None,
    drop: Callable[[str], None],
    wanted: Sequence[bool] | None = None,
) -> list[Row]:
    """The rows of one trace's runs (those ``wanted``), each redacted with its raw spans.

    Per run, so a redactor bug costs only the run it failed on (counted by ``drop``), and a run that
    could not be redacted is never written.
    """
    rows = []
    for i, (data, part) in enumerate(zip(runs, run_spans(runs, spans))):
        if wanted is not None and not wanted[i]:
            continue
        if redactor is not None:
            try:
                data, part = redactor.redact_data(data, part)
            except Exception:
                log.debug("could not redact a run", exc_info=True)
                drop("redact_error")
                continue
        try:
            rows.append(run_row(data, part))
        except Exception:
            log.debug("could not serialize a run", exc_info=True)
            drop("serialize_error")
    return rows


def sampled_in(trace_id: str, rate: float) -> bool:
    """Keep a trace at ``rate``, decided by its id (like OTel's ratio sampler: the low 64 bits)."""
    if rate >= 1.0:
        return True
    if rate <= 0.0:
        return False
    try:
        low = int(trace_id[-16:], 16)
    except ValueError:
        return False
    return low < rate * (1 << 64)


class RunWriter:
    """The pipeline after grouping: a finished trace's spans -> runs -> sample -> redact -> store.

    ``submit(spans)`` takes every span of one finished trace (or local subtree); runs are buffered
    and written in one transaction per ``batch_size`` runs, or when ``flush_interval_s`` has passed
    since the oldest buffered run; call ``flush()`` when you want them written now. A store error
    is counted (``dropped["store_error"]``) and never raised from ``submit``. Thread-safe.

    Sampling: every failed run (``Run.failed``) and every run ``keep(run)`` flags is kept; other
    runs are kept at ``sample_rate``, decided by trace id so a trace is kept or dropped whole.
    """

    def __init__(
        self,
        store: TraceStore | RowSink | str | os.PathLike[str] | None = None,
        *,
        sample_rate: float = 1.0,
        keep: Callable[[Run], bool] | None = None,
        redact: bool | Redactor | Mapping[str, Any] | None = True,
        batch_size: int = 512,
        flush_interval_s: float = 1.0,
        defer: bool = False,
    ) -> None:
        if not 0.0 <= sample_rate <= 1.0:
            raise ValueError(f"sample_rate must be between 0 and 1, not {sample_rate!r}")
        self.owns_store = not isinstance(store, (TraceStore, RowSink))
        self.store: RowSink = store if isinstance(store, (TraceStore, RowSink)) else TraceStore(store)
        self.sample_rate = sample_rate
        self.keep = keep
        self.redactor = Redactor.from_option(redact)
        self.batch_size = batch_size
        self.flush_interval_s = flush_interval_s
        # Deferring needs the reader to redact the runs exactly as we would: the built-in rules, unkeyed.
        self.defer = defer and (self.redactor is None or self.redactor.is_builtin_only())
        self.reset()

    def reset(self) -> None:
        """Fresh buffer, counters and lock (also in a forked child: those were the parent's)."""
        self._pending: list[tuple[Any, ...]] = []  # rows ready for the store, serialized outside its lock
        self._inbox: list[bytes] = []  # traces kept whole (``spans_blob``), to normalize at the first read
        self._inbox_pieces = 0  # of them, pieces of a trace written in parts
        self._pending_since = 0.0
        self._replace: set[str] = set()  # traces whose pending rows replace every run stored for them
        self._lock = threading.RLock()
        self.counts: dict[str, int] = {"traces": 0, "runs_seen": 0, "written": 0, "sampled_out": 0, "kept_failed": 0}
        if self.defer:
            self.counts["deferred"] = self.counts["traces_written"] = 0
        self.dropped: dict[str, int] = {}

    def drop(self, reason: str, n: int = 1) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + n

    def note(self, counter: str, n: int = 1) -> None:
        """Count something that happened to a trace (``incomplete_written``: finished before its root)."""
        self.counts[counter] = self.counts.get(counter, 0) + n

    @property
    def buffered(self) -> int:
        """Runs and deferred traces waiting for the next flush."""
        return len(self._pending) + len(self._inbox)

    def _wanted(self, data: RunData) -> bool:
        if data_failed(data):
            self.counts["kept_failed"] += 1
            return True
        if self.keep is not None:
            try:
                from ..model import Run  # only for a keep predicate: the hook builds no model otherwise

                if self.keep(Run.from_data(data)):
                    return True
            except BaseException:
                self.counts["keep_errors"] = self.counts.get("keep_errors", 0) + 1
        if sampled_in(data["trace_id"], self.sample_rate):
            return True
        self.counts["sampled_out"] += 1
        return False

    def merge_stored(self, spans: list[SpanData]) -> list[SpanData]:
        """``spans`` with the spans already stored for their trace (written earlier in parts), each once.

        Buffered rows are flushed first: a part written a moment ago must be read back too.
        """
        if not spans:
            return spans
        self.flush()
        stored = self.store.spans_of([spans[0].trace_id]).get(spans[0].trace_id)
        return merged_spans(stored, spans) if stored else spans

    def process_trace(
        self, spans: Sequence[SpanData], *, replace: bool = False, partial: bool = False, piece: bool = False
    ) -> int | None:
        """Normalize, sample, redact and serialize one trace's spans into the buffer; None if it had no agent run.

        Runs stay in their plain-dict form throughout (see ``run_data_from_spans``): a ``Run`` model
        is built only for a ``keep`` predicate or a run the redactor must rewrite. ``partial``: part
        of the trace may be stored already; it is read back and the trace's runs replaced. ``piece``:
        more of the trace may follow (it was finished before its root ended).

        With ``defer``, a trace sampled in by its id is kept whatever its runs hold, so nothing here
        needs to read them: its redacted spans go to the store's inbox, and the first read normalizes
        them (returns 0). Only a trace sampled out is normalized here, to keep its failed runs. A
        piece of a trace is marked as such, so the reader settles the pieces in the order written.
        """
        with self._lock:
            self.counts["traces"] += 1
            if self.defer and spans and sampled_in(spans[0].trace_id, self.sample_rate):
                return self._defer(spans, piece or partial)
            if partial:
                spans, replace = self.merge_stored(list(spans)), True
            from ..conventions import run_data_from_spans  # the readers load with the first trace read here

            try:
                runs = run_data_from_spans(spans)
            except Exception:
                log.debug("could not normalize a trace", exc_info=True)
                self.drop("normalize_error")
                self.note("lost_traces")
                return 0
            if not runs:
                self.drop("no_agent")
                return None
            self.counts["runs_seen"] += len(runs)
            if replace:  # every run of the trace is read again here: the stored ones go
                self._replace.add(runs[0]["trace_id"])
            wanted = [self._wanted(r) for r in runs]
            if not any(wanted):
                return 0
            rows = run_rows(runs, spans, self.redactor, self.drop, wanted)
            if len(rows) < sum(wanted):
                self.note("lost_traces")  # a run of it could not be redacted or serialized: not whole
            self._buffer(rows, self._pending)
            return len(rows)

    def _defer(self, spans: Sequence[SpanData], piece: bool) -> int:
        try:
            kept = self.redactor.redact_spans(spans) if self.redactor is not None else spans
        except Exception:
            log.debug("could not redact a trace", exc_info=True)
            self.drop("redact_error_traces")
            self.note("lost_traces")
            return 0
        try:
            trace = spans_blob(kept)
        except Exception:
            log.debug("could not serialize a trace", exc_info=True)
            self.drop("serialize_error_traces")
            self.note("lost_traces")
            return 0
        self.counts["deferred"] += 1
        self._inbox_pieces += piece
        self._buffer([trace], self._inbox)
        return 0

    def _buffer(self, rows: list[Any], into: list[Any]) -> None:
        if not self._pending and not self._inbox:
            self._pending_since = time.monotonic()
        into.extend(rows)
        if len(self._pending) + len(self._inbox) >= self.batch_size:
            self.flush()

    def submit(self, traces: Sequence[list[SpanData]], *, late: bool = False) -> list[list[SpanData]]:
        """The receiver's entry point: finished traces, each merged with what is stored of it. Never raises.

        On the network a trace can finish twice: an exporter retries a request after the trace was
        written, and the retried part becomes an open trace again. Read alone it would replace the
        stored run with part of itself, so, as ``harvester ingest`` does with a trace split over two
        files, its spans join the stored ones and its runs are read again from all of them. One store
        read for all the traces, after a flush: a part buffered a moment ago must be read back too.
        ``late``: the traces hold no agent span (the part retried may be the tools alone), so only
        those already stored are merged; the others are returned, for the caller to count.

        With ``defer``, a trace sampled in goes to the inbox as it is, with no read here: settling
        merges each inbox trace with what is stored of it by then. Only a late part needs the read (and
        the inbox settled first, where its trace may still be): whether it belongs to a stored trace.
        """
        if not traces:
            return []
        rest: list[list[SpanData]] = []
        if self.defer and not late:
            sampled_out = []
            with self._lock:
                for spans in traces:
                    if spans and sampled_in(spans[0].trace_id, self.sample_rate):
                        self._contained(spans, False)
                    else:
                        sampled_out.append(spans)
            if not sampled_out:
                return rest
            traces = sampled_out
        try:
            with self._lock:
                self.flush()
                if late and self.defer and isinstance(self.store, TraceStore):
                    self.store.settle()
                stored = self.store.spans_of(spans[0].trace_id for spans in traces if spans)
                for spans in traces:
                    tid = spans[0].trace_id if spans else ""
                    if late and tid not in stored:
                        rest.append(spans)
                        continue
                    self._contained(merged_spans(stored.get(tid, ()), spans), tid in stored)
            if (self._pending or self._inbox) and time.monotonic() - self._pending_since >= self.flush_interval_s:
                self.flush()
        except Exception:
            log.debug("dropped %d traces", len(traces), exc_info=True)
            self.drop("internal_error", len(traces))
        return rest

    def _contained(self, spans: Sequence[SpanData], replace: bool) -> None:
        try:
            self.process_trace(spans, replace=replace)
        except Exception:
            log.debug("dropped a trace", exc_info=True)
            self.drop("internal_error")

    def flush(self, *, raise_errors: bool = False) -> int:
        """Write the buffered runs and deferred traces in one transaction; on a store error count them lost, go on."""
        with self._lock:
            batch, self._pending = self._pending, []
            inbox, self._inbox = self._inbox, []
            pieces, self._inbox_pieces = self._inbox_pieces, 0
            replace, self._replace = self._replace, set()
            if not batch and not inbox:
                return 0
            try:
                if replace or inbox:
                    rows = [inbox_row(inbox, redacted=self.redactor is not None, pieces=pieces)] if inbox else []
                    self.store.add_many(batch, replace_traces=replace, inbox=rows)
                else:  # ingest's workers hand rows to a sink with only this form
                    self.store.add_many(batch)
            except Exception as exc:
                if batch:
                    self.drop("store_error", len(batch))
                if inbox:
                    self.drop("store_error_traces", len(inbox))
                self.note("lost_traces", len({row[0] for row in batch}) + len(inbox))  # in traces
                if raise_errors:
                    raise exc if isinstance(exc, StoreError) else StoreError(f"{self.store.path}: {exc}") from exc
                log.warning("harvester: could not store %d runs and %d traces: %s", len(batch), len(inbox), exc)
                return 0
            self.counts["written"] += len(batch)
            if inbox:
                self.counts["traces_written"] += len(inbox)
            return len(batch) + len(inbox)

    def close(self, timeout: float | None = None) -> None:
        self.flush()
        if self.owns_store:
            self.store.close()

    def stats(self) -> dict[str, Any]:
        """The counters, without taking the lock: a flush holds it while the store waits on a busy
        file (up to minutes), and the app's health check must not wait with it. Copying a dict of
        str keys is atomic under the GIL."""
        return {**self.counts, "dropped": dict(self.dropped)}
