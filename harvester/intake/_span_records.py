"""Span records: what the app's thread hands the capture process, one framed byte string per span.

The app's thread pays for this instead of the worker: converting a span (``from_readable``) and one
``orjson.dumps`` cost about 3 µs, a fifth of what the SDK spends making the span, and they scale with
the threads that make spans, where a worker thread would get ever less of the interpreter as those
threads multiply. A record is exactly its bytes, so the queue is bounded in real bytes, and the SDK
span is freed as soon as ``on_end`` returns.

A frame is ``length (4 bytes, little-endian) | kind (1 byte) | body``:

- ``s``: a span, ``[trace, span, parent, name, start, end, kind, status, message, attributes, events,
  scope, resource key, local root]`` (JSON);
- ``r``: a resource, ``[key, attributes]``, sent before the first span that names it (a process has
  one per provider);
- ``l``: trace ids that lost spans, ``[[trace, reason], ...]`` (the queue refused them: their spans
  already sent are dropped too);
- ``f``: a flush barrier, its number; ``q``: a request for counters.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import orjson

from ..spans import SpanData, from_readable
from ..store import span_row, spans_blob

__all__ = ["LEN", "Resources", "frame", "read_frames", "span_from_record", "span_record"]

LEN = struct.Struct("<I")


def frame(kind: bytes, body: bytes) -> bytes:
    return LEN.pack(len(body) + 1) + kind + body


class Resources:
    """The resource keys handed out so far: a resource is sent once, before its first span."""

    def __init__(self) -> None:
        self._keys: dict[int, tuple[dict[str, Any], int]] = {}  # id -> (the dict, held so the id stays its own, key)

    def key(self, resource: dict[str, Any], out: Any) -> int:
        held = self._keys.get(id(resource))
        if held is not None and held[0] is resource:
            return held[1]
        if len(self._keys) >= 64:  # a provider per request: start again rather than grow
            self._keys = {}
        key = len(self._keys)
        self._keys[id(resource)] = (resource, key)
        out.append(frame(b"r", orjson.dumps((key, resource))))
        return key


def span_record(span: Any, resources: Resources, out: Any) -> bytes:
    """The frame of an SDK span (and, into ``out`` first, its resource's if not sent yet). Raises on a
    span it cannot read or encode: the caller drops and counts it."""
    s = from_readable(span)
    parent = span.parent
    row = (*span_row(s, resources.key(s.resource, out)), parent is None or parent.is_remote)
    try:
        body = orjson.dumps(row)
    except orjson.JSONEncodeError:  # a value orjson refuses (bytes, a lone surrogate): the store's best-effort form
        _, (stored,) = orjson.loads(spans_blob([s]))
        body = orjson.dumps((*stored[:12], *row[12:]))
    return frame(b"s", body)


def span_from_record(body: bytes, resources: dict[int, dict[str, Any]]) -> tuple[SpanData, bool]:
    """A span record's body (after its kind) as ``SpanData``, and whether it is a local root."""
    row = orjson.loads(body)
    return SpanData(*row[:12], resource=resources.get(row[12], {})), row[13]  # type: ignore[misc]


def read_frames(buffer: bytearray) -> Iterator[tuple[bytes, bytes]]:
    """The whole frames at the head of ``buffer`` as (kind, body), removed from it; a torn one stays."""
    at, size = 0, len(buffer)
    view = memoryview(buffer)
    try:
        while at + 4 <= size:
            (n,) = LEN.unpack_from(buffer, at)
            if at + 4 + n > size:
                break
            yield bytes(view[at + 4 : at + 5]), bytes(view[at + 5 : at + 4 + n])
            at += 4 + n
    finally:
        view.release()
        del buffer[:at]
