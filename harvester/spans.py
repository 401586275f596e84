"""One in-memory form for a finished span, whatever it came from.

The SDK's ``ReadableSpan``, an OTLP/JSON document (file exporter, ``harvester ingest``) and an
OTLP protobuf request (``harvester serve``) all become ``SpanData``; the conventions readers, the
store and the exporters only know this form. Plain slots and dicts: this is on the hot path.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import orjson

from .errors import OtlpFormatError
from .seam import replay_span

STATUS_NAMES = {0: "UNSET", 1: "OK", 2: "ERROR"}
KIND_NAMES = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}


@dataclass(slots=True)
class SpanData:
    trace_id: str  # 32 lowercase hex
    span_id: str  # 16 lowercase hex
    parent_id: str | None
    name: str
    start_ns: int = 0
    end_ns: int = 0
    kind: str = "INTERNAL"
    status: str = "UNSET"  # UNSET | OK | ERROR
    status_message: str = ""
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)  # {"name", "time_ns", "attributes"}
    scope: str = ""
    resource: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {s: getattr(self, s) for s in self.__slots__}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SpanData":
        return cls(**d)


# -- from the OpenTelemetry SDK ---------------------------------------------------------------
_NOT_SDK: Any = object()
_resources: dict[int, tuple[Any, dict[str, Any]]] = {}  # id(Resource) -> (it, its attributes): one per provider


def from_readable(span: Any) -> SpanData:
    """Convert an SDK ``ReadableSpan``. Runs on the capture worker, never on the app's thread.

    Reads the span's private fields where they exist: the public properties wrap the attributes in
    a ``MappingProxyType`` over ``BoundedAttributes`` (a Python-level mapping, slow to iterate) and
    copy the events. A provider's ``Resource`` is shared by all its spans: converted once.
    """
    cls = type(span)
    fast = _PLAIN_CLASSES.get(cls)
    if fast is None:
        fast = _PLAIN_CLASSES[cls] = _reads_fields(cls)
    if fast:  # an SDK span: its properties only return its fields
        try:
            ctx, parent, status = span._context, span._parent, span._status
            scope, res = span._instrumentation_scope, span._resource
            name, kind, start, end = span._name, span._kind, span._start_time, span._end_time
            attrs, events = span._attributes, span._events
        except AttributeError:  # a subclass that never set them
            fast = _PLAIN_CLASSES[cls] = False
    if not fast:
        ctx, parent, status = span.context, span.parent, span.status
        scope, res = span.instrumentation_scope, span.resource
        name, kind, start, end = span.name, span.kind, span.start_time, span.end_time
        attrs = getattr(span, "_attributes", _NOT_SDK)
        if attrs is _NOT_SDK:
            attrs = span.attributes
        events = getattr(span, "_events", _NOT_SDK)
        if events is _NOT_SDK:
            events = span.events
    if res is None:
        resource: dict[str, Any] = {}
    else:
        cached = _resources.get(id(res))
        if cached is None or cached[0] is not res:
            if len(_resources) > 64:
                _resources.clear()
            cached = _resources[id(res)] = (res, _plain_attrs(res.attributes))
        resource = cached[1]
    global _last_trace
    tid = ctx.trace_id
    last = _last_trace  # one tuple, replaced whole: safe to share between threads
    if last[0] == tid:  # the spans of one trace arrive together: format its id once
        trace_hex = last[1]
    else:
        trace_hex = "%032x" % tid
        _last_trace = (tid, trace_hex)
    return SpanData(
        trace_hex, "%016x" % ctx.span_id,
        "%016x" % parent.span_id if parent is not None else None,
        name, start or 0, end or 0,
        _KINDS.get(id(kind), "INTERNAL"),
        _KINDS.get(id(status.status_code), "UNSET") if status is not None else "UNSET",
        (status.description or "") if status is not None else "",
        _plain_attrs(attrs),
        [{"name": e.name, "time_ns": e.timestamp or 0, "attributes": _plain_attrs(e.attributes)} for e in events]
        if (events := getattr(events, "_dq", events)) else [],  # a BoundedList's deque: its len() is C
        scope.name if scope is not None else "",
        resource,
    )


_last_trace: tuple[Any, str] = (None, "")
_FIELD_PROPERTIES = ("context", "parent", "status", "instrumentation_scope", "resource", "name", "kind",
                     "start_time", "end_time")
_PLAIN_CLASSES: dict[type, bool] = {}


def _reads_fields(cls: type) -> bool:
    """True for the SDK's span classes, whose properties return the private fields unchanged."""
    try:
        from opentelemetry.sdk.trace import ReadableSpan
    except ImportError:  # pragma: no cover - the SDK is a dependency
        return False
    if not issubclass(cls, ReadableSpan):
        return False
    if not all(getattr(cls, p, None) is getattr(ReadableSpan, p) for p in _FIELD_PROPERTIES):
        return False
    return True


def _plain_attrs(attrs: Any) -> dict[str, Any]:
    """A plain dict of SDK attributes (sequences as lists, as OTLP/JSON reads them back)."""
    attrs = getattr(attrs, "_dict", attrs)  # BoundedAttributes keeps a plain dict (whose len() is C, not Python)
    if not attrs:
        return {}
    if type(attrs) is dict and tuple not in map(type, attrs.values()):  # array values are rare: looked for in C
        return attrs  # an ended span's attributes never change: shared, not copied
    out = dict(attrs)
    for k, v in out.items():
        if type(v) is tuple:
            out[k] = list(v)
    return out


def _enum_names() -> dict[int, str]:
    """The ids of SpanKind and StatusCode members -> their names: ``Enum.name`` is a slow descriptor and
    ``Enum.__hash__`` a Python function, and members are singletons, so their ids are their keys."""
    from opentelemetry.trace import SpanKind, StatusCode

    return {**{id(k): k.name for k in SpanKind}, **{id(c): c.name for c in StatusCode}}


_KINDS = _enum_names()


# -- OTLP/JSON --------------------------------------------------------------------------------
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


def _attrs_from_otlp(items: Any, bad: list[str] | None = None) -> dict[str, Any]:
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


def span_from_otlp(s: dict[str, Any], scope: str = "", resource: dict[str, Any] | None = None,
                   bad: list[str] | None = None) -> SpanData:
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
            events.append({"name": str(e.get("name", "")), "time_ns": _time(e.get("timeUnixNano"), "event time", bad),
                           "attributes": _attrs_from_otlp(e.get("attributes"), bad)})
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
        attributes=_attrs_from_otlp(s.get("attributes"), bad),
        events=events,
        scope=scope,
        resource=resource or {},
    )


class OtlpStats:
    """Counts what a read skipped, so a malformed span is visible rather than silently lost."""

    def __init__(self) -> None:
        self.spans = 0
        self.skipped = 0
        self.replay = 0  # spans of a harvester replay: never production traffic, left out (not rejected)
        self.reasons: dict[str, int] = {}

    def skip(self, reason: str) -> None:
        self.skipped += 1
        self.note(reason)

    def replayed(self) -> None:
        """A span of a harvester replay: not production traffic, so left out (and not a rejection)."""
        self.replay += 1
        self.note("replay span (a harvester replay's, never stored)")

    def note(self, reason: str) -> None:
        """Count something left out that was not a whole span (a bad value, a malformed wrapper)."""
        if reason not in self.reasons and len(self.reasons) >= 100:
            reason = "other"  # a file with a thousand different bad keys must not grow this without bound
        self.reasons[reason] = self.reasons.get(reason, 0) + 1


def spans_from_otlp(doc: Any, stats: OtlpStats | None = None, *, file: str | None = None) -> Iterator[SpanData]:
    """Spans of an OTLP/JSON ``ExportTraceServiceRequest`` document; malformed spans are skipped and counted."""
    if not isinstance(doc, dict) or "resourceSpans" not in doc:
        raise OtlpFormatError("not an OTLP/JSON traces document (no resourceSpans)", file=file, field="resourceSpans")
    stats = stats if stats is not None else OtlpStats()
    rspans = doc["resourceSpans"]
    if not isinstance(rspans, list):
        raise OtlpFormatError("must be a list", file=file, field="resourceSpans")
    bad: list[str] = []
    for rs in rspans:
        if not isinstance(rs, dict):
            stats.skip("resourceSpans entry not an object")
            continue
        res = rs.get("resource") or {}
        if not isinstance(res, dict):
            stats.note("resource not an object (read as empty)")
            res = {}
        resource = _attrs_from_otlp(res.get("attributes"), bad)
        for reason in bad:
            stats.note(f"resource {reason} left out")
        bad.clear()
        scope_spans = rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or ()
        if not isinstance(scope_spans, list):
            stats.note("scopeSpans not a list (its spans skipped)")
            continue
        for ss in scope_spans:
            if not isinstance(ss, dict):
                stats.skip("scopeSpans entry not an object")
                continue
            sc = ss.get("scope") or ss.get("instrumentationLibrary") or {}
            scope = str(sc.get("name") or "") if isinstance(sc, dict) else ""
            span_list = ss.get("spans") or ()
            if not isinstance(span_list, list):
                stats.note("spans not a list (skipped)")
                continue
            for s in span_list:
                try:
                    span = span_from_otlp(s, scope, resource, bad)
                except (KeyError, ValueError, TypeError, AttributeError) as exc:
                    stats.skip(f"malformed span: {_why(exc)}")
                    continue
                for reason in bad:
                    stats.note(f"{reason} left out")
                bad.clear()
                if replay_span(s.get("traceState"), span.name, span.attributes):
                    stats.replayed()
                    continue
                stats.spans += 1
                yield span


def spans_of_document(doc: Any, stats: OtlpStats, *, file: str | None, line: int | None) -> Iterator[SpanData]:
    """``spans_from_otlp`` of one document of a file, whose errors name its line in JSON lines."""
    try:
        yield from spans_from_otlp(doc, stats, file=file)
    except OtlpFormatError as exc:
        if line is None:
            raise
        raise OtlpFormatError(line_message(exc), file=file, field=f"line {line}") from None


def line_message(exc: OtlpFormatError) -> str:
    """An error inside one line of JSON lines, for a message that names the line: its field, then what."""
    return f"{exc.field}: {exc.message}" if exc.field else exc.message


def _why(exc: Exception) -> str:
    """A skip reason that names the field: ``KeyError('traceId')`` -> "no traceId"."""
    if isinstance(exc, KeyError) and exc.args:
        return f"no {exc.args[0]}"
    if isinstance(exc, AttributeError):
        return "not an object"
    return str(exc)[:80] or type(exc).__name__


def iter_otlp_documents(data: bytes, *, file: str | None = None) -> Iterator[Any]:
    """One JSON document, or JSON lines (see ``numbered_otlp_documents``)."""
    for _, doc in numbered_otlp_documents(data, file=file):
        yield doc


def numbered_otlp_documents(data: bytes, *, file: str | None = None) -> Iterator[tuple[int | None, Any]]:
    """One JSON document, or JSON lines (the Collector's file exporter writes one request per line).

    Yields ``(line number, document)``; the line number is None for a file that is one document.
    A first line that is a whole document means JSON lines: the file is never parsed as a whole
    first (orjson would validate all of it before failing on the second line).
    """
    text = data.strip()
    if text.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte order mark, as some editors write
        text = text[3:].lstrip()
    if not text:
        return
    if text[:2] == b"\x1f\x8b":
        raise OtlpFormatError("gzip-compressed; decompress it first (zcat FILE | harvester ingest -)", file=file)
    nl = text.find(b"\n")
    lines = False
    if nl >= 0:
        try:
            first = orjson.loads(text[:nl])
            lines = True
        except orjson.JSONDecodeError:
            pass
    if not lines:
        try:
            yield None, orjson.loads(text)
            return
        except orjson.JSONDecodeError:
            # Neither one document nor JSON lines with a good first line: say where it breaks (orjson
            # counts from the start of the text only; the stdlib parser gives line and column).
            try:
                text.decode("utf-8")
            except UnicodeDecodeError as exc:
                line = text.count(b"\n", 0, exc.start) + 1
                col = exc.start - (text.rfind(b"\n", 0, exc.start) + 1) + 1
                raise OtlpFormatError(f"not UTF-8 text (byte 0x{text[exc.start]:02x})", file=file,
                                      field=f"line {line} column {col}") from None
            try:
                json.loads(text.decode("utf-8", "replace"))
            except RecursionError:
                raise OtlpFormatError("invalid JSON (nested too deep)", file=file) from None
            except ValueError as exc:
                where = f"line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else None
                raise OtlpFormatError(f"invalid JSON ({getattr(exc, 'msg', exc)})", file=file, field=where) from None
    for lineno, line in enumerate(text.splitlines(), 1):
        if lines and lineno == 1:
            yield 1, first
            continue
        line = line.strip()
        if not line:
            continue
        try:
            doc = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise OtlpFormatError(f"invalid JSON ({exc})", file=file, field=f"line {lineno}") from None
        yield lineno, doc


# -- back to OTLP/JSON ------------------------------------------------------------------------
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
    return {"resourceSpans": [{"resource": {"attributes": _kvs(resources[rkey])}, "scopeSpans": scope_spans}
                              for rkey, scope_spans in by_resource.items()]}


def _span_json(s: SpanData) -> dict[str, Any]:
    out: dict[str, Any] = {
        "traceId": s.trace_id, "spanId": s.span_id, "name": s.name,
        "kind": "SPAN_KIND_" + s.kind, "startTimeUnixNano": str(s.start_ns), "endTimeUnixNano": str(s.end_ns),
        "attributes": _kvs(s.attributes),
        "status": {"code": "STATUS_CODE_" + s.status, **({"message": s.status_message} if s.status_message else {})},
    }
    if s.parent_id:
        out["parentSpanId"] = s.parent_id
    if s.events:
        out["events"] = [{"name": e["name"], "timeUnixNano": str(e.get("time_ns", 0)),
                          "attributes": _kvs(e.get("attributes") or {})} for e in s.events]
    return out
