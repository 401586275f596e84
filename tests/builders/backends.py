"""Backends as their documented APIs answer, made from real recorded spans, on 127.0.0.1.

``jaeger_trace`` does what the OpenTelemetry Collector's OTLP-to-Jaeger translator does to a trace
(typed tags, kind/status/scope as tags, an ``error`` tag, events as logs, arrays as JSON strings,
the resource as the process, 16-digit ids when the high half is zero); ``tempo_answer`` wraps
OTLP/JSON as Tempo marshals it (base64 ids, enum names, ``batches`` or ``trace``); ``phoenix_spans``
and ``mlflow_artifact`` are the main changes Phoenix and MLflow make (their own tests check the rest
against real servers). ``Backend`` is a loopback HTTP server answering a backend's API from those
forms (Jaeger's ``/api/traces/{id}``, ``/api/traces?service=``, ``/api/services``; Tempo's
``/api/search``...), and failing on demand (401, 429, 500, not JSON). ``FAKES`` has one entry per
registered backend: the conformance test runs each through the same contract. ``Listener`` is a bare
TCP listener that counts the connections it accepts (a service nothing may reach).
"""

from __future__ import annotations

import base64
import json
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
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


def phoenix_spans(spans: list[SpanData]) -> list[dict[str, Any]]:
    """Spans as Phoenix's REST API answers them: the OpenInference kind moved to ``span_kind``, times in
    ISO 8601 (microseconds), no OTel kind, scope or resource (the JSON attributes it re-spells are left
    to the test against a real Phoenix)."""
    out = []
    for s in spans:
        attributes = dict(s.attributes)
        out.append({
            "context": {"trace_id": s.trace_id, "span_id": s.span_id},
            "parent_id": s.parent_id,
            "name": s.name,
            "span_kind": attributes.pop("openinference.span.kind", "UNKNOWN"),
            "start_time": _iso(s.start_ns),
            "end_time": _iso(s.end_ns),
            "status_code": s.status,
            "status_message": s.status_message,
            "attributes": attributes,
            "events": [{"name": e["name"], "timestamp": _iso(e["time_ns"]), "attributes": e.get("attributes") or {}}
                       for e in s.events],
        })  # fmt: skip
    return out


def _iso(ns: int) -> str:
    return (datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=ns // 1000)).isoformat()


def mlflow_artifact(spans: list[SpanData]) -> dict[str, Any]:
    """A trace as MLflow stores it (its spans artifact): ids in base64, every attribute value JSON text
    (a string that held JSON stored as that JSON), MLflow's own attributes added, ``STATUS_CODE_*``."""
    request = json.dumps(f"tr-{spans[0].trace_id}")
    out = []
    for s in spans:
        attributes = {k: v if _holds_json(v) else json.dumps(v, ensure_ascii=False) for k, v in s.attributes.items()}
        out.append({
            "trace_id": _b64(s.trace_id),
            "span_id": _b64(s.span_id),
            "parent_span_id": _b64(s.parent_id) if s.parent_id else None,
            "name": s.name,
            "start_time_unix_nano": s.start_ns,
            "end_time_unix_nano": s.end_ns,
            "status": {"code": f"STATUS_CODE_{s.status}", "message": s.status_message},
            "attributes": {**attributes, "mlflow.traceRequestId": request, "mlflow.spanType": '"UNKNOWN"'},
            "events": [{"name": e["name"], "time_unix_nano": e["time_ns"], "attributes": e.get("attributes") or {}}
                       for e in s.events],
        })  # fmt: skip
    return {"spans": out}


def _holds_json(value: Any) -> bool:
    try:
        return isinstance(value, str) and isinstance(json.loads(value), dict | list)
    except ValueError:
        return False


def _b64(hex_id: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_id)).decode()


class Backend:
    """What the loopback server holds and how it misbehaves; ``requests`` records each path asked.
    ``kind`` picks the API it answers: ``FAKES[kind]``."""

    def __init__(self, kind: str, traces: dict[str, list[SpanData]], *, tempo_form: str = "batches") -> None:
        self.kind, self.traces, self.tempo_form = kind, traces, tempo_form
        self.fail: tuple[int, dict[str, str], bytes] | None = None  # status, headers, body for every request
        self.fail_times: int | None = None  # then only for this many requests
        self.requests: list[str] = []
        self.url = ""

    def answer(self, path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        """(status, JSON document, or None for a plain-text 404) for one request."""
        return FAKES[self.kind].answer(self, path, query)


def _jaeger_api(backend: Backend, path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
    traces = backend.traces
    if path == "/api/services":
        return 200, {"data": sorted({str(s[0].resource.get("service.name")) for s in traces.values()})}
    if path == "/api/traces":
        service = query["service"][0]
        limit = int(query.get("limit", ["20"])[0])
        found = [jaeger_trace(s) for s in traces.values() if s[0].resource.get("service.name") == service]
        if query.get("tags"):
            want = orjson.loads(query["tags"][0])
            found = [t for t in found if want == {"error": "true"} and any(
                tag["key"] == "error" for s in t["spans"] for tag in s["tags"])]  # fmt: skip
        start = int(query.get("start", ["0"])[0])
        found = [t for t in found if min(s["startTime"] for s in t["spans"]) >= start]
        return 200, {"data": found[:limit], "total": 0, "limit": 0, "offset": 0, "errors": None}
    if path.startswith("/api/traces/"):
        tid = path.rsplit("/", 1)[1].rjust(32, "0")
        if tid not in traces:
            return 404, {"data": None, "errors": [{"code": 404, "msg": "trace not found"}]}
        return 200, {"data": [jaeger_trace(traces[tid])], "errors": None}
    return 404, None


def _tempo_api(backend: Backend, path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
    if path == "/api/search":
        q = query["q"][0]
        start_ns = int(query["start"][0]) * 10**9
        found = []
        for tid, spans in backend.traces.items():
            first = min(s.start_ns for s in spans)
            if first < start_ns or ("error" in q and not any(s.status == "ERROR" for s in spans)):
                continue
            found.append({"traceID": tid.lstrip("0") or "0", "rootServiceName": "x", "startTimeUnixNano": str(first)})
        return 200, {"traces": found[: int(query["limit"][0])], "metrics": {}}
    if path.startswith("/api/traces/"):
        tid = path.rsplit("/", 1)[1]
        if tid not in backend.traces:
            return 404, None
        return 200, tempo_answer(backend.traces[tid], backend.tempo_form)
    return 404, None


def _phoenix_api(backend: Backend, path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
    """``/v1/projects/default/spans`` (by trace ids, status) and ``/traces`` (newest first, since, failed)."""
    if path == "/v1/projects/default/spans":
        ids, status = set(query.get("trace_id", ())), query.get("status_code", [None])[0]
        spans = [s for tid, spans in backend.traces.items() if not ids or tid in ids for s in spans
                 if status is None or s.status == status]  # fmt: skip
        return 200, {"data": phoenix_spans(spans), "next_cursor": None}
    if path == "/v1/projects/default/traces":
        since = datetime.fromisoformat(query["start_time"][0]) if "start_time" in query else None
        found = sorted(backend.traces.items(), key=lambda t: -min(s.start_ns for s in t[1]))
        if since is not None:
            found = [t for t in found if min(s.start_ns for s in t[1]) >= since.timestamp() * 1e9]
        if query.get("filter") == ["error_count > 0"]:
            found = [t for t in found if any(s.status == "ERROR" for s in t[1])]
        return 200, {"data": [{"trace_id": tid} for tid, _ in found][: int(query["limit"][0])], "next_cursor": None}
    return 404, {"detail": "Not Found"}


def _mlflow_api(backend: Backend, path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
    """A trace by its ``tr-`` name (info, then the spans artifact); a search of the default experiment,
    newest first (the request's body, with its filter, is not read: a search answers every trace)."""
    missing = {"error_code": "RESOURCE_DOES_NOT_EXIST", "message": "not found"}
    by_name = {f"tr-{tid}": spans for tid, spans in backend.traces.items()}
    if path.startswith("/api/3.0/mlflow/traces/") and path != "/api/3.0/mlflow/traces/search":
        name = path.rsplit("/", 1)[1]
        return (200, {"trace": {"trace_info": {"trace_id": name, "tags": {}}}}) if name in by_name else (404, missing)
    if path == "/ajax-api/2.0/mlflow/get-trace-artifact":
        name = query["request_id"][0]
        return (200, mlflow_artifact(by_name[name])) if name in by_name else (404, missing)
    if path == "/api/2.0/mlflow/experiments/search":
        return 200, {"experiments": [{"experiment_id": "0", "name": "Default"}]}
    if path == "/api/3.0/mlflow/traces/search":
        found = sorted(by_name.items(), key=lambda t: -min(s.start_ns for s in t[1]))
        return 200, {"traces": [{"trace_id": name} for name, _ in found]}
    return 404, missing


@dataclass(frozen=True)
class Fake:
    """A backend as the conformance test needs it: how its API answers from the traces a ``Backend``
    holds, and what one trace saved from it (``--file``) looks like. One entry per registered backend."""

    answer: Callable[[Backend, str, dict[str, list[str]]], tuple[int, Any]]
    export: Callable[[list[SpanData]], Any]


FAKES: dict[str, Fake] = {
    "phoenix": Fake(_phoenix_api, lambda spans: {"data": phoenix_spans(spans)}),
    "mlflow": Fake(_mlflow_api, mlflow_artifact),
    "jaeger": Fake(_jaeger_api, lambda spans: {"data": [jaeger_trace(spans)]}),
    "tempo": Fake(_tempo_api, tempo_answer),
}


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes = b""


@dataclass
class Loopback:
    """A loopback HTTP server a test writes the answers of (``handle(request, loopback)``); ``seen``
    records every request that reached it, with its headers."""

    handle: Callable[[BaseHTTPRequestHandler, Loopback], None]
    seen: list[Seen] = field(default_factory=list)
    port: int = 0

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def url(self, kind: str) -> str:
        return f"{kind}://127.0.0.1:{self.port}"


def reply(request: BaseHTTPRequestHandler, status: int, doc: Any = None, headers: dict[str, str] | None = None) -> None:
    """Answer ``doc`` (bytes as they are, anything else as JSON) with ``status`` and ``headers``."""
    body = doc if isinstance(doc, bytes) else orjson.dumps(doc)
    request.send_response(status)
    for k, v in {"Content-Type": "application/json", **(headers or {})}.items():
        request.send_header(k, v)
    request.send_header("Content-Length", str(len(body)))
    request.end_headers()
    request.wfile.write(body)


def routes(answers: dict[str, Any]) -> Callable[[BaseHTTPRequestHandler, Loopback], None]:
    """A ``Loopback`` handler answering each path (no query) with its JSON document, others 404."""

    def handle(request: BaseHTTPRequestHandler, _: Loopback) -> None:
        path = urlsplit(request.path).path
        reply(request, *((200, answers[path]) if path in answers else (404, {"error": "not found"})))

    return handle


@contextmanager
def loopback(
    handle: Callable[[BaseHTTPRequestHandler, Loopback], None], keep_alive: bool = False
) -> Iterator[Loopback]:
    """A server on 127.0.0.1 answering with ``handle``; ``keep_alive``: HTTP/1.1, a connection serving
    one request after another (a client's pool keeps it), else each closed after its answer."""
    server_of = Loopback(handle)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"

        def log_message(self, *args: Any) -> None:
            pass

        def answer(self) -> None:
            seen = Seen(self.command, self.path, dict(self.headers))
            server_of.seen.append(seen)  # before its body: a request cut short reached the server all the same
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                seen.body = self.rfile.read(length)
            try:
                server_of.handle(self, server_of)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up: what the test is about

        do_GET = do_POST = answer

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    # A short poll: ``shutdown()`` waits for the next one (the default half second, at every test's end).
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    server_of.port = server.server_address[1]
    try:
        yield server_of
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def serving(backend: Backend) -> Iterator[Backend]:
    def handle(request: BaseHTTPRequestHandler, _: Loopback) -> None:
        parts = urlsplit(request.path)
        backend.requests.append(request.path)
        backend.headers_seen = dict(request.headers)  # type: ignore[attr-defined]
        if backend.fail is not None and backend.fail_times != 0:
            if backend.fail_times is not None:
                backend.fail_times -= 1
            status, headers, body = backend.fail
            reply(request, status, body, headers)
            return
        status, doc = backend.answer(parts.path, parse_qs(parts.query))
        if doc is None:
            reply(request, status, b"404 page not found", {"Content-Type": "text/plain"})
        else:
            reply(request, status, doc)

    with loopback(handle) as server:
        backend.url = server.url(backend.kind)
        yield backend


class Listener:
    """A TCP listener on 127.0.0.1 that counts every connection it accepts (nothing may reach it)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()


@contextmanager
def payments_listener(monkeypatch: Any) -> Iterator[Listener]:
    """A ``Listener`` as the payments service the test apps post to (``LEAKY_URL``)."""
    listener = Listener()
    monkeypatch.setenv("LEAKY_URL", f"http://127.0.0.1:{listener.port}/refund")
    try:
        yield listener
    finally:
        listener.sock.close()
