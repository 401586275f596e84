"""The processor's store: opened at the app's start, or a logged stand-in when it cannot be used.

A store that cannot be opened (a read-only filesystem, a directory, a file that is not SQLite) never
stops the app: it is logged, nothing is written, and the processor's ``stats()`` says why.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from ..errors import StoreError
from ..spans import SpanData
from ..store import TraceStore, is_postgres_url, shown_store

__all__ = ["UnusableStore", "open_store"]

log = logging.getLogger("harvester.intake")


class UnusableStore:
    """The ``RowSink`` of a store that could not be opened (a read-only filesystem, a directory, a file
    that is not SQLite), so that the app starts all the same. The worker drops every span before it
    gets this far (``store_unusable``, and ``stats()`` says why); a write that did arrive would fail
    and be counted like any store error."""

    def __init__(self, path: str, error: str) -> None:
        self.path = path
        self.error = error

    def add_many(self, items: Any, *, replace_traces: Any = (), inbox: Any = ()) -> int:
        raise StoreError(self.error)

    def spans_of(self, trace_ids: Any) -> dict[str, list[SpanData]]:
        return {}

    def close(self) -> None:
        pass


def open_store(store: TraceStore | str | os.PathLike[str] | None) -> TraceStore | UnusableStore:
    """The processor's store, or, when the file cannot be used, a logged stand-in that writes nothing."""
    if isinstance(store, TraceStore):
        return store
    try:
        if is_postgres_url(str(store)):  # connected at the first write, on the worker: never the app's start
            return TraceStore(store, check=False)
        return TraceStore(store)
    except Exception as exc:  # StoreError, or an OSError the checks did not foresee
        named = shown_store(str(store))  # a PostgreSQL URL without its password
        error = str(exc) if isinstance(exc, StoreError) else f"{named}: {exc}"
        log.warning("harvester: capture is off, the trace store cannot be used: %s", error)
        return UnusableStore(named, error)
