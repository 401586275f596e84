"""OTLP/JSON out: the stored raw spans of some traces, as one document (``harvester traces export``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import NotFoundError
from ..spans import SpanData, to_otlp
from ._store import TraceStore

__all__ = ["export_otlp"]


def export_otlp(
    store: TraceStore,
    trace_ids: Sequence[str] | None = None,
    *,
    failed: bool | None = None,
    agent: str | None = None,
    since: Any = None,
    until: Any = None,
    limit: int | None = None,
) -> dict[str, Any]:
    """An OTLP/JSON document of the stored raw spans of the given traces (ids or prefixes) or filters."""
    if trace_ids:
        ids = []
        for t in trace_ids:
            tid = store.resolve(t)
            if tid is None:
                raise NotFoundError(f"no trace {t!r} in {store.path}")
            ids.append(tid)
    else:
        ids = list(
            dict.fromkeys(
                r.trace_id for r in store.runs(failed=failed, agent=agent, since=since, until=until, limit=limit)
            )
        )
    spans: list[SpanData] = []
    for tid in ids:
        spans.extend(store.spans(tid))
    return to_otlp(spans)
