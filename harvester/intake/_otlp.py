"""OTLP/HTTP on the wire: request bodies read and inflated within bounds (chunked or not), decoded
(protobuf or JSON), the success body and the ``google.rpc.Status`` error body. Everything here treats its input as
untrusted.

Bodies are read and inflated a piece at a time, and every piece is paid for with ``charge(n)``
before it is held (the receiver's budget of bytes in flight, which refuses with a 503). So a client
that declares a large body and sends it slowly holds only what it has sent, and a small gzip body is
charged what it inflates to, not its size on the wire."""

from __future__ import annotations

import base64
import zlib
from collections.abc import Callable
from typing import Any

import orjson
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from ..errors import BadRequest, ClientGone, OtlpFormatError
from ..seam import ROOT_PREFIX, replay_span
from ..spans import KIND_NAMES, STATUS_NAMES, OtlpStats, SpanData, spans_from_otlp

__all__ = [
    "BadRequest",
    "ClientGone",
    "JSON",
    "PROTOBUF",
    "RPC_CODES",
    "body_length",
    "decode_json",
    "decode_protobuf",
    "decompress",
    "export_response",
    "read_body",
    "read_chunked",
    "status_protobuf",
]

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
# google.rpc.Code values for the error body of each HTTP status we answer with.
RPC_CODES = {400: 3, 401: 16, 404: 5, 405: 12, 408: 4, 411: 3, 413: 8, 415: 3, 500: 13, 503: 14}
READ_PIECE = 1 << 16  # bytes of body read (and charged) at a time
INFLATE_PIECE = 1 << 20  # bytes of inflated body produced (and charged) at a time

Charge = Callable[[int], None]


def _any_value(v: Any, kind: Any = None) -> Any:
    """An ``AnyValue`` as the plain value the SDK and the OTLP/JSON reader produce (bytes as base64)."""
    if kind is None:
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
    """Most values are non-empty strings: read first, so they cost no ``WhichOneof`` (the receiver's hot
    loop; an unset ``string_value`` reads as "", so only an empty string or another kind asks)."""
    out = {}
    for kv in kvs:
        v = kv.value
        text = v.string_value
        if text:
            out[kv.key] = text
        else:
            kind = v.WhichOneof("value")
            out[kv.key] = text if kind == "string_value" else _any_value(v, kind)
    return out


def _event(e: Any) -> dict[str, Any]:
    return {"name": e.name, "time_ns": e.time_unix_nano, "attributes": _attrs(e.attributes)}


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
                name, trace_state = s.name, s.trace_state
                if (trace_state or name.startswith(ROOT_PREFIX)) and replay_span(trace_state, name, s.attributes):
                    stats.replayed()
                    continue
                status = s.status
                events = s.events
                append(
                    SpanData(  # positional, in the field order: a dozen keywords cost a span ~0.3 us
                        trace_id.hex(),
                        span_id.hex(),
                        parent.hex() if parent else None,
                        name,
                        s.start_time_unix_nano,
                        s.end_time_unix_nano,
                        kinds.get(s.kind, "INTERNAL"),
                        statuses.get(status.code, "UNSET"),
                        status.message,
                        _attrs(s.attributes),
                        [_event(e) for e in events] if events else [],
                        scope,
                        resource,
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


def decompress(parts: list[bytes], encoding: str, limit: int, charge: Charge) -> bytes:
    """A gzip or deflate body (as read, in parts) inflated, never to more than ``limit`` bytes (gzip
    bombs). Each piece of output is charged before it is made; each part's raw bytes are let go
    (and given back) once inflated."""
    inflater = zlib.decompressobj(wbits=47)  # 32 + 15: gzip or zlib header, detected
    out: list[bytes] = []
    total = 0
    try:
        for i, data in enumerate(parts):
            while True:
                if inflater.eof:
                    if data:
                        raise BadRequest(400, f"trailing data in {encoding} body")
                    break
                charge(INFLATE_PIECE)
                piece = inflater.decompress(data, INFLATE_PIECE)
                charge(len(piece) - INFLATE_PIECE)
                total += len(piece)
                if total > limit:
                    raise BadRequest(413, f"decompressed body larger than {limit} bytes")
                out.append(piece)
                data = inflater.unconsumed_tail
                if not data and len(piece) < INFLATE_PIECE:  # a full piece: more output may be pending
                    break
            charge(-len(parts[i]))  # inflated: its raw bytes can go
            parts[i] = b""
    except zlib.error as exc:
        raise BadRequest(400, f"invalid {encoding} body ({exc})") from None
    if not inflater.eof or inflater.unused_data:
        raise BadRequest(400, f"truncated or trailing data in {encoding} body")
    return b"".join(out)


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


def body_length(headers: Any) -> int | None:
    """The body's length as its headers frame it, or None for ``Transfer-Encoding: chunked``.

    A proxy in front and this server must read the same request from the same bytes, or a request
    can be smuggled past the proxy inside another's body: so framing that two parsers may read two
    ways is refused (400), not guessed at. Content-Length values that differ (repeated or listed);
    any Transfer-Encoding but exactly ``chunked`` (``chunked, identity``, two headers, ``gzip``);
    and both headers at once (RFC 9112 6.1 lets a server refuse it).
    """
    codings = [c.strip().lower() for c in headers.get_all("Transfer-Encoding") or []]
    lengths = {v.strip() for value in headers.get_all("Content-Length") or [] for v in value.split(",")}
    if codings:
        if codings != ["chunked"]:
            raise BadRequest(400, f"unsupported Transfer-Encoding {', '.join(codings)!r}; only chunked")
        if lengths:
            raise BadRequest(400, "both Transfer-Encoding and Content-Length; send one")
        return None
    if not lengths:
        raise BadRequest(411, "Content-Length or Transfer-Encoding: chunked required")
    if len(lengths) > 1:
        raise BadRequest(400, f"differing Content-Length values {', '.join(sorted(lengths))}")
    (value,) = lengths
    if not (value.isascii() and value.isdigit()):
        raise BadRequest(400, f"bad Content-Length {value!r}")
    return int(value)


def read_body(rfile: Any, length: int, charge: Charge) -> list[bytes]:
    """``length`` bytes of body, read and charged a piece at a time (``ClientGone`` if it ends early)."""
    parts: list[bytes] = []
    while length > 0:
        parts.append(_read_piece(rfile, min(length, READ_PIECE), charge))
        length -= len(parts[-1])
    return parts


def _read_piece(rfile: Any, n: int, charge: Charge) -> bytes:
    charge(n)
    data = rfile.read(n)
    if len(data) < n:
        raise ClientGone()
    return data


def read_chunked(rfile: Any, limit: int, charge: Charge) -> list[bytes]:
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
            return parts
        total += size
        if size < 0 or total > limit:
            raise BadRequest(413, f"chunked body exceeds the limit of {limit} bytes")
        parts.extend(read_body(rfile, size, charge))
        if rfile.readline(1024).strip():
            raise BadRequest(400, "malformed chunked body (chunk longer than its size)")


def export_response(content_type: str, stats: OtlpStats) -> bytes:
    """The success body in the request's encoding, with the spans rejected (``partial_success``)."""
    message = "; ".join(f"{reason} ({n})" for reason, n in stats.reasons.items())
    if content_type == PROTOBUF:
        response = ExportTraceServiceResponse()
        if stats.skipped:
            response.partial_success.rejected_spans = stats.skipped
            response.partial_success.error_message = message
        return response.SerializeToString()
    if stats.skipped:  # proto3 JSON mapping: int64 as a string
        return orjson.dumps({"partialSuccess": {"rejectedSpans": str(stats.skipped), "errorMessage": message}})
    return b"{}"
