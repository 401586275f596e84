"""Readers for the observability backends teams already run: Phoenix, MLflow, Jaeger, Tempo.

Each backend stores spans its own way and changes them on the way in (Phoenix derives OpenInference
attributes and unpacks JSON strings; MLflow renames trace ids and drops span kinds; Jaeger turns
attributes into typed tags). Each reader module turns its backend's form back into ``SpanData``, the
form the conventions read, undoing what its backend did, so the same Run comes out as from the
processor. One module per backend (``_phoenix``, ``_mlflow``, ``_jaeger``, ``_tempo``), each with:

- ``CREDENTIALS``: the environment variables it reads, for the docs and the 401 line;
- ``headers() -> dict[str, str]``: the request headers those variables make (never logged; a value a
  header cannot carry is an ``InputError`` naming its variable);
- ``fetch(client, trace_id) -> list[SpanData]``: one whole trace, every page of it; ``NotFoundError``
  when the backend does not hold it;
- ``find(client, *, since_ns, failed, limit) -> list[str]``: trace ids, newest first, filtered on the
  server where its API allows;
- ``from_export(doc, file) -> list[SpanData] | None``: the spans of an exported file's document in
  the backend's form, ``None`` when the document is not of that form.

``_client`` is the HTTP client they share and ``_values`` the id and payload rules; ``_target``
parses the ``phoenix://host:port/project`` URL; ``_files`` detects an exported file's form;
``_fidelity`` says what a trace's spans held; ``_importer`` stores what was read, redacted, through
the same writer as ``ingest``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from ..._lazy import lazy

__all__ = [
    "READERS",
    "BackendReader",
    "Client",
    "Fidelity",
    "Imported",
    "Target",
    "fidelity",
    "import_traces",
    "parse_target",
    "pull",
    "reader",
    "spans_of_export",
]

READERS = {"jaeger": "._jaeger", "tempo": "._tempo", "phoenix": "._phoenix", "mlflow": "._mlflow"}

_NAMES = {
    "Client": "_client",
    "Fidelity": "_fidelity",
    "fidelity": "_fidelity",
    "Imported": "_importer",
    "import_traces": "_importer",
    "pull": "_importer",
    "Target": "_target",
    "parse_target": "_target",
    "spans_of_export": "_files",
}

BackendReader = ModuleType  # a reader is a module with the functions above (duck-typed, one per backend)


def reader(backend: str) -> BackendReader:
    """The reader module of ``backend`` (loaded on first use: each pulls only what it needs)."""
    return importlib.import_module(READERS[backend], __name__)


__getattr__ = lazy(__name__, _NAMES, globals())


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
