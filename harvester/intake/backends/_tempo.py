"""Grafana Tempo: its trace-by-id API (``/api/traces/{id}``, OTLP JSON) and its TraceQL search.

Tempo stores OTLP as it came and answers in OTLP JSON, so little needs undoing; what differs from an
OTLP/JSON file is the envelope and the protobuf JSON mapping Tempo marshals with: ``/api/traces``
answers ``{"batches": [...]}`` (older releases) or ``{"resourceSpans": [...]}``, ``/api/v2/traces``
answers ``{"trace": {"resourceSpans": [...]}}``; ids are base64, kinds and status codes enum names,
``instrumentationLibrarySpans`` in the oldest. The OTLP/JSON reader tolerates all of those, so each
envelope is unwrapped and read by it, which also drops a replay's own spans.

Tempo has no credentials of its own. Behind an authenticating gateway (Grafana Cloud and most
deployments), ``HARVESTER_TEMPO_TOKEN`` is sent as a bearer token, and in a multi-tenant Tempo
``HARVESTER_TEMPO_TENANT`` as ``X-Scope-OrgID``.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote

from ...errors import NotFoundError
from ...spans import SpanData, spans_from_otlp
from ._backend import Backend
from ._client import Client, credential, one_line
from ._values import hex_trace_id, padded_hex

__all__ = ["BACKEND", "fetch", "find", "from_export", "headers", "otlp_document"]

BACKEND = Backend(
    name="tempo",
    label="Tempo",
    port=3200,
    credentials="HARVESTER_TEMPO_TOKEN (and HARVESTER_TEMPO_TENANT for a multi-tenant Tempo)",
    export="a Tempo answer (batches or trace.resourceSpans)",
)
_SEARCH_WINDOW_S = 7 * 86400  # without --since, the last week


def headers() -> dict[str, str]:
    out = {}
    if token := credential("HARVESTER_TEMPO_TOKEN"):
        out["Authorization"] = f"Bearer {token}"
    if tenant := credential("HARVESTER_TEMPO_TENANT"):
        out["X-Scope-OrgID"] = tenant
    return out


def fetch(client: Client, trace_id: str) -> list[SpanData]:
    tid = hex_trace_id(trace_id, BACKEND.label)
    answer = client.get_trace(f"/api/traces/{quote(tid, safe='')}", trace_id)
    doc = otlp_document(answer)
    spans = list(spans_from_otlp(doc, file=str(client.target))) if doc is not None else []
    if not spans:
        raise NotFoundError(f"{client.target} holds no trace {trace_id!r}")
    return spans


def find(client: Client, *, since_ns: int | None, failed: bool, limit: int) -> list[str]:
    """Trace ids newest first, by TraceQL (``{ status = error }`` for ``failed``)."""
    end = int(time.time()) + 1
    start = since_ns // 1_000_000_000 if since_ns is not None else end - _SEARCH_WINDOW_S
    params = {"q": "{ status = error }" if failed else "{ }", "start": start, "end": end, "limit": limit}
    traces = client.items(client.get_object("/api/search", params), "traces", dict)
    traces.sort(key=lambda t: -int(t.get("startTimeUnixNano") or 0))
    ids = []
    for t in traces:
        if t.get("traceID"):
            try:
                ids.append(padded_hex(t["traceID"], 32))
            except ValueError:
                raise client.wrong(f"traceID {one_line(repr(t['traceID']), 60)} is not a trace id") from None
    return ids[:limit]


def otlp_document(doc: Any) -> dict[str, Any] | None:
    """The OTLP/JSON document inside one of Tempo's envelopes, or ``None`` if ``doc`` is none of them."""
    if not isinstance(doc, dict):
        return None
    if "resourceSpans" in doc:  # the newest /api/traces: OTLP/JSON as it is
        return doc
    if isinstance(doc.get("trace"), dict) and "resourceSpans" in doc["trace"]:  # /api/v2/traces
        return doc["trace"]
    if isinstance(doc.get("batches"), list):
        return {"resourceSpans": doc["batches"]}
    return None


def from_export(doc: Any, file: str) -> list[SpanData] | None:
    """A saved Tempo answer (``batches`` or ``trace.resourceSpans``; plain ``resourceSpans`` is OTLP/JSON)."""
    otlp = otlp_document(doc)
    return None if otlp is None else list(spans_from_otlp(otlp, file=file))
