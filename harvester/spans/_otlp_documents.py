"""OTLP/JSON documents to spans: one document, or the Collector file exporter's JSON lines; a bad
file is one ``OtlpFormatError`` naming it (and the line), a bad span is skipped and counted."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import orjson

from ..errors import OtlpFormatError
from ..seam import replay_span
from ._data import SpanData
from ._otlp_values import attrs_from_otlp, span_from_otlp

__all__ = [
    "OtlpStats",
    "iter_otlp_documents",
    "line_message",
    "numbered_otlp_documents",
    "spans_from_otlp",
    "spans_of_document",
]


class OtlpStats:
    """Counts what a read skipped, so a malformed span is visible rather than silently lost."""

    def __init__(self) -> None:
        self.spans = 0
        self.skipped = 0
        self.replay = 0  # spans of a harvester replay: never production traffic, left out (not rejected)
        self.reasons: dict[str, int] = {}

    def skip(self, reason: str) -> None:
        self.skipped += 1
        self.note(reason)

    def replayed(self) -> None:
        """A span of a harvester replay: not production traffic, so left out (and not a rejection)."""
        self.replay += 1
        self.note("replay span (a harvester replay's, never stored)")

    def note(self, reason: str) -> None:
        """Count something left out that was not a whole span (a bad value, a malformed wrapper)."""
        if reason not in self.reasons and len(self.reasons) >= 100:
            reason = "other"  # a file with a thousand different bad keys must not grow this without bound
        self.reasons[reason] = self.reasons.get(reason, 0) + 1


def spans_from_otlp(doc: Any, stats: OtlpStats | None = None, *, file: str | None = None) -> Iterator[SpanData]:
    """Spans of an OTLP/JSON ``ExportTraceServiceRequest`` document; malformed spans are skipped and counted."""
    if not isinstance(doc, dict) or "resourceSpans" not in doc:
        raise OtlpFormatError("not an OTLP/JSON traces document (no resourceSpans)", file=file, field="resourceSpans")
    stats = stats if stats is not None else OtlpStats()
    rspans = doc["resourceSpans"]
    if not isinstance(rspans, list):
        raise OtlpFormatError("must be a list", file=file, field="resourceSpans")
    bad: list[str] = []
    for rs in rspans:
        if not isinstance(rs, dict):
            stats.skip("resourceSpans entry not an object")
            continue
        res = rs.get("resource") or {}
        if not isinstance(res, dict):
            stats.note("resource not an object (read as empty)")
            res = {}
        resource = attrs_from_otlp(res.get("attributes"), bad)
        for reason in bad:
            stats.note(f"resource {reason} left out")
        bad.clear()
        scope_spans = rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or ()
        if not isinstance(scope_spans, list):
            stats.note("scopeSpans not a list (its spans skipped)")
            continue
        for ss in scope_spans:
            if not isinstance(ss, dict):
                stats.skip("scopeSpans entry not an object")
                continue
            sc = ss.get("scope") or ss.get("instrumentationLibrary") or {}
            scope = str(sc.get("name") or "") if isinstance(sc, dict) else ""
            span_list = ss.get("spans") or ()
            if not isinstance(span_list, list):
                stats.note("spans not a list (skipped)")
                continue
            for s in span_list:
                try:
                    span = span_from_otlp(s, scope, resource, bad)
                except (KeyError, ValueError, TypeError, AttributeError) as exc:
                    stats.skip(f"malformed span: {_why(exc)}")
                    continue
                for reason in bad:
                    stats.note(f"{reason} left out")
                bad.clear()
                if replay_span(s.get("traceState"), span.name, span.attributes):
                    stats.replayed()
                    continue
                stats.spans += 1
                yield span


def spans_of_document(doc: Any, stats: OtlpStats, *, file: str | None, line: int | None) -> Iterator[SpanData]:
    """``spans_from_otlp`` of one document of a file, whose errors name its line in JSON lines."""
    try:
        yield from spans_from_otlp(doc, stats, file=file)
    except OtlpFormatError as exc:
        if line is None:
            raise
        raise OtlpFormatError(line_message(exc), file=file, field=f"line {line}") from None


def line_message(exc: OtlpFormatError) -> str:
    """An error inside one line of JSON lines, for a message that names the line: its field, then what."""
    return f"{exc.field}: {exc.message}" if exc.field else exc.message


def _why(exc: Exception) -> str:
    """A skip reason that names the field: ``KeyError('traceId')`` -> "no traceId"."""
    if isinstance(exc, KeyError) and exc.args:
        return f"no {exc.args[0]}"
    if isinstance(exc, AttributeError):
        return "not an object"
    return str(exc)[:80] or type(exc).__name__


def iter_otlp_documents(data: bytes, *, file: str | None = None) -> Iterator[Any]:
    """One JSON document, or JSON lines (see ``numbered_otlp_documents``)."""
    for _, doc in numbered_otlp_documents(data, file=file):
        yield doc


def numbered_otlp_documents(data: bytes, *, file: str | None = None) -> Iterator[tuple[int | None, Any]]:
    """One JSON document, or JSON lines (the Collector's file exporter writes one request per line).

    Yields ``(line number, document)``; the line number is None for a file that is one document.
    A first line that is a whole document means JSON lines: the file is never parsed as a whole
    first (orjson would validate all of it before failing on the second line).
    """
    text = data.strip()
    if text.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte order mark, as some editors write
        text = text[3:].lstrip()
    if not text:
        return
    if text[:2] == b"\x1f\x8b":
        raise OtlpFormatError("gzip-compressed; decompress it first (zcat FILE | harvester ingest -)", file=file)
    nl = text.find(b"\n")
    lines = False
    if nl >= 0:
        try:
            first = orjson.loads(text[:nl])
            lines = True
        except orjson.JSONDecodeError:
            pass
    if not lines:
        try:
            yield None, orjson.loads(text)
            return
        except orjson.JSONDecodeError:
            # Neither one document nor JSON lines with a good first line: say where it breaks (orjson
            # counts from the start of the text only; the stdlib parser gives line and column).
            try:
                text.decode("utf-8")
            except UnicodeDecodeError as exc:
                at = text.count(b"\n", 0, exc.start) + 1
                col = exc.start - (text.rfind(b"\n", 0, exc.start) + 1) + 1
                raise OtlpFormatError(
                    f"not UTF-8 text (byte 0x{text[exc.start]:02x})", file=file, field=f"line {at} column {col}"
                ) from None
            try:
                json.loads(text.decode("utf-8", "replace"))
            except RecursionError:
                raise OtlpFormatError("invalid JSON (nested too deep)", file=file) from None
            except ValueError as exc:
                where = f"line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else None
                raise OtlpFormatError(f"invalid JSON ({getattr(exc, 'msg', exc)})", file=file, field=where) from None
    for lineno, line in enumerate(text.splitlines(), 1):
        if lines and lineno == 1:
            yield 1, first
            continue
        line = line.strip()
        if not line:
            continue
        try:
            doc = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise OtlpFormatError(f"invalid JSON ({exc})", file=file, field=f"line {lineno}") from None
        yield lineno, doc
