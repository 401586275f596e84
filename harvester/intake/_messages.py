"""The messages between ``harvester ingest``'s parent process and its workers (pickled NamedTuples).

Parent to worker: ``Parse`` each chunk (answered by ``Parsed`` or ``ParseError``); ``Export`` and
``Import`` move the parts of a trace split over workers (``Parts`` answers an export); ``Write`` a
batch of held traces (answered by ``Rows``); ``Clear`` after a file, ``Stop`` at the end. A worker
that breaks answers ``Failed``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ..spans import SpanData

__all__ = ["Clear", "Export", "Failed", "Import", "Parse", "ParseError", "Parsed", "Parts", "Rows", "Stop", "Write"]


class Parse(NamedTuple):
    """Parse a chunk (``kind``: doc | lines | range) and keep its spans by trace; answer ``Parsed``."""

    key: int
    kind: str
    name: str
    payload: Any


class Write(NamedTuple):
    """Normalize, redact and serialize these held traces (id, the keys of its chunks); answer ``Rows``."""

    batch: int
    items: list[tuple[str, list[int]]]


class Export(NamedTuple):
    """Hand back these held parts (trace id, chunk key) to move them to another worker: ``Parts``."""

    items: list[tuple[str, int]]


class Import(NamedTuple):
    """Hold these parts too (trace id, chunk key, spans): moved from another worker, or stored before."""

    parts: list[tuple[str, int, list[SpanData]]]


class Clear(NamedTuple):
    """The file is done: let go of what is held."""


class Stop(NamedTuple):
    """Exit."""


class Parsed(NamedTuple):
    key: int
    trace_ids: list[str]
    spans: int
    skipped: int
    reasons: dict[str, int]
    lines: int


class ParseError(NamedTuple):
    key: int
    message: str
    file: str | None
    field: str | None
    line: int | None


class Rows(NamedTuple):
    batch: int
    counts: list[int | None]  # per trace: runs written, or None for a trace with no agent run
    rows: list[tuple[Any, ...]]
    lost: dict[str, int]
    no_agent: list[tuple[str, bytes]]  # the traces with no agent run, as ``spans_blob``s: a later part may join


class Parts(NamedTuple):
    parts: list[tuple[str, int, list[SpanData]]]


class Failed(NamedTuple):
    error: str
    traceback: str
