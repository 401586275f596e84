"""``spans_of_export``: the spans of a file saved from any backend, its form told by its content.

A user who saved a trace from a backend (Jaeger's UI, Tempo's API...) should not have to say which it
was, nor convert it: each document of the file (one JSON document, or JSON lines) is tried as
OTLP/JSON first (the Collector's file exporter, ``traces export``, a Jaeger v3 or Tempo answer that is
plain OTLP), then as each registered backend's own form. A document of no known form stops the read
with one line naming the file and listing the forms that were expected.
"""

from __future__ import annotations

from typing import Any

from ...errors import OtlpFormatError
from ...spans import OtlpStats, SpanData, numbered_otlp_documents, spans_of_document
from ._registry import READERS, exports

__all__ = ["EXPECTED", "spans_of_export"]

EXPECTED = f"OTLP/JSON (resourceSpans), {exports()}"


def spans_of_export(data: bytes, file: str) -> list[SpanData]:
    spans: list[SpanData] = []
    stats = OtlpStats()
    for line, doc in numbered_otlp_documents(data, file=file):
        doc = _unwrapped(doc)
        if isinstance(doc, dict) and "resourceSpans" in doc:
            spans.extend(spans_of_document(doc, stats, file=file, line=line))
            continue
        found = _of_backends(doc, file)
        if found is None:
            where = f" (line {line})" if line is not None else ""
            raise OtlpFormatError(f"not a trace export harvester knows{where}; expected {EXPECTED}", file=file)
        spans.extend(found)
    return spans


def _unwrapped(doc: Any) -> Any:
    """Jaeger v3's ``{"result": {"resourceSpans": ...}}`` is OTLP/JSON in an envelope."""
    if isinstance(doc, dict) and isinstance(doc.get("result"), dict) and "resourceSpans" in doc["result"]:
        return doc["result"]
    return doc


def _of_backends(doc: Any, file: str) -> list[SpanData] | None:
    for backend in READERS.values():
        found = backend.from_export(doc, file)
        if found is not None:
            return list(found)
    return None
