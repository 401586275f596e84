"""One in-memory form for a finished span, whatever it came from.

The SDK's ``ReadableSpan`` (``_readable``), an OTLP/JSON document (``_otlp_documents`` and
``_otlp_values``: the file exporter, ``harvester ingest``) and an OTLP protobuf request
(``harvester serve``) all become ``SpanData`` (``_data``); the conventions readers, the store and
the exporters (``_export``: back to OTLP/JSON) only know this form. ``_size`` estimates what a span
costs to hold, so capture bounds its memory in bytes.
"""

from ._data import KIND_NAMES, STATUS_NAMES, SpanData
from ._export import to_otlp
from ._otlp_documents import (
    OtlpStats,
    iter_otlp_documents,
    line_message,
    numbered_otlp_documents,
    spans_from_otlp,
    spans_of_document,
)
from ._otlp_values import span_from_otlp
from ._readable import from_readable
from ._size import held_size, readable_size, span_size

__all__ = [
    "KIND_NAMES",
    "STATUS_NAMES",
    "OtlpStats",
    "SpanData",
    "from_readable",
    "iter_otlp_documents",
    "line_message",
    "numbered_otlp_documents",
    "held_size",
    "readable_size",
    "span_from_otlp",
    "span_size",
    "spans_from_otlp",
    "spans_of_document",
    "to_otlp",
]
