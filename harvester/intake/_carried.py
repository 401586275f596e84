"""``Carried``: what one big ``harvester ingest`` file carries from one segment to the next, on disk.

A big file is read a segment (``SEGMENT_BYTES``) at a time, so that memory does not grow with the file.
A trace whose parts lie in two segments still becomes the runs it would be read whole:

- a part that holds its agent span is stored; a later part is merged with what is stored of it and
  its runs read again from all the spans, as a trace split over two files is (``stored`` in
  ``Workers.ingest``);
- a part with no agent span yet cannot be stored (it would be dropped as "no agent"), so it is kept
  here until a later part joins it, and whatever is still here when the file ends is counted then as
  traces without an agent span;
- the runs each stored trace gave, so that a trace stored again is counted once, its runs once.

Both live in a private temporary SQLite database (``sqlite3.connect("")``: on disk, deleted when
closed), created only when a segment leaves something for the next one.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Sequence

from ..spans import SpanData
from ..store import spans_from_blob

__all__ = ["Carried"]

_IN = 500  # ids per query


class Carried:
    def __init__(self) -> None:
        self._db: sqlite3.Connection | None = None

    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            self._db = sqlite3.connect("", isolation_level=None)
            self._db.execute("PRAGMA journal_mode = OFF")
            self._db.execute("PRAGMA synchronous = OFF")
            self._db.execute("CREATE TABLE parts (trace_id TEXT PRIMARY KEY, spans BLOB) WITHOUT ROWID")
            self._db.execute("CREATE TABLE runs (trace_id TEXT PRIMARY KEY, runs INTEGER) WITHOUT ROWID")
        return self._db

    def keep(self, parts: Sequence[tuple[str, bytes]]) -> None:
        """Traces read so far that hold no agent span (id, ``spans_blob``): each replaces its older copy,
        which the part given here already includes."""
        if parts:
            self._conn().executemany("INSERT OR REPLACE INTO parts VALUES (?, ?)", parts)

    def take(self, trace_ids: Iterable[str]) -> dict[str, list[SpanData]]:
        """The kept parts of these traces, let go of here: they join the segment's parts."""
        if self._db is None:
            return {}
        out: dict[str, list[SpanData]] = {}
        for ids in _batches(trace_ids):
            marks = ",".join("?" * len(ids))
            rows = self._db.execute(f"SELECT trace_id, spans FROM parts WHERE trace_id IN ({marks})", ids).fetchall()
            if rows:
                self._db.execute(f"DELETE FROM parts WHERE trace_id IN ({marks})", ids)
                out.update((tid, spans_from_blob(blob)) for tid, blob in rows)
        return out

    def left(self) -> int:
        """Traces still kept: none of their parts held an agent span."""
        return 0 if self._db is None else int(self._db.execute("SELECT COUNT(*) FROM parts").fetchone()[0])

    def stored(self, runs: Sequence[tuple[str, int]]) -> None:
        """The runs each of these traces now has in the store, from this file."""
        if runs:
            self._conn().executemany("INSERT OR REPLACE INTO runs VALUES (?, ?)", runs)

    def runs_of(self, trace_ids: Iterable[str]) -> dict[str, int]:
        """Of these traces, those stored from an earlier segment of this file, and their runs."""
        if self._db is None:
            return {}
        out: dict[str, int] = {}
        for ids in _batches(trace_ids):
            marks = ",".join("?" * len(ids))
            out.update(self._db.execute(f"SELECT trace_id, runs FROM runs WHERE trace_id IN ({marks})", ids))
        return out

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None


def _batches(trace_ids: Iterable[str]) -> Iterable[list[str]]:
    batch: list[str] = []
    for tid in trace_ids:
        batch.append(tid)
        if len(batch) == _IN:
            yield batch
            batch = []
    if batch:
        yield batch
