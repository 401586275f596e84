"""Jaeger: its query API (``/api/traces/{id}``, ``/api/traces?service=``) and its JSON downloads.

Jaeger keeps spans in its own model, and the OTLP-to-Jaeger translation changes them on the way in;
each change is undone here so the conventions read what the app emitted:

- attributes become typed *tags* (``{"key", "type", "value"}``; int64 may come back as a string, binary as
  base64): read back to their values. Array attributes become JSON strings: a JSON list of scalars is
  read back as the list, except under a payload key (a tool result, a message, an input or output
  value), whose string may be the text of a list and is kept as it was.
- the span kind, status, status message and instrumentation scope become tags (``span.kind``,
  ``otel.status_code``, ``otel.status_description``, ``otel.scope.name`` or ``otel.library.name``), and
  an ``error`` tag is added for a failed span: moved back to their fields, the added tags dropped.
- events become *logs* whose ``event`` field is the name; times are microseconds, not nanoseconds.
- the resource becomes the *process* (``serviceName`` plus tags); the trace state becomes a
  ``w3c.tracestate`` tag (read for harvester's replay marker: a replay's own spans are never imported).
- a trace id whose high 64 bits are zero is printed in 16 hex digits: padded back to 32.

Jaeger has no credentials of its own; behind a proxy, ``HARVESTER_JAEGER_TOKEN`` is sent as a bearer token.
"""

from __future__ import annotations

import base64
import time
from typing import Any
from urllib.parse import quote

import orjson

from ...errors import NotFoundError, OtlpFormatError
from ...seam import replay_span
from ...spans import SpanData
from ._backend import Backend
from ._client import Client, credential, one_line
from ._values import PAYLOADS, hex_trace_id, padded_hex

__all__ = ["BACKEND", "fetch", "find", "from_export", "headers", "spans_of_trace"]

BACKEND = Backend(
    name="jaeger",
    label="Jaeger",
    port=16686,
    credentials="HARVESTER_JAEGER_TOKEN",
    export="a Jaeger download (data[].spans with processes)",
)
_KINDS = {
    "client": "CLIENT",
    "server": "SERVER",
    "producer": "PRODUCER",
    "consumer": "CONSUMER",
    "internal": "INTERNAL",
}
_MOVED = ("span.kind", "otel.status_code", "otel.status_description", "otel.scope.name", "otel.scope.version",
          "otel.library.name", "otel.library.version", "w3c.tracestate", "internal.span.format")  # fmt: skip
_SEARCH_WINDOW_S = 7 * 86400  # without --since, the last week (Jaeger needs a window)


def headers() -> dict[str, str]:
    token = credential("HARVESTER_JAEGER_TOKEN")
    return {"Authorization": f"Bearer {token}"} if token else {}


def fetch(client: Client, trace_id: str) -> list[SpanData]:
    tid = hex_trace_id(trace_id, BACKEND.label)
    answer = client.get_trace(f"/api/traces/{quote(tid, safe='')}", trace_id)
    traces = (answer.get("data") or []) if isinstance(answer, dict) else []
    spans = [s for t in traces if isinstance(t, dict) for s in spans_of_trace(t, file=str(client.target))]
    if not spans:
        raise NotFoundError(f"{client.target} holds no trace {trace_id!r}")
    return spans


def find(client: Client, *, since_ns: int | None, failed: bool, limit: int) -> list[str]:
    """Trace ids newest first. Jaeger searches one service at a time: every service it knows is asked."""
    end_us = int(time.time() * 1e6)
    start_us = since_ns // 1000 if since_ns is not None else end_us - _SEARCH_WINDOW_S * 1_000_000
    services = client.items(client.get_object("/api/services"), "data", str)
    found: dict[str, int] = {}
    for service in services:
        params: dict[str, Any] = {"service": service, "start": start_us, "end": end_us, "limit": limit}
        if failed:
            params["tags"] = orjson.dumps({"error": "true"}).decode()
        for trace in client.items(client.get_object("/api/traces", params), "data", dict):
            spans = client.items(trace, "spans", dict)
            asked = trace.get("traceID") or (spans[0].get("traceID") if spans else "")
            try:
                tid = padded_hex(asked, 32)
            except ValueError:
                raise client.wrong(f"traceID {one_line(repr(asked), 60)} is not a trace id") from None
            started = min((int(s.get("startTime") or 0) for s in spans), default=0)
            found[tid] = max(found.get(tid, 0), started)
    return sorted(found, key=lambda t: -found[t])[:limit]


def from_export(doc: Any, file: str) -> list[SpanData] | None:
    """A Jaeger UI download (``{"data": [trace, ...]}``) or one trace object; ``None`` if neither."""
    if isinstance(doc, dict) and isinstance(doc.get("data"), list) and all(_is_trace(t) for t in doc["data"]):
        return [s for t in doc["data"] for s in spans_of_trace(t, file=file)]
    if _is_trace(doc):
        return spans_of_trace(doc, file=file)
    return None


def _is_trace(doc: Any) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("spans"), list) and "processes" in doc


def spans_of_trace(trace: dict[str, Any], *, file: str) -> list[SpanData]:
    processes = trace.get("processes") or {}
    out = []
    for i, s in enumerate(trace.get("spans") or ()):
        try:
            span, state = _span(s, processes)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise OtlpFormatError(f"not a Jaeger span ({exc})", file=file, field=f"spans[{i}]") from None
        if not replay_span(state, span.name, span.attributes):
            out.append(span)
    return out


def _span(s: dict[str, Any], processes: dict[str, Any]) -> tuple[SpanData, str]:
    attributes = _tags(s.get("tags"))
    trace_id = padded_hex(s["traceID"], 32)
    parent = next(
        (r["spanID"] for r in s.get("references") or () if r.get("refType") == "CHILD_OF" and r.get("spanID")),
        s.get("parentSpanID") or None,
    )
    kind = _KINDS.get(str(attributes.get("span.kind", "")).lower(), "INTERNAL")
    code = str(attributes.get("otel.status_code", "")).upper()
    status = code if code in ("OK", "ERROR") else "UNSET"
    message = str(attributes.get("otel.status_description", "")) if status == "ERROR" else ""
    scope = str(attributes.get("otel.scope.name") or attributes.get("otel.library.name") or "")
    state = str(attributes.get("w3c.tracestate", ""))
    for key in _MOVED:
        attributes.pop(key, None)
    if status == "ERROR" and attributes.get("error") is True:
        attributes.pop("error")
    process = processes.get(str(s.get("processID"))) or s.get("process") or {}
    resource = _tags(process.get("tags"))
    if process.get("serviceName"):
        resource.setdefault("service.name", process["serviceName"])
    start_ns = int(s.get("startTime") or 0) * 1000
    events = []
    for log in s.get("logs") or ():
        fields = _tags(log.get("fields"))
        events.append({"name": str(fields.pop("event", "")), "time_ns": int(log.get("timestamp") or 0) * 1000,
                       "attributes": fields})  # fmt: skip
    span = SpanData(
        trace_id=trace_id,
        span_id=padded_hex(s["spanID"], 16),
        parent_id=padded_hex(parent, 16) if parent else None,
        name=str(s.get("operationName") or ""),
        start_ns=start_ns,
        end_ns=start_ns + int(s.get("duration") or 0) * 1000,
        kind=kind,
        status=status,
        status_message=message,
        attributes=attributes,
        events=events,
        scope=scope,
        resource=resource,
    )
    return span, state


def _tags(tags: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for tag in tags or ():
        kind, value = str(tag.get("type", "string")).lower(), tag.get("value")
        if kind == "int64":
            value = int(value)
        elif kind == "float64":
            value = float(value)
        elif kind == "bool":
            value = value if isinstance(value, bool) else str(value).lower() == "true"
        elif kind == "binary":
            value = base64.b64decode(value).decode("utf-8", "replace") if isinstance(value, str) else value
        elif isinstance(value, str) and value[:1] == "[" and not str(tag["key"]).endswith(PAYLOADS):
            value = _scalar_list(value)
        out[str(tag["key"])] = value
    return out


def _scalar_list(text: str) -> Any:
    """An array attribute, written as a JSON string by the translator; anything else stays the string."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return text
    if isinstance(value, list) and all(isinstance(v, str | int | float | bool) for v in value):
        return value
    return text
