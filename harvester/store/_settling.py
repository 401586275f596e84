"""Settling the inbox: traces captured whole are turned into runs at the store's first read.

The capture processor may store a finished trace's (redacted) spans in the ``inbox`` instead of
normalizing them on the production worker: reading the trace's runs costs more CPU than everything
else capture does. Every read of the store settles the inbox first, so readers never see it.

How a trace becomes rows (reading its runs, redacting them) is the intake pipeline's: a callable
handed to the store (``TraceStore(normalize=...)``). A store opened without one imports the intake's
on its first settle, the one place this floor calls up.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

import orjson

from ..errors import StoreError
from ..spans import SpanData
from ._codec import Row, spans_from_blob, spans_of
from ._host import HostBase

__all__ = ["Normalize", "SETTLE_TRIES", "Settling"]

log = logging.getLogger("harvester.store")
SETTLE_TRIES = 3  # optimistic settles of one inbox row before it is settled inside one transaction


class Normalize(Protocol):
    """``(traces, stored, redact, drop) -> (rows, traces whose stored runs the rows replace)``.

    ``traces``: an inbox row's traces by id; ``stored``: what the store holds of each (None: a stored
    part is unreadable); ``redact``: give the runs the built-in redaction; ``drop(reason, n)`` counts.
    """

    def __call__(
        self,
        traces: dict[str, list[SpanData]],
        stored: dict[str, list[SpanData] | None],
        redact: bool,
        drop: Callable[[str, int], None],
    ) -> tuple[list[Row], list[str]]: ...


class _Raced(Exception):
    """Another writer stored more of a trace while an inbox row was normalized: read it again."""


class Settling(HostBase):
    """The inbox half of ``TraceStore`` (what it calls on the rest of the store: ``StoreHost``)."""

    normalize: Normalize | None  # how inbox traces become rows; None: the intake's (``_normalize``)
    on_settle: Callable[[int, int], None] | None

    def pending(self) -> int:
        """Traces captured into the inbox and not normalized yet."""
        if not self._has_inbox:
            return 0
        return next(self._query("SELECT COALESCE(SUM(count), 0) FROM inbox"))[0]

    def settle(self) -> dict[str, int]:
        """Normalize the inbox into runs, as ingest would have stored them; what it did, counted.

        Every read calls this first, so callers never need to. The batches in the inbox when it
        starts are taken oldest first (batches captured meanwhile wait for the next read, so a busy
        app cannot keep a reader here). A batch is normalized outside any transaction; a short one
        then stores its runs and deletes its row together, so a crash loses nothing and capture
        writers are not held up while it normalizes. A trace that arrived in parts is merged with
        what is stored of it, and its runs replaced.
        """
        counts: dict[str, int] = {}
        if not self._has_inbox:
            return counts
        last, total = self._latest("SELECT MAX(id), COALESCE(SUM(count), 0) FROM inbox")
        done = after = 0
        while last is not None:
            try:
                taken = self._settle_one(after, last, counts)
            except StoreError as exc:
                if "cannot write" not in str(exc):
                    raise
                raise StoreError(
                    f"{exc} ({total - done} captured traces wait to be normalized into runs; every "
                    "read does that first, so reading needs write access to the store)"
                ) from None
            if taken is None:
                break
            n, after = taken
            done += n
            if self.on_settle is not None:
                self.on_settle(min(done, total), total)
        lost = {k: v for k, v in counts.items() if k not in ("traces", "runs", "no_agent")}
        if lost:
            log.warning("%s: normalizing captured traces lost some: %s", self.path, lost)
        return counts

    def _settle_one(self, after: int, last_id: int, counts: dict[str, int]) -> tuple[int, int] | None:
        """Settle the oldest inbox row after ``after`` up to ``last_id``: its number of traces and its id,
        or None when none is left. Rows are taken in id order, each once: a read whose connection still
        sees an older snapshot (a cursor of the caller's left open on it) sees rows already settled, and
        must not take them again.

        Optimistic for a row of whole traces (most rows): it is normalized against the stored runs of
        its traces as they were read, and the transaction checks that those are unchanged (another
        reader, or a capture worker, may have stored more of a trace meanwhile) and that the row is
        still there, else it reads again. After a few lost races, and for a row holding pieces of
        traces, the row is settled inside one transaction.
        """
        row = self._latest(
            "SELECT id, redact, count, pieces, traces FROM inbox WHERE id > ? AND id <= ? ORDER BY id LIMIT 1",
            (after, last_id),
        )
        if row is None:
            return None
        row_id, redact, count, pieces, blob = row
        found: dict[str, int] = {}
        traces: dict[str, list[SpanData]] = {}
        try:
            for trace in orjson.loads(blob):
                spans = spans_of(trace)
                if spans:
                    traces.setdefault(spans[0].trace_id, []).extend(spans)
        except (ValueError, TypeError, IndexError, KeyError):  # a foreign or damaged row: counted, never a crash
            found["unreadable"] = count
            traces = {}
        ids = list(traces)
        # Pieces of one trace may sit in several rows, and a piece settled before an older one would
        # find nothing to merge with: rows holding pieces are settled inside one transaction, which
        # serializes them, oldest first.
        for attempt in range(SETTLE_TRIES if pieces else 0, SETTLE_TRIES + 1):
            last_try = attempt == SETTLE_TRIES
            tally = dict(found)
            rows: list[Row] = []
            replace: list[str] = []
            version: list[tuple[Any, ...]] = []
            if not last_try:
                stored, version = self._read_with(lambda conn: self._stored(conn, ids))
                rows, replace = self._normalize(traces, stored, bool(redact), tally)

            def write(conn: Any) -> int:  # run now, in this iteration: its names are this one's
                nonlocal rows, replace
                if conn.execute("DELETE FROM inbox WHERE id = ?", (row_id,)).rowcount == 0:
                    return 0  # another reader settled it
                self._lock_traces(conn, ids)  # PostgreSQL: another writer of these traces goes first or waits
                if last_try:  # noqa: B023
                    rows, replace = self._normalize(traces, self._stored(conn, ids)[0], bool(redact), tally)  # noqa: B023
                elif self._stored(conn, ids, spans=False)[1] != version:  # noqa: B023
                    raise _Raced
                self._insert(conn, rows, replace)
                return 1

            try:
                if self._transact(write, settling=True):
                    for k, v in tally.items():
                        counts[k] = counts.get(k, 0) + v
                return count, row_id
            except _Raced:
                continue
        return count, row_id  # not reached: the last try cannot race

    def _stored(
        self, conn: Any, trace_ids: list[str], *, spans: bool = True
    ) -> tuple[dict[str, list[SpanData] | None], list[tuple[Any, ...]]]:
        """The stored spans of these traces (None for a trace with an unreadable part), and what tells
        their runs apart from any others stored in their place: row id, run id and size together (a
        replaced row may get the same row id back)."""
        out: dict[str, dict[str, SpanData] | None] = {}
        version: list[tuple[Any, ...]] = []
        for i in range(0, len(trace_ids), 500):
            part = trace_ids[i : i + 500]
            cols = "id, trace_id, run_id, size, spans" if spans else "id, trace_id, run_id, size, NULL"
            sql = f"SELECT {cols} FROM runs WHERE trace_id IN ({','.join('?' * len(part))})"
            for rid, tid, run_id, size, blob in conn.execute(sql, part):
                version.append((rid, tid, run_id, size))
                seen = out.setdefault(tid, {})
                if blob is None or seen is None:
                    continue
                try:
                    for sp in spans_from_blob(blob):
                        seen.setdefault(sp.span_id, sp)
                except (ValueError, TypeError, IndexError, KeyError):
                    log.warning("%s: a stored run of trace %s has unreadable spans; left as it is", self.path, tid)
                    out[tid] = None
        version.sort()
        return {tid: list(seen.values()) if seen is not None else None for tid, seen in out.items()}, version

    def _settled(self) -> None:
        """Before a read: the inbox normalized, if anything is in it."""
        if self._has_inbox and self._latest("SELECT EXISTS (SELECT 1 FROM inbox)")[0]:
            self.settle()

    def _latest(self, sql: str, args: tuple[Any, ...] = ()) -> Any:
        """The first row of a query of the inbox as it is now: asked on the writing connection. The
        reading one may hold an older snapshot (a caller's listing open on it, with reads nested in
        it), where batches already settled still show and those captured since do not."""
        return self._read_with(lambda conn: conn.execute(sql, args).fetchone())

    def _normalize(
        self,
        traces: dict[str, list[SpanData]],
        stored: dict[str, list[SpanData] | None],
        redact: bool,
        counts: dict[str, int],
    ) -> tuple[list[Row], list[str]]:
        def drop(reason: str, n: int = 1) -> None:
            counts[reason] = counts.get(reason, 0) + n

        normalize = self.normalize
        if normalize is None:
            from ..intake import normalize_inbox  # the documented call up: see the module's docstring

            normalize = self.normalize = normalize_inbox
        return normalize(traces, stored, redact, drop)
