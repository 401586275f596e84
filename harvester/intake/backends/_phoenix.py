"""Arize Phoenix: its REST API (``/v1/projects/{project}/spans`` and ``/traces``) and its spans exports.

Phoenix does not store OTLP spans; it decodes each one into its own model on the way in (its
``decode_otlp_span``) and answers from that. Each change is undone here so the conventions read what
the app emitted:

- on a span with any ``gen_ai.*`` attribute, Phoenix *adds* OpenInference attributes it derives from
  them (``openinference.span.kind``, ``llm.input_messages.*``, ``llm.model_name``, ``tool.name``,
  ``output.value``, ``session.id``, ...; only where the span had none). A pydantic-ai span would then
  read as OpenInference (the kind wins in ``classify``) with Phoenix's idea of its messages: every
  key Phoenix may derive is dropped from such a span. The ``gen_ai.*`` attributes it kept are the
  app's own, so nothing the conventions read is lost (a span that carried both conventions, e.g.
  through OpenInference's pydantic-ai processor, loses its OpenInference copies).
- the OpenInference span kind is moved out of the attributes to ``span_kind`` (``UNKNOWN`` when there
  was none): moved back, unless it is ``UNKNOWN`` or derived (above).
- attributes ending in ``metadata``, ``tool.parameters`` or ``llm.prompt_template.variables`` are
  JSON strings Phoenix parses and stores as objects, which the API answers as dotted keys
  (``tool.parameters.order_id``): packed back into one JSON string (Phoenix's own spelling of it:
  compact separators are not kept, the key order is).
- attributes are unflattened into nested objects and flattened back: the dotted keys come back as
  they were (key order aside). A ``None``, a JSON ``null`` under those keys, and an empty ``{}`` are
  dropped by Phoenix and cannot come back.
- an ``exception`` event keeps only ``exception.type/message/escaped/stacktrace`` (what the SDK
  records); times are microseconds (ISO 8601), not nanoseconds.
- the OTel span kind, the instrumentation scope and the resource are not stored at all (the resource
  only names the project): the kind comes back ``INTERNAL``, the scope empty, and the resource as
  ``{"openinference.project.name": project}``. A span told apart by its scope alone (OpenLLMetry's
  without ``traceloop.*`` attributes, harvester's own) reads as plain GenAI semconv.
- the trace state is not stored, so a replay's spans are known only by their case attribute.

Credentials are Phoenix's own: ``PHOENIX_API_KEY`` (a bearer token) and ``PHOENIX_CLIENT_HEADERS``
(``name=value,name=value``, URL-encoded), read as its client reads them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import quote, unquote

from ...errors import BackendError, NotFoundError, OtlpFormatError
from ...seam import replay_span
from ...spans import SpanData
from ._backend import Backend
from ._client import Client, check_header, credential
from ._values import hex_trace_id, is_hex, padded_hex

__all__ = ["BACKEND", "fetch", "find", "from_export", "headers", "span_from_phoenix", "undo_attributes"]

BACKEND = Backend(
    name="phoenix",
    label="Phoenix",
    port=6006,
    scope="project",
    credentials="PHOENIX_API_KEY (or PHOENIX_CLIENT_HEADERS)",
    export="a Phoenix spans export (data[] of spans with context.trace_id)",
)
DEFAULT_PROJECT = "default"
PAGE = 1000  # the most Phoenix answers per page
_CHECK = 100  # trace ids per request when checking a page of failed traces
OI_KIND = "openinference.span.kind"
# What Phoenix derives from gen_ai.* (phoenix/trace/gen_ai/conversion.py): exact keys, then key prefixes.
_DERIVED = frozenset({
    OI_KIND, "llm.provider", "llm.system", "session.id", "llm.model_name", "embedding.model_name",
    "llm.invocation_parameters", "embedding.invocation_parameters", "llm.finish_reason", "output.value",
    "output.mime_type", "input.value", "input.mime_type", "tool.name", "tool.description", "tool.id",
    "tool.parameters",
})  # fmt: skip
_DERIVED_PREFIXES = ("llm.token_count.", "llm.input_messages.", "llm.output_messages.", "llm.tools.",
                     "retrieval.documents.", "tool.parameters.")  # fmt: skip
# Phoenix parses an attribute whose key ends with one of these as JSON (phoenix/trace/attributes.py).
_JSON_STRING_KEYS = ("document.metadata", "llm.prompt_template.variables", "metadata", "tool.parameters")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def headers() -> dict[str, str]:
    out: dict[str, str] = {}
    for item in os.environ.get("PHOENIX_CLIENT_HEADERS", "").split(","):
        name, eq, value = item.partition("=")
        if eq and name.strip():
            name, value = unquote(name.strip()), unquote(value.strip())
            check_header(name, "PHOENIX_CLIENT_HEADERS", name=True)
            check_header(value, "PHOENIX_CLIENT_HEADERS")
            out[name] = value
    if key := credential("PHOENIX_API_KEY"):
        out = {k: v for k, v in out.items() if k.lower() != "authorization"}
        out["Authorization"] = f"Bearer {key}"
    return out


def fetch(client: Client, trace_id: str) -> list[SpanData]:
    """Every span of one trace (``GET .../spans?trace_id=``, paged by ``next_cursor``)."""
    tid = hex_trace_id(trace_id, BACKEND.label)
    project = _project(client)
    spans: list[SpanData] = []
    for page in _pages(client, f"{_base(client)}/spans", {"trace_id": tid, "limit": PAGE}, f"trace {tid}"):
        spans.extend(_spans(page, file=str(client.target), project=project))
    if not spans:
        raise NotFoundError(f"{client.target} holds no trace {trace_id!r}")
    spans.sort(key=lambda s: (s.start_ns, s.span_id))
    return spans


def find(client: Client, *, since_ns: int | None, failed: bool, limit: int) -> list[str]:
    """Trace ids newest first (``GET .../traces``, sorted by start time on the server).

    ``failed`` asks the server for ``error_count > 0``; each page is checked against its ERROR spans
    too (one request), so a Phoenix that ignores the filter still answers only failed traces.
    """
    params: dict[str, Any] = {"sort": "start_time", "order": "desc", "limit": min(limit, PAGE)}
    if since_ns is not None:
        params["start_time"] = _iso(since_ns)
    if failed:
        params["filter"] = "error_count > 0"
    out: list[str] = []
    for page in _pages(client, f"{_base(client)}/traces", params):
        ids = [t for t in (_trace_id(client, trace) for trace in page) if t not in out]
        if failed and ids:
            bad: set[str] = set()
            for i in range(0, len(ids), _CHECK):  # a URL of a few KiB: uvicorn refuses long request lines
                ask = {"trace_id": ids[i : i + _CHECK], "status_code": "ERROR", "limit": PAGE}
                bad.update(str((s.get("context") or {}).get("trace_id", "")).lower()
                           for spans in _pages(client, f"{_base(client)}/spans", ask) for s in spans)  # fmt: skip
            ids = [t for t in ids if t in bad]
        out.extend(t for t in ids if t)
        if len(out) >= limit:
            break
    return out[:limit]


def _trace_id(client: Client, trace: dict[str, Any]) -> str:
    tid = str(trace.get("trace_id") or "").lower()
    if tid and not is_hex(tid.rjust(32, "0"), 32):
        raise client.wrong(f"trace_id {tid[:40]!r} is not a trace id")
    return tid


def from_export(doc: Any, file: str) -> list[SpanData] | None:
    """A saved Phoenix spans answer: ``{"data": [span, ...]}`` as the REST API gives it, a list of spans
    (the Python client's ``spans.get_spans``), or one span (a line of JSON lines); ``None`` if not."""
    if isinstance(doc, dict) and isinstance(doc.get("data"), list) and doc["data"] and all(map(_is_span, doc["data"])):
        return _spans(doc["data"], file=file)
    if isinstance(doc, list) and doc and all(map(_is_span, doc)):
        return _spans(doc, file=file)
    if _is_span(doc):
        return _spans([doc], file=file)
    return None


def _is_span(obj: Any) -> bool:
    ctx = obj.get("context") if isinstance(obj, dict) else None
    return isinstance(ctx, dict) and "trace_id" in ctx and "span_id" in ctx and "start_time" in obj


def _spans(objs: list[Any], *, file: str, project: str | None = None) -> list[SpanData]:
    out = []
    for i, obj in enumerate(objs):
        try:
            span = span_from_phoenix(obj, project=project)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise OtlpFormatError(f"not a Phoenix span ({exc})", file=file, field=f"data[{i}]") from None
        if not replay_span(None, span.name, span.attributes):
            out.append(span)
    return out


def span_from_phoenix(obj: dict[str, Any], *, project: str | None = None) -> SpanData:
    """One span of Phoenix's answer as the app emitted it (as far as Phoenix kept it)."""
    ctx = obj["context"]
    status = str(obj.get("status_code") or "UNSET").upper()
    events = []
    for e in obj.get("events") or ():
        attrs = e.get("attributes") or {}
        events.append({"name": str(e.get("name") or ""), "time_ns": _ns(e.get("timestamp")),
                       "attributes": dict(attrs) if isinstance(attrs, dict) else {}})  # fmt: skip
    return SpanData(
        trace_id=padded_hex(ctx["trace_id"], 32),
        span_id=padded_hex(ctx["span_id"], 16),
        parent_id=padded_hex(obj["parent_id"], 16) if obj.get("parent_id") else None,
        name=str(obj.get("name") or ""),
        start_ns=_ns(obj.get("start_time")),
        end_ns=_ns(obj.get("end_time")),
        status=status if status in ("OK", "ERROR") else "UNSET",
        status_message=str(obj.get("status_message") or ""),
        attributes=undo_attributes(obj.get("attributes") or {}, obj.get("span_kind")),
        events=events,
        resource={"openinference.project.name": project} if project else {},
    )


def undo_attributes(attributes: dict[str, Any], span_kind: Any = None) -> dict[str, Any]:
    """The attributes the app set, from Phoenix's flattened ones and its ``span_kind`` (see the module)."""
    attrs = dict(attributes)
    if any(k.startswith("gen_ai.") for k in attrs):
        attrs = {k: v for k, v in attrs.items() if k not in _DERIVED and not k.startswith(_DERIVED_PREFIXES)}
    elif isinstance(span_kind, str) and span_kind and span_kind != "UNKNOWN":
        attrs[OI_KIND] = span_kind
    packed: dict[str, dict[str, Any]] = {}
    out: dict[str, Any] = {}
    for key, value in attrs.items():
        head = _json_head(key)
        if head is None:
            out[key] = value
        elif head == key:
            out[key] = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        else:
            packed.setdefault(head, {})[key[len(head) + 1 :]] = value
    for head, flat in packed.items():
        out[head] = json.dumps(_nested(flat), ensure_ascii=False)
    return out


def _json_head(key: str) -> str | None:
    """The shortest dotted prefix of ``key`` that Phoenix parsed as a JSON string, if any."""
    end = -1
    while True:
        end = key.find(".", end + 1)
        head = key if end < 0 else key[:end]
        if head.endswith(_JSON_STRING_KEYS):
            return head
        if end < 0:
            return None


def _nested(flat: dict[str, Any]) -> Any:
    """``{"a.0.b": 1}`` back to ``{"a": [{"b": 1}]}``: Phoenix numbers only lists of objects."""
    root: dict[str, Any] = {}
    for key, value in flat.items():
        node = root
        *parents, last = key.split(".")
        for part in parents:
            node = node.setdefault(part, {}) if isinstance(node.get(part, {}), dict) else {}
        node[last] = value
    return _lists(root)


def _lists(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    items = {k: _lists(v) for k, v in node.items()}
    if items and all(k.isdigit() for k in items) and all(isinstance(v, dict) for v in items.values()):
        keys = sorted(items, key=int)
        if [int(k) for k in keys] == list(range(len(keys))):
            return [items[k] for k in keys]
    return items


def _pages(client: Client, path: str, params: dict[str, Any], what: str = "") -> Iterator[list[dict[str, Any]]]:
    """Each page of a paged answer (``data``, then ``next_cursor`` until there is none, a cursor
    repeats or the page cap is reached); ``what``: the trace it pages, if one."""
    params = dict(params)
    pages = client.pages("next_cursor", what)
    while True:
        try:
            answer = client.get(path, params)
        except BackendError as exc:
            if exc.status == 404:
                raise NotFoundError(f"{client.target}: Phoenix has no project {_project(client)!r}") from None
            raise
        if not isinstance(answer, dict) or not isinstance(answer.get("data"), list):
            raise BackendError(f"{client.target}: GET {path} answered no data list; is this Phoenix?")
        yield [item for item in answer["data"] if isinstance(item, dict)]
        cursor = answer.get("next_cursor")
        if not cursor:
            return
        pages.turn(cursor)
        params["cursor"] = cursor


def _project(client: Client) -> str:
    return client.target.scope or DEFAULT_PROJECT


def _base(client: Client) -> str:
    return f"/v1/projects/{quote(_project(client), safe='')}"


def _ns(value: Any) -> int:
    if not value:
        return 0
    dt = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return (dt - _EPOCH) // timedelta(microseconds=1) * 1000


def _iso(ns: int) -> str:
    return (_EPOCH + timedelta(microseconds=ns // 1000)).isoformat()
