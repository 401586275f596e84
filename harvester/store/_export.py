"""OTLP/JSON out: the stored raw spans of some traces (``harvester traces export``), as one document or as
JSON lines (a document per ``LINE_TRACES`` traces, streamed: what the Collector's file exporter writes,
and what ``harvester ingest`` reads in constant memory however big the store)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import orjson

from ..errors import NotFoundError
from ..spans import SpanData, to_otlp
from ._store import TraceStore

__all__ = ["LINE_TRACES", "export_otlp", "export_otlp_lines"]

LINE_TRACES = 100  # traces per line of ``export_otlp_lines``, as the Collector batches them


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
    ids = _ids(store, trace_ids, failed=failed, agent=agent, since=since, until=until, limit=limit)
    return to_otlp([span for tid in ids for span in store.spans(tid)])


def export_otlp_lines(store: TraceStore, trace_ids: Sequence[str] | None = None, **filters: Any) -> Iterator[bytes]:
    """The spans ``export_otlp`` would give for the same ids or filters (``failed``, ``agent``, ``since``,
    ``until``, ``limit``), as JSON lines, each an OTLP/JSON document of ``LINE_TRACES`` whole traces
    ending in a newline. Ids given are all resolved before the first line."""
    spans: list[SpanData] = []
    n = 0
    for tid in _ids(store, trace_ids, **filters):
        spans += store.spans(tid)
        n += 1
        if n == LINE_TRACES:
            yield orjson.dumps(to_otlp(spans)) + b"\n"
            spans, n = [], 0
    if spans:
        yield orjson.dumps(to_otlp(spans)) + b"\n"


def _ids(store: TraceStore, trace_ids: Sequence[str] | None, **filters: Any) -> list[str]:
    """The traces named (each resolved, or ``NotFoundError`` before any is read), else those the filters
    select. Read whole before the first trace's spans (ids only, no run decoded): a query left open
    on the store's connection would hold its snapshot for every read nested in it."""
    if not trace_ids:
        return list(store.trace_ids(**filters))
    ids = []
    for t in trace_ids:
        tid = store.resolve(t)
        if tid is None:
            raise NotFoundError(f"no trace {t!r} in {store.path}")
        ids.append(tid)
    return ids
