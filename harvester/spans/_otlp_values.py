"""One OTLP/JSON span to ``SpanData``: attribute values, ids, times and enums as the JSON mapping
spells them (and as exporters get them wrong), never raising on a bad field but counting it."""

from __future__ import annotations

import base64
from typing import Any

from ._data import KIND_NAMES, STATUS_NAMES, SpanData

__all__ = ["attrs_from_otlp", "span_from_otlp"]

_INT64 = 1 << 63
_MAX_DEPTH = 32  # arrays and kvlists nested deeper than this are not attribute values anyone wrote


def _any_value(v: Any, depth: int = 0) -> Any:
    """Decode an OTLP ``AnyValue`` object (one key says the type); raises ``ValueError`` if malformed."""
    if not isinstance(v, dict):
        return v
    for key, inner in v.items():
        if key == "stringValue" or key == "boolValue" or key == "bytesValue":
            return inner
        if key == "intValue":
            n = int(inner)
            return n if -_INT64 <= n < _INT64 else str(inner)  # past int64: kept, as the text it was
        if key == "doubleValue":
            return float(inner)
        if depth >= _MAX_DEPTH and key in ("arrayValue", "kvlistValue"):
            raise ValueError("nested too deep")
        if key == "arrayValue":
            return [_any_value(x, depth + 1) for x in (inner or {}).get("values", ())]
        if key == "kvlistValue":
            return {str(kv["key"]): _any_value(kv.get("value"), depth + 1) for kv in (inner or {}).get("values", ())}
    return None


def attrs_from_otlp(items: Any, bad: list[str] | None = None) -> dict[str, Any]:
    """Attributes; a value that cannot be read is left out, its key added to ``bad`` (the rest are kept)."""
    out: dict[str, Any] = {}
    if isinstance(items, dict):  # a plain {key: value} map, as some hand-written exporters send
        items = [{"key": k, "value": v} for k, v in items.items()]
    elif not isinstance(items, list):
        if items and bad is not None:
            bad.append("attributes (not a list)")
        return out
    for kv in items:
        if isinstance(kv, dict) and "key" in kv:
            if not isinstance(kv["key"], str):
                if bad is not None:
                    bad.append("attribute key (not a string)")
                continue
            v = kv.get("value")
            if type(v) is dict and len(v) == 1 and "stringValue" in v:  # most attributes: no call
                out[kv["key"]] = v["stringValue"]
            else:
                try:
                    out[kv["key"]] = _any_value(v)
                except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
                    if bad is not None:
                        bad.append(f"attribute {str(kv['key'])[:80]}")
    return out


def _time(value: Any, field: str, bad: list[str] | None) -> int:
    """A ``*UnixNano`` time: 0 when missing, and when malformed or past uint64 (``field`` noted in ``bad``)."""
    if not value:
        return 0
    try:
        t = int(value)
    except (ValueError, TypeError):
        t = -1
    if 0 <= t < 1 << 64:
        return t
    if bad is not None:
        bad.append(field)
    return 0


def _hex_id(value: Any, length: int, field: str) -> str:
    """OTLP/JSON ids are hex; tolerate base64 (the protobuf JSON mapping). Raises ``ValueError`` if bad."""
    if not value:
        return ""
    s = str(value)
    if len(s) == length:
        try:
            bytes.fromhex(s)
            return s.lower()
        except ValueError:
            pass
    try:
        raw = base64.b64decode(s + "=" * (-len(s) % 4), validate=True)
    except (ValueError, TypeError):
        raise ValueError(f"bad {field}") from None
    if len(raw) * 2 != length:
        raise ValueError(f"bad {field}")
    return raw.hex()


def _enum(value: Any, names: dict[int, str], prefix: str, default: str) -> str:
    if isinstance(value, int):
        return names.get(value, default)
    if isinstance(value, str) and value:
        return value.removeprefix(prefix)
    return default


def span_from_otlp(
    s: dict[str, Any], scope: str = "", resource: dict[str, Any] | None = None, bad: list[str] | None = None
) -> SpanData:
    """One OTLP/JSON span object; raises ``ValueError``/``TypeError``/``KeyError`` if its ids are unusable.

    Anything else that cannot be read (an attribute value, an event, a time) is left out and named in
    ``bad``: one odd value must not cost the span, and an agent span's loss would cost the whole run.
    """
    status = s.get("status")
    if not isinstance(status, dict):
        status = {}
    parent = s.get("parentSpanId")
    trace_id, span_id = _hex_id(s["traceId"], 32, "traceId"), _hex_id(s["spanId"], 16, "spanId")
    if not trace_id.strip("0") or not span_id.strip("0"):
        raise ValueError("empty or all-zero traceId/spanId")
    events = []
    raw_events = s.get("events") or ()
    for e in raw_events if isinstance(raw_events, list) else ():
        if isinstance(e, dict):
            events.append(
                {
                    "name": str(e.get("name", "")),
                    "time_ns": _time(e.get("timeUnixNano"), "event time", bad),
                    "attributes": attrs_from_otlp(e.get("attributes"), bad),
                }
            )
        elif bad is not None:
            bad.append("event (not an object)")
    return SpanData(
        trace_id=trace_id,
        span_id=span_id,
        parent_id=_hex_id(parent, 16, "parentSpanId") or None if parent else None,
        name=str(s.get("name", "")),
        start_ns=_time(s.get("startTimeUnixNano"), "startTimeUnixNano", bad),
        end_ns=_time(s.get("endTimeUnixNano"), "endTimeUnixNano", bad),
        kind=_enum(s.get("kind"), KIND_NAMES, "SPAN_KIND_", "INTERNAL"),
        status=_enum(status.get("code"), STATUS_NAMES, "STATUS_CODE_", "UNSET"),
        status_message=str(status.get("message") or ""),
        attributes=attrs_from_otlp(s.get("attributes"), bad),
        events=events,
        scope=scope,
        resource=resource or {},
    )
