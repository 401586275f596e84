"""The trace store: normalized runs and the raw spans they were read from, in one SQLite file or a
PostgreSQL database (``TraceStore("postgresql://user@host:port/db")``, ``_postgres``).

Also here: OTLP/JSON export (``export_otlp``, ``export_otlp_lines``), which only reads stored spans. Writing runs into a
store (capture, ingest, the receiver) and settling its inbox are the intake pipeline's
(``harvester.intake``), which sits above the store.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy
from ._codec import Row, epoch, failure_summary, inbox_row, run_row, span_row, spans_blob, spans_from_blob
from ._connection import DEFAULT_PATH, ENV_PATH, default_path, store_file
from ._postgres import is_postgres_url, shown_store
from ._queries import time_arg
from ._schema import SCHEMA, SCHEMA_VERSION
from ._settling import Normalize
from ._store import TraceStore

if TYPE_CHECKING:  # loaded on first use: the hook never copies or exports a store
    from ._copy import Copied, copy_store
    from ._export import export_otlp, export_otlp_lines

__all__ = [
    "Copied",
    "DEFAULT_PATH",
    "ENV_PATH",
    "Normalize",
    "Row",
    "SCHEMA",
    "SCHEMA_VERSION",
    "TraceStore",
    "copy_store",
    "default_path",
    "epoch",
    "export_otlp",
    "export_otlp_lines",
    "failure_summary",
    "inbox_row",
    "is_postgres_url",
    "run_row",
    "shown_store",
    "span_row",
    "spans_blob",
    "spans_from_blob",
    "store_file",
    "time_arg",
]

_LAZY = {"Copied": "_copy", "copy_store": "_copy", "export_otlp": "_export", "export_otlp_lines": "_export"}
__getattr__ = lazy(__name__, _LAZY, globals())
