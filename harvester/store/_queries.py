"""Reading a trace store (every read settles the inbox first), and retention."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import orjson

from ..errors import InputError, NotFoundError, StoreError
from ..spans import SpanData
from ._codec import epoch, spans_from_blob, unpacked
from ._host import HostBase

if TYPE_CHECKING:
    from ..model import Run

__all__ = ["Queries", "time_arg"]


def time_arg(value: float | str | datetime | None) -> float | None:
    """``since``/``until`` filters: unix seconds, a datetime, an ISO time, or ``30m``/``12h``/``7d`` ago."""
    if value is None or isinstance(value, (int, float)):
        return value
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).timestamp()
    text = str(value).strip()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    if text[:-1].replace(".", "", 1).isdigit() and text[-1:] in units:
        return time.time() - float(text[:-1]) * units[text[-1]]
    ts = epoch(text)
    if ts is None:
        raise InputError(f"cannot read time {value!r}: use an ISO time (2026-11-30T01:00) or an age (30m, 12h, 7d)")
    return ts


def _run_reader() -> Callable[[bytes], Run]:
    """A stored row's Run, validated with unknown keys ignored rather than refused (``extra="ignore"``).

    A row was a validated Run when it was written, so refusing keys only costs: checking every key of
    every nested object against the model's fields is a sixth of validating a row, and a field a later
    release adds to the Run within the same store schema still reads. An older pydantic-core takes no
    per-call ``extra``: there the models' own ``forbid`` applies (``Run`` drops the derived lists
    itself). The models load on the first read, never for a write.
    """
    from ..model import Run

    validate, loads = Run.__pydantic_validator__.validate_python, orjson.loads
    try:
        validate({"trace_id": ""}, extra="ignore")
    except TypeError:  # an older pydantic-core: no per-call extra
        return lambda blob: validate(loads(unpacked(blob)))
    return lambda blob: validate(loads(unpacked(blob)), extra="ignore")


class Queries(HostBase):
    """The reading half of ``TraceStore`` (what it calls on the rest of the store: ``StoreHost``)."""

    def _write(self, sql: str, rows: list[tuple[Any, ...]] | None = None) -> int:
        """One statement (for each of ``rows``) in one write transaction; the number of rows it changed."""
        return int(
            self._transact(
                lambda conn: (conn.executemany(sql, rows) if rows is not None else conn.execute(sql)).rowcount
            )
        )

    def count(self, *, failed: bool | None = None) -> int:
        self._settled()
        where, args = ("WHERE failed = ?", [int(failed)]) if failed is not None else ("", [])
        return next(self._query(f"SELECT COUNT(*) FROM runs {where}", args))[0]

    def resolve(self, trace_id: str) -> str | None:
        """The stored trace id ``trace_id`` names (exactly or as a unique prefix); None if unknown."""
        tid = trace_id.strip().lower()
        if not tid:
            return None
        self._settled()
        if next(self._query("SELECT 1 FROM runs WHERE trace_id = ? LIMIT 1", (tid,)), None):
            return tid
        matches = self.ids_like(tid, limit=6, prefix_only=True)
        if len(matches) > 1:
            raise NotFoundError(
                f"trace id prefix {trace_id!r} is ambiguous: {', '.join(matches[:5])}"
                + (", ..." if len(matches) > 5 else "")
            )
        return matches[0] if matches else None

    def get(self, trace_id: str) -> list[Run]:
        """Runs of a trace (exact id or unique prefix), in start order; [] when the trace is unknown."""
        read = _run_reader()
        return [read(r[0]) for r in self._of_trace("run", trace_id, "ORDER BY ts, id")]

    def spans(self, trace_id: str) -> list[SpanData]:
        """The raw spans stored with a trace's runs, each once, in start order."""
        seen: dict[str, SpanData] = {}
        for (blob,) in self._of_trace("spans", trace_id):
            if blob is not None:
                for sp in spans_from_blob(blob):
                    seen.setdefault(sp.span_id, sp)
        return sorted(seen.values(), key=lambda s: s.start_ns)

    def _of_trace(self, column: str, trace_id: str, order: str = "") -> list[tuple[Any, ...]]:
        """``column`` of a trace's rows, the trace named exactly or by a unique prefix (``resolve``). The
        exact id is tried first, in the one query that reads the rows: a full id costs no second query."""
        tid = trace_id.strip().lower()
        if not tid:
            return []
        sql = f"SELECT {column} FROM runs WHERE trace_id = ? {order}"
        if self._has_inbox:  # whether the inbox holds anything, asked in the same query: one query per read
            both = f"SELECT {column}, EXISTS (SELECT 1 FROM inbox) FROM runs WHERE trace_id = ? {order}"
            rows = list(self._query(both, (tid,)))
            if rows and not rows[0][-1]:
                return [row[:-1] for row in rows]
        self._settled()
        rows = list(self._query(sql, (tid,)))
        if rows:
            return rows
        named = self.resolve(tid)
        return list(self._query(sql, (named,))) if named is not None else []

    def spans_of(self, trace_ids: Iterable[str]) -> dict[str, list[SpanData]]:
        """The stored raw spans of those of ``trace_ids`` (full ids) already in the store, each span once.

        For an import that brings more of a trace already stored (a trace split over two of the
        Collector's files): its runs are read again from all of the trace's spans, not just the new ones.
        The inbox is left as it is (this runs on the capture worker): settling it merges its traces
        with whatever is stored of them by then.
        """
        ids = list(dict.fromkeys(trace_ids))
        stored = self._read_with(lambda conn: self._stored(conn, ids)[0])
        return {tid: spans for tid, spans in stored.items() if spans}

    def _filters(
        self, failed: bool | None, agent: str | None, since: Any, until: Any, trace_ids: Sequence[str] | None = None
    ) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        args: list[Any] = []
        if failed is not None:
            clauses.append("failed = ?")
            args.append(int(failed))
        if agent is not None:
            clauses.append("agent = ?")
            args.append(agent)
        if (t := time_arg(since)) is not None:
            clauses.append("ts >= ?")
            args.append(t)
        if (t := time_arg(until)) is not None:
            clauses.append("ts < ?")
            args.append(t)
        if trace_ids is not None:
            clauses.append(f"trace_id IN ({', '.join('?' * len(trace_ids))})")
            args.extend(trace_ids)
        return ("WHERE " + " AND ".join(clauses)) if clauses else "", args

    def runs(
        self,
        *,
        failed: bool | None = None,
        agent: str | None = None,
        since: Any = None,
        until: Any = None,
        limit: int | None = None,
        newest_first: bool = True,
    ) -> Iterator[Run]:
        """Stored runs, streamed from the database (never all loaded at once)."""
        read = _run_reader()
        for (blob,) in self._selected("run", failed, agent, since, until, limit, newest_first):
            yield read(blob)

    def _selected(
        self, column: str, failed: bool | None, agent: str | None, since: Any, until: Any, limit: Any, newest: bool
    ) -> Iterator[tuple[Any, ...]]:
        """``column`` of the runs the filters select, in start order (``newest`` first or last)."""
        self._settled()
        where, args = self._filters(failed, agent, since, until)
        order = "DESC" if newest else "ASC"
        sql = f"SELECT {column} FROM runs {where} ORDER BY ts {order}, id {order}"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(int(limit))
        return self._query(sql, args)

    def trace_ids(
        self,
        *,
        failed: bool | None = None,
        agent: str | None = None,
        since: Any = None,
        until: Any = None,
        limit: int | None = None,
    ) -> Iterator[str]:
        """Ids of the traces that have runs matching the filters, by their newest run first, each once,
        streamed (no run is decoded). ``limit``: of the runs read, as ``runs()`` counts them."""
        seen: set[str] = set()
        for (tid,) in self._selected("trace_id", failed, agent, since, until, limit, True):
            if tid not in seen:
                seen.add(tid)
                yield tid

    def ids_like(self, trace_id: str, *, limit: int = 5, prefix_only: bool = False) -> list[str]:
        """Stored trace ids nearest to ``trace_id``: those sharing its longest prefix (for "did you mean")."""
        tid = trace_id.strip().lower()
        self._settled()
        for n in range(len(tid), 0 if prefix_only else -1, -1):
            if prefix_only and n < len(tid):
                break
            p = tid[:n]
            if p and ord(p[-1]) >= 0x10FFFF:
                continue  # no character sorts after it: not a trace id anyway
            if p:
                hi = p[:-1] + chr(ord(p[-1]) + 1)
                rows = self._query(
                    "SELECT DISTINCT trace_id FROM runs WHERE trace_id >= ? AND trace_id < ? ORDER BY trace_id LIMIT ?",
                    (p, hi, limit),
                )
            else:
                rows = self._query(
                    "SELECT trace_id FROM runs GROUP BY trace_id ORDER BY MAX(ts) DESC, trace_id LIMIT ?", (limit,)
                )
            found = [r[0] for r in rows]
            if found:
                return found
        return []

    # -- retention -----------------------------------------------------------------------------
    def prune(
        self, keep_days: float | None = None, max_mb: float | None = None, *, keep_failed_days: float | None = None
    ) -> int:
        """Delete old runs; returns how many. Failures are kept longest.

        ``keep_days`` removes successful runs older than that; failed runs only go by age when
        ``keep_failed_days`` is given. ``max_mb`` then removes runs, oldest successes first and
        failures only once no success is left, until the stored runs fit.
        """
        for name, value in (("keep_days", keep_days), ("keep_failed_days", keep_failed_days), ("max_mb", max_mb)):
            if value is not None and not value >= 0:  # NaN too
                raise StoreError(f"{self.path}: {name} must be a number of 0 or more, not {value!r}")
        # An infinite limit is no limit (keep everything that way).
        keep_days, keep_failed_days, max_mb = (
            None if v is not None and math.isinf(v) else v for v in (keep_days, keep_failed_days, max_mb)
        )
        self._settled()  # failures are told apart by their runs
        deleted = 0
        now = time.time()
        if keep_days is not None:
            deleted += self._write(f"DELETE FROM runs WHERE failed = 0 AND ts < {now - keep_days * 86400!r}")
        if keep_failed_days is not None:
            deleted += self._write(f"DELETE FROM runs WHERE failed = 1 AND ts < {now - keep_failed_days * 86400!r}")
        if max_mb is not None:
            excess = next(self._query("SELECT COALESCE(SUM(size), 0) FROM runs"))[0] - int(max_mb * 1024 * 1024)
            victims: list[tuple[int]] = []
            if excess > 0:
                for rid, size in self._query("SELECT id, size FROM runs ORDER BY failed, ts, id"):
                    victims.append((rid,))
                    excess -= size
                    if excess <= 0:
                        break
            if victims:
                deleted += self._write("DELETE FROM runs WHERE id = ?", victims)
        if deleted:
            self._reclaim()
        return deleted
