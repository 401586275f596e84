"""Settling the store's inbox: traces captured whole become runs, exactly as ingest would have stored them.

Handed to the store (``TraceStore(normalize=...)``; the store imports it itself when it was given
none): the store owns the transactions, this owns how a trace becomes rows.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..conventions import run_data_from_spans
from ..redact import Redactor
from ..spans import SpanData
from ..store import Row
from ._pipeline import merged_spans, run_rows

__all__ = ["normalize_inbox"]

log = logging.getLogger("harvester.intake")
_builtin: Redactor | None = None


def _builtin_redactor() -> Redactor:
    """The built-in rules, unkeyed: capture defers only runs whose redaction is exactly that."""
    global _builtin
    if _builtin is None:
        _builtin = Redactor(key="")  # "" and not None: $HARVESTER_REDACT_KEY must not apply here
    return _builtin


def normalize_inbox(
    traces: dict[str, list[SpanData]],
    stored: dict[str, list[SpanData] | None],
    redact: bool,
    drop: Callable[[str, int], None],
) -> tuple[list[Row], list[str]]:
    """The rows of an inbox row's traces, each merged with what is stored of it, and the traces whose
    stored runs these replace (``None`` in ``stored``: a stored part is unreadable, so the trace's
    stored runs are kept and only those read again are replaced)."""
    rows: list[Row] = []
    replace: list[str] = []
    redactor = _builtin_redactor() if redact else None

    def lost(reason: str) -> None:
        drop(reason, 1)

    for tid, spans in traces.items():
        earlier = stored.get(tid)
        try:
            spans = merged_spans(earlier or (), spans)
            runs = run_data_from_spans(spans)
            if not runs:
                drop("no_agent", 1)
                continue
            rows += run_rows(runs, spans, redactor, lost)
        except Exception:
            log.debug("could not normalize a trace", exc_info=True)
            drop("normalize_error", 1)
            continue
        if earlier:
            replace.append(tid)
    drop("traces", len(traces))
    drop("runs", len(rows))
    return rows, replace
