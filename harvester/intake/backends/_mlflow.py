"""MLflow (3.x tracing): its trace APIs, and its saved traces, read back to the spans the app sent.

MLflow takes OTLP at ``/v1/traces`` (header ``x-mlflow-experiment-id``) and changes the spans on the
way in; each change is undone here so the conventions read what the app emitted:

- the trace is renamed ``tr-<32 hex>`` (the OTel id with a prefix), and the spans keep the OTel ids in
  base64: ``fetch`` takes either name, the spans get their 32-hex ids back.
- every attribute value is stored as JSON text (``"text"`` comes back as ``'"text"'``, 3 as ``'3'``),
  and a string that held JSON (``gen_ai.input.messages``, a tool's arguments) is stored as that JSON, so
  it reads back as an object or a list: decoded, and a value that is an object, or a list holding
  objects or lists, was a string and is kept as the text it was (byte for byte in the stored form). A
  list of scalars is a list attribute when MLflow spelled it (``json.dumps``) and its key is not a
  payload's; otherwise it was a string too.
- MLflow adds its own reading to every span (``mlflow.traceRequestId``, ``mlflow.spanType``,
  ``mlflow.spanInputs`` / ``mlflow.spanOutputs``: a second copy of the content, ``mlflow.chat.*``,
  ``mlflow.llm.*``, ``mlflow.message.format``) and ``service.name`` on a root span: dropped. (A trace
  written by MLflow's own SDK keeps its content only there: no convention harvester reads.)
- the status code is spelled ``STATUS_CODE_ERROR``: back to ``ERROR``.
- the resource survives only as the trace's tags (``telemetry.sdk.*`` dropped, other values as text):
  read back from the tags not named ``mlflow.*``, so tags a user set on the trace show there too.

``LOST`` says what cannot be undone. MLflow has no credentials of its own on a bare server; with
``--app-name basic-auth`` or behind a proxy, its clients' ``MLFLOW_TRACKING_TOKEN`` (bearer) or
``MLFLOW_TRACKING_USERNAME`` / ``MLFLOW_TRACKING_PASSWORD`` (basic) are sent.

Endpoints: ``GET /api/3.0/mlflow/traces/{id}`` (trace info: tags, not found), ``GET
/ajax-api/2.0/mlflow/get-trace-artifact`` (the stored spans, as MLflow's UI reads them: the one form
that keeps a JSON string's text), ``POST /api/3.0/mlflow/traces/search`` (``filter``, ``order_by``,
``max_results`` up to 500, ``page_token``), ``/api/2.0/mlflow/experiments/*`` for the experiment.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
from typing import Any
from urllib.parse import quote

import orjson

from ...errors import BackendError, InputError, NotFoundError, OtlpFormatError
from ...seam import replay_span
from ...spans import SpanData
from ._backend import Backend
from ._client import Client, credential
from ._values import PAYLOADS, is_hex, shown_id

__all__ = ["BACKEND", "LOST", "fetch", "find", "from_export", "headers", "spans_of_trace"]

BACKEND = Backend(
    name="mlflow",
    label="MLflow",
    port=5000,
    scope="experiment",
    credentials="MLFLOW_TRACKING_TOKEN (or MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD)",
    export="an MLflow trace (Trace.to_json(), a traces/get answer or its spans artifact)",
)
LOST = (
    "span kinds (read back as INTERNAL)",
    "instrumentation scopes",
    "trace state",
    "resource attributes beyond the trace's tags (telemetry.sdk.*, value types)",
)
_SCALARS = (str, bool, int, float)
_PAGE = 500  # the most search_traces answers at once
_STATUSES = {"OK": "OK", "ERROR": "ERROR"}
_MAX_ID = 256  # MLflow's ids are tr-<32 hex>, or an MLflow 2 request id (32 hex)


def headers() -> dict[str, str]:
    if token := credential("MLFLOW_TRACKING_TOKEN"):
        return {"Authorization": f"Bearer {token}"}
    user, password = os.environ.get("MLFLOW_TRACKING_USERNAME", ""), os.environ.get("MLFLOW_TRACKING_PASSWORD", "")
    if user or password:
        return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}
    return {}


def fetch(client: Client, trace_id: str) -> list[SpanData]:
    """One whole trace, by MLflow's ``tr-`` id or the OTel 32-hex id (or an MLflow 2 request id)."""
    text = trace_id.strip().lower()
    if not text or len(text) > _MAX_ID or not all(c.isprintable() and not c.isspace() for c in text):
        raise InputError(f"{shown_id(trace_id)} is not an MLflow trace id (tr-<32 hex>, or 32 hex digits)")
    names = [f"tr-{text}", text] if is_hex(text, 32) else [trace_id.strip()]
    for name in names:
        try:
            info = client.get_object(f"/api/3.0/mlflow/traces/{quote(name, safe='')}")
            data = client.get_object("/ajax-api/2.0/mlflow/get-trace-artifact", {"request_id": name})
        except BackendError as exc:
            if exc.status == 404:
                continue
            raise
        trace_info = (info.get("trace") or {}).get("trace_info") or {}
        stored = data.get("spans")
        spans = spans_of_trace(stored, trace_info.get("tags"), file=str(client.target))
        if spans:
            return spans
        if stored:
            raise NotFoundError(f"{client.target}: trace {trace_id!r} is one of harvester's replays, not production")
    raise NotFoundError(f"{client.target} holds no trace {trace_id!r}")


def find(client: Client, *, since_ns: int | None, failed: bool, limit: int) -> list[str]:
    """Trace ids newest first (the OTel id where MLflow derived its name from it), over the URL's
    experiment or, with none named, every active one; ``failed`` is MLflow's trace state ``ERROR``."""
    clauses = [f"trace.timestamp_ms >= {since_ns // 1_000_000}"] if since_ns is not None else []
    if failed:
        clauses.append("trace.status = 'ERROR'")
    locations = [{"type": "MLFLOW_EXPERIMENT", "mlflow_experiment": {"experiment_id": e}} for e in _experiments(client)]
    body: dict[str, Any] = {"locations": locations, "order_by": ["timestamp_ms DESC"]}
    if clauses:
        body["filter"] = " AND ".join(clauses)
    ids: list[str] = []
    pages = client.pages("next_page_token")
    while body["locations"] and len(ids) < limit:
        ask = {**body, "max_results": min(limit - len(ids), _PAGE)}
        page = client.post_object("/api/3.0/mlflow/traces/search", ask)
        for trace in client.items(page, "traces", dict):
            name = str(trace.get("trace_id") or "")
            ids.append(name[3:] if name.startswith("tr-") and is_hex(name[3:], 32) else name)
        if not page.get("next_page_token") or not page.get("traces"):
            break
        pages.turn(page["next_page_token"])
        body["page_token"] = page["next_page_token"]
    return list(dict.fromkeys(i for i in ids if i))[:limit]


def _experiments(client: Client) -> list[str]:
    """The URL's experiment (an id, else a name) as an id, or every active experiment's id."""
    scope = client.target.scope
    if scope is None:
        ids: list[str] = []
        body: dict[str, Any] = {"max_results": 1000, "view_type": "ACTIVE_ONLY"}
        pages = client.pages("next_page_token")
        while True:
            page = client.post_object("/api/2.0/mlflow/experiments/search", body)
            ids.extend(_experiment_id(client, e) for e in client.items(page, "experiments", dict))
            if not page.get("next_page_token"):
                return ids
            pages.turn(page["next_page_token"])
            body["page_token"] = page["next_page_token"]
    lookups = [("get", {"experiment_id": scope})] if scope.isdigit() else []
    for path, params in [*lookups, ("get-by-name", {"experiment_name": scope})]:
        try:
            answer = client.get_object(f"/api/2.0/mlflow/experiments/{path}", params)
        except BackendError as exc:
            if exc.status not in (400, 404):
                raise
            continue
        experiment = answer.get("experiment")
        return [_experiment_id(client, experiment if isinstance(experiment, dict) else {})]
    raise NotFoundError(f"{client.target}: MLflow has no experiment {scope!r}")


def _experiment_id(client: Client, experiment: dict[str, Any]) -> str:
    eid = experiment.get("experiment_id")
    if eid is None or eid == "":
        raise client.wrong("an experiment without an experiment_id")
    return str(eid)


def from_export(doc: Any, file: str) -> list[SpanData] | None:
    """An MLflow trace as a user saves it: ``Trace.to_json()`` (``info`` and ``data.spans``), the REST
    ``traces/get`` or ``batchGet`` answer, or a trace's ``traces.json`` artifact; a list of those.
    ``None`` if ``doc`` is none of them."""
    if isinstance(doc, list):
        parts = [from_export(d, file) for d in doc] if doc else [None]
        return None if any(p is None for p in parts) else [s for p in parts for s in p or ()]
    if not isinstance(doc, dict):
        return None
    if isinstance(doc.get("info"), dict) and isinstance(doc.get("data"), dict) and _is_mlflow_info(doc["info"]):
        return spans_of_trace(doc["data"].get("spans"), doc["info"].get("tags"), file=file)
    traces = [doc["trace"]] if isinstance(doc.get("trace"), dict) else doc.get("traces")
    if isinstance(traces, list) and traces and all(isinstance(t, dict) and "trace_info" in t for t in traces):
        return [s for t in traces for s in spans_of_trace(t.get("spans"), t["trace_info"].get("tags"), file=file)]
    spans = doc.get("spans")
    if set(doc) == {"spans"} and isinstance(spans, list) and spans and all(_is_mlflow_span(s) for s in spans):
        return spans_of_trace(spans, None, file=file)
    return None


def _is_mlflow_info(info: dict[str, Any]) -> bool:
    return any(k in info for k in ("trace_location", "request_id", "experiment_id")) and (
        "trace_id" in info or "request_id" in info
    )


def _is_mlflow_span(span: Any) -> bool:
    attributes = span.get("attributes") if isinstance(span, dict) else None
    return isinstance(attributes, dict) and "mlflow.traceRequestId" in attributes


def spans_of_trace(spans: Any, tags: Any, *, file: str) -> list[SpanData]:
    """One trace's spans in MLflow's stored form (attributes a map of JSON text) or its REST form
    (OTLP ``KeyValue``s, snake_case), with the trace's tags; none if it is one of harvester's replays."""
    tags = tags if isinstance(tags, dict) else {}
    resource = {str(k): v for k, v in tags.items() if not str(k).startswith("mlflow.")}
    out = []
    for i, s in enumerate(spans or ()):
        try:
            out.append(_span(s, resource))
        except (KeyError, TypeError, ValueError, AttributeError, binascii.Error) as exc:
            raise OtlpFormatError(f"not an MLflow span ({exc})", file=file, field=f"spans[{i}]") from None
    # MLflow keeps no trace state, so a replay is known by its root alone: the whole trace is dropped
    if any(replay_span(None, s.name, s.attributes) for s in out):
        return []
    return out


def _span(s: dict[str, Any], resource: dict[str, Any]) -> SpanData:
    raw = s.get("attributes") or {}
    if isinstance(raw, dict):  # stored: {key: JSON text}
        attributes = {str(k): _from_text(str(k), v) for k, v in raw.items()}
    else:  # REST: [{"key", "value": AnyValue}], the text already decoded
        attributes = _key_values(raw)
    parent = s.get("parent_span_id")
    if "service.name" in attributes and not parent and attributes["service.name"] == resource.get("service.name"):
        del attributes["service.name"]  # copied from the resource onto a root span
    status = s.get("status") or {}
    code = str(status.get("code") or "").removeprefix("STATUS_CODE_")
    events = []
    for e in s.get("events") or ():
        attrs = e.get("attributes") or {}
        attrs = attrs if isinstance(attrs, dict) else _key_values(attrs)
        events.append(
            {"name": str(e.get("name") or ""), "time_ns": int(e.get("time_unix_nano") or 0), "attributes": attrs}
        )
    return SpanData(
        trace_id=_hex_id(s["trace_id"], 16),
        span_id=_hex_id(s["span_id"], 8),
        parent_id=_hex_id(parent, 8) if parent else None,
        name=str(s.get("name") or ""),
        start_ns=int(s.get("start_time_unix_nano") or 0),
        end_ns=int(s.get("end_time_unix_nano") or 0),
        status=_STATUSES.get(code, "UNSET"),
        status_message=str(status.get("message") or ""),
        attributes={k: v for k, v in attributes.items() if v is not None and not k.startswith("mlflow.")},
        events=events,
        resource=dict(resource),
    )


def _key_values(items: Any) -> dict[str, Any]:
    return {str(kv["key"]): _from_value(str(kv["key"]), _any_value(kv.get("value"))) for kv in items}


def _from_text(key: str, text: Any) -> Any:
    """A stored attribute value (JSON text) as the SDK held it."""
    if not isinstance(text, str):  # a hand-edited file: already a value
        return _from_value(key, text)
    try:
        value = json.loads(text)
    except ValueError:  # not JSON: stored as it came
        return text
    if isinstance(value, list) and _scalars(value):
        return value if text == json.dumps(value, ensure_ascii=False) and not key.endswith(PAYLOADS) else text
    return text if isinstance(value, dict | list) else value


def _from_value(key: str, value: Any) -> Any:
    """A decoded attribute value as the SDK held it: an object, or a list not of scalars, was a string."""
    if isinstance(value, list) and _scalars(value) and not key.endswith(PAYLOADS):
        return value
    if isinstance(value, dict | list):
        return orjson.dumps(value).decode()
    return value


def _scalars(items: list[Any]) -> bool:
    return all(isinstance(v, _SCALARS) for v in items)


def _any_value(v: Any) -> Any:
    """An OTLP ``AnyValue`` in protobuf's JSON mapping with snake_case names, as MLflow answers."""
    if not isinstance(v, dict):
        return v
    for key, inner in v.items():
        if key in ("string_value", "bool_value", "bytes_value"):
            return inner
        if key == "int_value":
            return int(inner)
        if key == "double_value":
            return float(inner)
        if key == "array_value":
            return [_any_value(x) for x in (inner or {}).get("values", ())]
        if key == "kvlist_value":
            return {str(kv["key"]): _any_value(kv.get("value")) for kv in (inner or {}).get("values", ())}
    return None


def _hex_id(value: Any, size: int) -> str:
    """An id in base64 (MLflow's form), or already hex (``0x``-prefixed in MLflow 2's)."""
    text = str(value).strip()
    hexed = text[2:] if text[:2] in ("0x", "0X") else text
    if is_hex(hexed.lower(), 2 * size):
        return hexed.lower()
    raw = base64.b64decode(text, validate=True)
    if len(raw) != size:
        raise ValueError(f"bad id {value!r}")
    return raw.hex()
