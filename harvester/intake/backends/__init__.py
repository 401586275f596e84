"""Readers for the observability backends teams already run (``harvester import``, ``incident --from``).

Each backend stores spans its own way and changes them on the way in (Phoenix derives OpenInference
attributes and unpacks JSON strings; MLflow renames trace ids and drops span kinds; Jaeger turns
attributes into typed tags). Each backend's module (``_phoenix``, ``_mlflow``...) turns its form back
into ``SpanData``, the form the conventions read, undoing what its backend did, so the same Run comes
out as from the processor. A module declares its backend (``BACKEND``: name and URL scheme, default
port, credential variables, saved form) and satisfies ``BackendReader`` (``_backend``); ``_registry``
lists them, and everything that names a backend (the URL parser, the CLI's help, the docs table)
reads it from there.

``_client`` is the HTTP client they share and ``_values`` the id and payload rules; ``_target``
parses the ``phoenix://host:port/project`` URL; ``_files`` detects an exported file's form;
``_fidelity`` says what a trace's spans held; ``_limits`` how long a pull may take and how much it
may read; ``_importer`` stores what was read, redacted, through
the same writer as ``ingest``.
"""

from __future__ import annotations

from ..._lazy import lazy

__all__ = [
    "BACKENDS",
    "READERS",
    "Backend",
    "BackendReader",
    "Client",
    "Fidelity",
    "Imported",
    "Limits",
    "Target",
    "fidelity",
    "import_traces",
    "labels",
    "parse_target",
    "pull",
    "reader",
    "spans_of_export",
    "url_forms",
]

_NAMES = {
    "Backend": "_backend",
    "BackendReader": "_backend",
    "Target": "_backend",
    "BACKENDS": "_registry",
    "READERS": "_registry",
    "labels": "_registry",
    "reader": "_registry",
    "url_forms": "_registry",
    "Client": "_client",
    "Fidelity": "_fidelity",
    "fidelity": "_fidelity",
    "Imported": "_importer",
    "Limits": "_limits",
    "import_traces": "_importer",
    "pull": "_importer",
    "parse_target": "_target",
    "spans_of_export": "_files",
}

__getattr__ = lazy(__name__, _NAMES, globals())


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
