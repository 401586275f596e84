"""How runs and spans are stored: the ``runs`` row of a run, the compact form of spans, an ``inbox`` row.

Pure functions, so the capture worker and ingest serialize outside the store's lock.

A run's row holds its Run JSON and its raw spans, which repeat each other's content (the prompt, every
tool's args and result): together more bytes than the OTLP/JSON they came from. Each of the two is
deflated (level 1, the fastest) when it is at least ``PACK_MIN`` bytes: a store takes about a quarter
of the OTLP/JSON's bytes. A reader tells a packed blob by its first bytes: ``PACKED`` and a raw deflate
stream (schema 4), zlib's ``x`` and a zlib stream (schema 3), else JSON as it is (``[`` or ``{``, the
rows from before schema 3). Raw deflate, without the zlib stream's header and Adler-32 checksum, reads
a quarter faster: the checksum was a quarter of inflating a row, and rows had no checksum before either
(SQLite keeps none). zstd is in the standard library only from Python 3.14: a store written with it
could not be read by 3.11-3.13.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import orjson

from ..model import RunData, data_failed
from ..spans import SpanData

if TYPE_CHECKING:
    from ..model import Run

__all__ = [
    "PACKED",
    "PACK_MIN",
    "Row",
    "epoch",
    "failure_summary",
    "inbox_row",
    "packed",
    "run_data_of",
    "run_row",
    "span_row",
    "spans_blob",
    "spans_from_blob",
    "spans_of",
    "unpacked",
]

PACK_MIN = 512  # bytes: below this, the call and the tag cost more than they save
PACKED = b"\x1fZ"  # a packed blob's first bytes: no JSON starts with them


# orjson writes ints of this range only, and refuses nesting deeper than 255 levels.
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 64) - 1
_MAX_DEPTH = 254


def _dumps(value: Any) -> bytes:
    """JSON of a run or spans; a value orjson refuses is written in a best-effort form, never losing the run.

    The fast path is orjson as is. It refuses lone surrogates (bytes decoded with surrogateescape),
    ints beyond 64 bits, non-string keys and nesting past its depth: only then is the value copied
    with those replaced (``_scrub``), and anything else it cannot encode becomes its ``str``.
    """
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        return orjson.dumps(_scrub(value, 0), default=str)


def _scrub(value: Any, depth: int) -> Any:
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return value
    if isinstance(value, int):
        return value if _INT_MIN <= value <= _INT_MAX else str(value)  # the int's digits, as a string
    if depth >= _MAX_DEPTH:  # deeper than orjson goes: the rest of the branch as text
        return str(value)
    if isinstance(value, dict):
        return {_scrub(k, depth) if isinstance(k, str) else str(k): _scrub(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scrub(v, depth + 1) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, SpanData):
        return _scrub(value.to_dict(), depth)
    return value


def epoch(iso: str | None) -> float | None:
    """Unix seconds of an ISO time (``Z`` or an offset; naive = UTC); None when it is not one."""
    if not iso:
        return None
    try:
        dt = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def failure_summary(run: Run | RunData) -> str | None:
    """One line saying why a run is kept as a failure, for the list view and the index.

    ``run``: a ``Run`` or its plain-dict form.
    """
    data = run if isinstance(run, dict) else run.to_data()
    if not data_failed(data):
        return None
    if data["stop"] != "answered":
        err = f": {data['error']['type']}" if data["error"] else ""
        return f"stop {data['stop']}{err}"
    bad = [c for c in data["calls"] if c["status"] != "ok"]
    if bad:
        c = bad[0]
        why = c["error"]["type"] if c["error"] else c["status"]
        return f"{c['name']} {why}" + (f" (+{len(bad) - 1} more)" if len(bad) > 1 else "")
    return f"feedback {data['feedback']}"


class Row(tuple):  # type: ignore[type-arg,unused-ignore]
    """A ready ``runs`` table row (``run_row``), for ``TraceStore.add_many``."""

    __slots__ = ()


def run_row(data: RunData, spans: Sequence[SpanData] | None) -> Row:
    """The ``runs`` table row of a run in its plain-dict form and its raw spans.

    A pure function, so the capture worker and ingest serialize runs outside the store's lock. The
    derived lists (``requested_tools``, ``blocked_tools``) are not added: a read makes them again from
    the calls, and a run's JSON without them is smaller to store and quicker to read.
    """
    run_json = packed(_dumps(data))
    spans_json = packed(spans_blob(spans)) if spans else None
    started = data["started_at"]
    ts = epoch(started) or time.time()
    return Row(
        (
            data["trace_id"],
            data["run_id"],
            data["agent"],
            started,
            ts,
            data["stop"],
            int(data_failed(data)),
            failure_summary(data),
            len(run_json) + len(spans_json or b""),
            run_json,
            spans_json,
        )
    )


def spans_blob(spans: Sequence[SpanData]) -> bytes:
    """Spans as stored (a run's raw spans, a trace in the inbox): compact, as the capture worker writes them.

    Each span a JSON array of the ``SpanData`` fields, its resource an index into the trace's
    resources (a process has one): ``[resources, spans]``, a quarter smaller than a list of span
    objects and written in half the time. ``spans_from_blob`` also reads schema 1's list of objects.
    """
    resources: list[dict[str, Any]] = []
    index: dict[int, int] = {}
    rows = []
    for s in spans:
        i = index.get(id(s.resource))
        if i is None:
            i = index[id(s.resource)] = len(resources)
            resources.append(s.resource)
        rows.append(span_row(s, i))
    return _dumps([resources, rows])


def span_row(s: SpanData, resource: int) -> tuple[Any, ...]:
    """A span in the compact form: its fields in order, its resource an index (``spans_blob``) or key."""
    return (
        s.trace_id,
        s.span_id,
        s.parent_id,
        s.name,
        s.start_ns,
        s.end_ns,
        s.kind,
        s.status,
        s.status_message,
        s.attributes,
        s.events,
        s.scope,
        resource,
    )


def packed(blob: bytes) -> bytes:
    return PACKED + zlib.compress(blob, 1, -15) if len(blob) >= PACK_MIN else blob


def unpacked(blob: bytes) -> bytes:
    """A stored blob as JSON again; ``ValueError`` for a damaged one that inflating notices (the readers
    skip and count those). Raw deflate carries no checksum, so damage may also read as other JSON, as
    plain rows' damage always could: SQLite keeps no checksum of its pages either."""
    try:
        if blob[:2] == PACKED:
            return zlib.decompress(memoryview(blob)[2:], -15)
        if blob[:1] == b"x":  # schema 3
            return zlib.decompress(blob)
    except zlib.error as exc:
        raise ValueError(f"damaged compressed blob ({exc})") from None
    return blob


def run_data_of(blob: bytes) -> Any:
    """A stored run's JSON, decoded."""
    return orjson.loads(unpacked(blob))


def spans_from_blob(blob: bytes) -> list[SpanData]:
    return spans_of(orjson.loads(unpacked(blob)))


def spans_of(data: Any) -> list[SpanData]:
    """Spans from the decoded compact form (or schema 1's list of objects)."""
    if not data:
        return []
    if isinstance(data[0], dict):  # schema 1: a list of SpanData objects
        return [SpanData.from_dict(d) for d in data]
    resources, rows = data
    return [SpanData(*row[:12], resource=resources[row[12]]) for row in rows]  # type: ignore[misc]


def inbox_row(traces: Sequence[bytes], *, redacted: bool, pieces: int = 0) -> tuple[float, int, int, int, bytes]:
    """One ``inbox`` row of traces in their ``spans_blob`` form (their spans already redacted when ``redacted``).

    A batch is one row, not a row per trace: SQLite's Python binding takes the GIL back after
    each row it inserts, and on a busy app thread each of those waits costs two thread switches.
    """
    parts = [b"["]
    for trace in traces:
        parts += (trace, b",")
    parts[-1] = b"]" if traces else b"[]"
    return (time.time(), int(redacted), len(traces), pieces, b"".join(parts))  # one copy of the batch, not two
