"""Jaeger and Tempo as their documented APIs answer, made from real recorded spans, on 127.0.0.1.

``jaeger_trace`` does what the OpenTelemetry Collector's OTLP-to-Jaeger translator does to a trace
(typed tags, kind/status/scope as tags, an ``error`` tag, events as logs, arrays as JSON strings,
the resource as the process, 16-digit ids when the high half is zero); ``tempo_answer`` wraps
OTLP/JSON as Tempo marshals it (base64 ids, enum names, ``batches`` or ``trace``). ``Backend`` is a
loopback HTTP server answering ``/api/traces/{id}``, ``/api/traces?service=``, ``/api/services``
and ``/api/search`` from those forms, and failing on demand (401, 429, 500, not JSON).
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson

from harvester.spans import SpanData, to_otlp

_KIND_NAMES = {1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}
_KIND_TAG = {
    "CLIENT": "client",
    "SERVER": "server",
    "PRODUCER": "producer",
    "CONSUMER": "consumer",
    "INTERNAL": "internal",
}


def _tag(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"key": key, "type": "bool", "value": value}
    if isinstance(value, int):
        return {"key": key, "type": "int64", "value": value}
    if isinstance(value, float):
        return {"key": key, "type": "float64", "value": value}
    if isinstance(value, list | tuple | dict):
        return {"key": key, "type": "string", "value": orjson.dumps(value).decode()}
    return {"key": key, "type": "string", "value": str(value)}


def _jaeger_id(hex32: str) -> str:
    return hex32[16:] if hex32[:16] == "0" * 16 else hex32


def jaeger_trace(spans: list[SpanData]) -> dict[str, Any]:
    processes: dict[str, dict[str, Any]] = {}
    keys: dict[bytes, str] = {}
    out = []
    for sp in spans:
        rkey = orjson.dumps(sp.resource, option=orjson.OPT_SORT_KEYS)
        if rkey not in keys:
            keys[rkey] = f"p{len(keys) + 1}"
            rest = {k: v for k, v in sp.resource.items() if k != "service.name"}
            processes[keys[rkey]] = {
                "serviceName": str(sp.resource.get("service.name", "unknown_service")),
                "tags": [_tag(k, v) for k, v in rest.items()],
            }
        tags = [_tag(k, v) for k, v in sp.attributes.items()]
        if sp.scope:
            tags.append(_tag("otel.scope.name", sp.scope))
        tags.append(_tag("span.kind", _KIND_TAG.get(sp.kind, "internal")))
        if sp.status != "UNSET":
            tags.append(_tag("otel.status_code", sp.status))
        if sp.status == "ERROR":
            tags.append(_tag("error", True))
            if sp.status_message:
                tags.append(_tag("otel.status_description", sp.status_message))
        out.append({
            "traceID": _jaeger_id(sp.trace_id),
            "spanID": sp.span_id,
            "operationName": sp.name,
            "references": [{"refType": "CHILD_OF", "traceID": _jaeger_id(sp.trace_id), "spanID": sp.parent_id}]
            if sp.parent_id
            else [],
            "flags": 1,
            "startTime": sp.start_ns // 1000,
            "duration": (sp.end_ns - sp.start_ns) // 1000,
            "tags": tags,
            "logs": [
                {"timestamp": e["time_ns"] // 1000,
                 "fields": [_tag("event", e["name"]), *(_tag(k, v) for k, v in (e.get("attributes") or {}).items())]}
                for e in sp.events
            ],  # fmt: skip
            "processID": keys[rkey],
            "warnings": None,
        })  # fmt: skip
    return {"traceID": _jaeger_id(spans[0].trace_id), "spans": out, "processes": processes, "warnings": None}


def tempo_answer(spans: list[SpanData], form: str = "batches") -> dict[str, Any]:
    """Tempo's answer for one trace: ``batches`` (``/api/traces``), ``v2`` (``/api/v2/traces``) or ``plain``."""
    doc = to_otlp(spans)
    for rs in doc["resourceSpans"]:
        for ss in rs.get("scopeSpans", ()):
            for s in ss["spans"]:
                s["traceId"] = base64.b64encode(bytes.fromhex(s["traceId"])).decode()
                s["spanId"] = base64.b64encode(bytes.fromhex(s["spanId"])).decode()
                if s.get("parentSpanId"):
                    s["parentSpanId"] = base64.b64encode(bytes.fromhex(s["parentSpanId"])).decode()
                if isinstance(s.get("kind"), int):
                    s["kind"] = "SPAN_KIND_" + _KIND_NAMES.get(s["kind"], "INTERNAL")
                status = s.get("status") or {}
                if isinstance(status.get("code"), int):
                    status["code"] = "STATUS_CODE_" + {0: "UNSET", 1: "OK", 2: "ERROR"}[status["code"]]
    if form == "v2":
        return {"trace": doc, "status": "COMPLETE"}
    if form == "plain":
        return doc
    return {"batches": doc["resourceSpans"]}


class Backend:
    """What the loopback server holds and how it misbehaves; ``requests`` records each path asked."""

    def __init__(self, kind: str, traces: dict[str, list[SpanData]], *, tempo_form: str = "batches") -> None:
        self.kind, self.traces, self.tempo_form = kind, traces, tempo_form
        self.fail: tuple[int, dict[str, str], bytes] | None = None  # status, headers, body for every request
        self.fail_times: int | None = None  # then only for this many requests
        self.requests: list[str] = []
        self.url = ""

    def answer(self, path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        if self.kind == "jaeger":
            if path == "/api/services":
                return 200, {"data": sorted({str(s[0].resource.get("service.name")) for s in self.traces.values()})}
            if path == "/api/traces":
                service = query["service"][0]
                limit = int(query.get("limit", ["20"])[0])
                found = [jaeger_trace(s) for s in self.traces.values() if s[0].resource.get("service.name") == service]
                if query.get("tags"):
                    want = orjson.loads(query["tags"][0])
                    found = [t for t in found if want == {"error": "true"} and any(
                        tag["key"] == "error" for s in t["spans"] for tag in s["tags"])]  # fmt: skip
                start = int(query.get("start", ["0"])[0])
                found = [t for t in found if min(s["startTime"] for s in t["spans"]) >= start]
                return 200, {"data": found[:limit], "total": 0, "limit": 0, "offset": 0, "errors": None}
            if path.startswith("/api/traces/"):
                tid = path.rsplit("/", 1)[1].rjust(32, "0")
                if tid not in self.traces:
                    return 404, {"data": None, "errors": [{"code": 404, "msg": "trace not found"}]}
                return 200, {"data": [jaeger_trace(self.traces[tid])], "errors": None}
        if self.kind == "tempo":
            if path == "/api/search":
                q = query["q"][0]
                start_ns = int(query["start"][0]) * 10**9
                found = []
                for tid, spans in self.traces.items():
                    first = min(s.start_ns for s in spans)
                    if first < start_ns or ("error" in q and not any(s.status == "ERROR" for s in spans)):
                        continue
                    found.append(
                        {"traceID": tid.lstrip("0") or "0", "rootServiceName": "x", "startTimeUnixNano": str(first)}
                    )
                return 200, {"traces": found[: int(query["limit"][0])], "metrics": {}}
            if path.startswith("/api/traces/"):
                tid = path.rsplit("/", 1)[1]
                if tid not in self.traces:
                    return 404, None
                return 200, tempo_answer(self.traces[tid], self.tempo_form)
        return 404, None


@contextmanager
def serving(backend: Backend) -> Iterator[Backend]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            backend.requests.append(self.path)
            backend.headers_seen = dict(self.headers)  # type: ignore[attr-defined]
            if backend.fail is not None and backend.fail_times != 0:
                if backend.fail_times is not None:
                    backend.fail_times -= 1
                status, headers, body = backend.fail
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            status, doc = backend.answer(parts.path, parse_qs(parts.query))
            body = orjson.dumps(doc) if doc is not None else b"404 page not found"
            self.send_response(status)
            self.send_header("Content-Type", "application/json" if doc is not None else "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    backend.url = f"{backend.kind}://127.0.0.1:{server.server_address[1]}"
    try:
        yield backend
    finally:
        server.shutdown()
        server.server_close()
