"""OTLP/HTTP on the wire: request bodies decoded (protobuf or JSON, inflated within bounds, chunked
or not), and the ``google.rpc.Status`` error body. Everything here treats its input as untrusted."""

from __future__ import annotations

import base64
import zlib
from typing import Any

import orjson
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from ..errors import BadRequest, ClientGone, OtlpFormatError
from ..seam import replay_span
from ..spans import KIND_NAMES, STATUS_NAMES, OtlpStats, SpanData, spans_from_otlp

__all__ = [
    "BadRequest",
    "ClientGone",
    "JSON",
    "PROTOBUF",
    "RPC_CODES",
    "decode_json",
    "decode_protobuf",
    "decompress",
    "read_chunked",
    "status_protobuf",
]

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
# google.rpc.Code values for the error body of each HTTP status we answer with.
RPC_CODES = {400: 3, 401: 16, 404: 5, 405: 12, 411: 3, 413: 8, 415: 3, 500: 13, 503: 14}


def _any_value(v: Any) -> Any:
    """An ``AnyValue`` as the plain value the SDK and the OTLP/JSON reader produce (bytes as base64)."""
    kind = v.WhichOneof("value")
    if kind == "string_value":
        return v.string_value
    if kind == "array_value":
        return [_any_value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: _any_value(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return base64.b64encode(v.bytes_value).decode()
    return None if kind is None else getattr(v, kind)


def _attrs(kvs: Any) -> dict[str, Any]:
    return {kv.key: _any_value(kv.value) for kv in kvs}


def decode_protobuf(body: bytes, stats: OtlpStats) -> list[SpanData]:
    """Spans of an ``ExportTraceServiceRequest``; spans with malformed ids are skipped and counted."""
    try:
        request = ExportTraceServiceRequest.FromString(body)
    except DecodeError as exc:
        raise BadRequest(400, f"invalid protobuf ExportTraceServiceRequest ({exc})") from None
    out: list[SpanData] = []
    append = out.append
    kinds, statuses = KIND_NAMES, STATUS_NAMES
    for rs in request.resource_spans:
        resource = _attrs(rs.resource.attributes)
        for ss in rs.scope_spans:
            scope = ss.scope.name
            for s in ss.spans:
                trace_id, span_id, parent = s.trace_id, s.span_id, s.parent_span_id
                if len(trace_id) != 16 or len(span_id) != 8 or len(parent) not in (0, 8):
                    stats.skip("malformed span: bad trace_id/span_id/parent_span_id length")
                    continue
                if replay_span(s.trace_state, s.name, s.attributes):
                    stats.replayed()
                    continue
                status = s.status
                append(
                    SpanData(
                        trace_id=trace_id.hex(),
                        span_id=span_id.hex(),
                        parent_id=parent.hex() if parent else None,
                        name=s.name,
                        start_ns=s.start_time_unix_nano,
                        end_ns=s.end_time_unix_nano,
                        kind=kinds.get(s.kind, "INTERNAL"),
                        status=statuses.get(status.code, "UNSET"),
                        status_message=status.message,
                        attributes=_attrs(s.attributes),
                        events=[
                            {"name": e.name, "time_ns": e.time_unix_nano, "attributes": _attrs(e.attributes)}
                            for e in s.events
                        ],
                        scope=scope,
                        resource=resource,
                    )
                )
    stats.spans += len(out)
    return out


def decode_json(body: bytes, stats: OtlpStats) -> list[SpanData]:
    """Spans of an OTLP/JSON request, read by the same code as ``harvester ingest``."""
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(400, f"invalid JSON ({exc})") from None
    if doc == {}:  # proto3 JSON omits empty fields: an empty request is valid
        return []
    try:
        return list(spans_from_otlp(doc, stats))
    except OtlpFormatError as exc:
        raise BadRequest(400, str(exc)) from None


def decompress(body: bytes, encoding: str, limit: int) -> bytes:
    """A gzip or deflate body inflated, never to more than ``limit`` bytes (gzip bombs)."""
    inflater = zlib.decompressobj(wbits=47)  # 32 + 15: gzip or zlib header, detected
    try:
        out = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise BadRequest(400, f"invalid {encoding} body ({exc})") from None
    if len(out) > limit:
        raise BadRequest(413, f"decompressed body larger than {limit} bytes")
    if not inflater.eof or inflater.unused_data:
        raise BadRequest(400, f"truncated or trailing data in {encoding} body")
    return out


def status_protobuf(code: int, message: str) -> bytes:
    """A ``google.rpc.Status`` {code, message} encoded by hand: two fields, no extra dependency."""
    msg = message.encode()
    return b"\x08" + _varint(code) + b"\x12" + _varint(len(msg)) + msg


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def read_chunked(rfile: Any, limit: int) -> bytes:
    """A ``Transfer-Encoding: chunked`` body, never more than ``limit`` bytes (413 past it)."""
    parts: list[bytes] = []
    total = 0
    while True:
        line = rfile.readline(1024)
        if not line:
            raise ClientGone()
        try:
            size = int(line.split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise BadRequest(400, "malformed chunked body (bad chunk size line)") from None
        if size == 0:
            while (trailer := rfile.readline(8192)) not in (b"\r\n", b"\n"):
                if not trailer:
                    raise ClientGone()
            return b"".join(parts)
        total += size
        if size < 0 or total > limit:
            raise BadRequest(413, f"chunked body exceeds the limit of {limit} bytes")
        data = rfile.read(size)
        if len(data) < size:
            raise ClientGone()
        parts.append(data)
        if rfile.readline(1024).strip():
            raise BadRequest(400, "malformed chunked body (chunk longer than its size)")
