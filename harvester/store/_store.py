"""``TraceStore``: one SQLite file of normalized runs and the raw spans they were read from.

Each ``add_many`` is one transaction, so a crash loses at most the batch in flight. The store imports
nothing above ``model`` and ``spans``: its connections (``_connection``), schema (``_schema``), row
codec (``_codec``), inbox settling (``_settling``), reads and retention (``_queries``).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from ..spans import SpanData
from ._codec import Row, run_row
from ._connection import Connection, default_path
from ._postgres import PgConnection, is_postgres_url
from ._queries import Queries
from ._settling import Settling

if TYPE_CHECKING:
    from ..model import Run

__all__ = ["PgTraceStore", "TraceStore"]

_Self = TypeVar("_Self", bound="TraceStore")


class TraceStore(Queries, Settling, Connection):
    """Runs and their raw spans in one SQLite file (``.harvester/traces.db``; ``HARVESTER_STORE``), or in
    a PostgreSQL database (``TraceStore("postgresql://user@host:port/db")``: the same class's interface,
    on ``_postgres``'s connections).

    Safe to share between threads (one connection, a lock) and to use from several processes. The
    connection is reopened in a forked child, never shared with the parent. ``normalize``: how the
    inbox's traces become rows (the intake pipeline's by default).
    """

    def __new__(cls, path: str | os.PathLike[str] | None = None, *args: Any, **kwargs: Any) -> TraceStore:
        named = default_path() if path is None else path
        if cls is TraceStore and is_postgres_url(named):
            cls = PgTraceStore
        return super().__new__(cls)

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TraceStore({self.path!r})"

    # -- writing -------------------------------------------------------------------------------
    def add(self, run: Run, spans: Sequence[SpanData] | None = None) -> None:
        self.add_many([(run, spans)])

    def add_many(
        self,
        items: Iterable[tuple[Run, Sequence[SpanData] | None] | Run | Row],
        *,
        replace_traces: Iterable[str] = (),
        inbox: Sequence[tuple[Any, ...]] = (),
    ) -> int:
        """Store runs (with their raw spans) in one transaction; a run already stored is replaced.

        An item is a ``Run``, a ``(Run, spans)`` pair, or a ``Row`` that ``run_row`` already made.
        ``replace_traces``: traces whose stored runs all go first, in the same transaction, because
        ``items`` holds every run read again from all of their spans (a trace stored in parts: a run
        first read as its own may now be a sub-agent inside another). ``inbox``: ``inbox_row``s of
        traces to normalize at the first read, written in the same transaction.
        """
        rows = [
            item
            if isinstance(item, Row)
            else run_row(item[0].to_data(), item[1])
            if isinstance(item, tuple)
            else run_row(item.to_data(), None)
            for item in items
        ]
        if not rows and not inbox:
            return 0
        if inbox and not self._has_inbox:
            raise self._error("opened read-only")  # only a read-only schema-1 store lacks one

        def write(conn: sqlite3.Connection) -> int:
            if inbox:
                conn.executemany(
                    "INSERT INTO inbox (received, redact, count, pieces, traces) VALUES (?, ?, ?, ?, ?)", inbox
                )
            return self._insert(conn, rows, replace_traces)

        return self._transact(write)

    def _insert(self, conn: sqlite3.Connection, rows: list[Row], replace_traces: Iterable[str]) -> int:
        kept: dict[str, list[str]] = {tid: [] for tid in replace_traces}
        self._lock_traces(conn, [*kept, *(row[0] for row in rows)])
        for row in rows:
            if row[0] in kept:
                kept[row[0]].append(row[1])
        # Only the runs the new rows do not replace go: the others are replaced in place, as always.
        stale = [(tid, orjson.dumps(ids).decode()) for tid, ids in kept.items()]
        if stale:
            conn.executemany(
                "DELETE FROM runs WHERE trace_id = ? AND run_id NOT IN (SELECT value FROM json_each(?))", stale
            )
        if rows:
            conn.executemany(
                "INSERT OR REPLACE INTO runs (trace_id, run_id, agent, started_at, ts, stop, failed, "
                "failure, size, run, spans) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
        return len(rows)


class PgTraceStore(PgConnection, TraceStore):
    """A ``TraceStore`` in a PostgreSQL database: ``TraceStore(url)`` makes one (see ``_postgres``)."""
