"""``copy_store``: every run of one trace store into another, SQLite or PostgreSQL either way, resumable.

Rows are copied as they are stored (the run and its raw spans, deflated), in the source's order of
writing, a batch per transaction in the destination. A run the destination already holds (the same
trace and run id) is left as it is, so a copy that was stopped (Ctrl-C, a lost connection) is resumed
by running it again: it skips what arrived and copies the rest. The source's inbox is settled first,
as any read settles it, so traces captured but not yet read into runs are copied as runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .._progress import Progress
from ._codec import Row

if TYPE_CHECKING:
    from ._store import TraceStore

__all__ = ["Copied", "copy_store"]

BATCH = 1000  # runs per transaction in the destination
_COLUMNS = "trace_id, run_id, agent, started_at, ts, stop, failed, failure, size, run, spans"


@dataclass(slots=True)
class Copied:
    copied: int = 0
    present: int = 0  # already in the destination: left as they are


def copy_store(src: TraceStore, dst: TraceStore, *, batch: int = BATCH, progress: Progress | None = None) -> Copied:
    """Copy every run of ``src`` that ``dst`` does not hold; ``progress(done, total)`` after each batch."""
    src.settle()
    total = src.count()
    out = Copied()
    rows: list[Row] = []

    def flush() -> None:
        held = _held(dst, rows)
        new = [r for r in rows if (r[0], r[1]) not in held]
        dst.add_many(new)
        out.copied += len(new)
        out.present += len(rows) - len(new)
        rows.clear()
        if progress is not None:
            progress(out.copied + out.present, total)

    for row in src._query(f"SELECT {_COLUMNS} FROM runs ORDER BY id"):
        rows.append(Row(row))
        if len(rows) >= batch:
            flush()
    if rows:
        flush()
    return out


def _held(dst: TraceStore, rows: list[Row]) -> set[tuple[str, str]]:
    """Of the runs in ``rows``, those ``dst`` holds already."""
    traces = sorted({r[0] for r in rows})
    marks = ",".join("?" * len(traces))
    return {(t, r) for t, r in dst._query(f"SELECT trace_id, run_id FROM runs WHERE trace_id IN ({marks})", traces)}
