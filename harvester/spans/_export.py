"""Back to OTLP/JSON: ``SpanData`` grouped by resource and scope into one traces document."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from ._data import SpanData

__all__ = ["to_otlp"]


def _to_any_value(v: Any) -> dict[str, Any]:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, (list, tuple)):
        return {"arrayValue": {"values": [_to_any_value(x) for x in v]}}
    if isinstance(v, dict):
        return {"kvlistValue": {"values": [{"key": k, "value": _to_any_value(x)} for k, x in v.items()]}}
    return {"stringValue": "" if v is None else str(v)}


def _kvs(attrs: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"key": k, "value": _to_any_value(v)} for k, v in attrs.items()]


def to_otlp(spans: Iterable[SpanData]) -> dict[str, Any]:
    """An OTLP/JSON traces document, grouped by resource and scope, that ``spans_from_otlp`` reads back."""
    groups: dict[tuple[bytes, str], list[SpanData]] = {}
    resources: dict[bytes, dict[str, Any]] = {}
    for sp in spans:
        rkey = orjson.dumps(sp.resource, option=orjson.OPT_SORT_KEYS)
        resources[rkey] = sp.resource
        groups.setdefault((rkey, sp.scope), []).append(sp)
    by_resource: dict[bytes, list[dict[str, Any]]] = {}
    for (rkey, scope), items in groups.items():
        by_resource.setdefault(rkey, []).append({"scope": {"name": scope}, "spans": [_span_json(s) for s in items]})
    return {
        "resourceSpans": [
            {"resource": {"attributes": _kvs(resources[rkey])}, "scopeSpans": scope_spans}
            for rkey, scope_spans in by_resource.items()
        ]
    }


def _span_json(s: SpanData) -> dict[str, Any]:
    out: dict[str, Any] = {
        "traceId": s.trace_id,
        "spanId": s.span_id,
        "name": s.name,
        "kind": "SPAN_KIND_" + s.kind,
        "startTimeUnixNano": str(s.start_ns),
        "endTimeUnixNano": str(s.end_ns),
        "attributes": _kvs(s.attributes),
        "status": {"code": "STATUS_CODE_" + s.status, **({"message": s.status_message} if s.status_message else {})},
    }
    if s.parent_id:
        out["parentSpanId"] = s.parent_id
    if s.events:
        out["events"] = [
            {"name": e["name"], "timeUnixNano": str(e.get("time_ns", 0)), "attributes": _kvs(e.get("attributes") or {})}
            for e in s.events
        ]
    return out
