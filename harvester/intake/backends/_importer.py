"""``pull`` and ``import_traces``: traces from a backend into the trace store, whole or not at all.

Every trace is read in full (every page) before anything is written, and all of them are written in
one flush through ``ingest``'s path (merged with what is stored, normalized, redacted, every run
kept): a backend that fails halfway, a 401 on the tenth trace, a rate limit, a pull past its deadline
or its page cap (``Limits``), leaves the store as it was. Reading many traces is one request or a few
per trace, which is why the CLI shows a bar.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from ...errors import InputError
from ...spans import SpanData
from ...store import TraceStore
from .._ingest import IngestStats, ingest_traces
from ._backend import Target
from ._client import Client
from ._limits import Limits
from ._registry import reader
from ._target import parse_target

__all__ = ["Imported", "client_for", "import_traces", "pull"]

MAX_LIMIT = 10_000


class Imported(NamedTuple):
    target: Target
    traces: dict[str, list[SpanData]]  # stored trace id (32 hex) -> its spans, in the order asked
    asked: dict[str, str]  # the id as the user or the search gave it -> stored trace id
    stats: IngestStats | None  # None until stored


def client_for(target: Target | str, *, timeout: float = 30.0, limits: Limits | None = None) -> Client:
    target = parse_target(target) if isinstance(target, str) else target
    mod = reader(target.backend)
    return Client(target, headers=mod.headers(), credentials=mod.BACKEND.credentials, timeout=timeout, limits=limits)


def pull(
    target: Target | str,
    trace_ids: Sequence[str] = (),
    *,
    since_ns: int | None = None,
    failed: bool = False,
    limit: int = 100,
    timeout: float = 30.0,
    limits: Limits | None = None,
    progress: Callable[[int, int | None], Any] | None = None,
) -> Imported:
    """Read the named traces (or, with none named, the newest ``limit`` the backend finds) in full;
    ``timeout`` bounds each request, ``limits`` the whole pull (its deadline starts here) and each answer."""
    if not 1 <= limit <= MAX_LIMIT:
        raise InputError(f"--limit must be between 1 and {MAX_LIMIT:,}, not {limit}", field="--limit")
    if since_ns is not None and since_ns < 0:
        raise InputError(f"--since must not be before 1970 (since_ns={since_ns})")
    client = client_for(target, timeout=timeout, limits=limits)
    mod = reader(client.target.backend)
    ids = list(dict.fromkeys(trace_ids))
    if not ids:
        with client.answers():  # an answer of the wrong shape: one line naming the request, not a traceback
            ids = mod.find(client, since_ns=since_ns, failed=failed, limit=limit)
    traces: dict[str, list[SpanData]] = {}
    asked: dict[str, str] = {}
    for done, tid in enumerate(ids, 1):
        with client.answers():
            spans = mod.fetch(client, tid)
        stored = spans[0].trace_id
        traces.setdefault(stored, []).extend(s for s in spans if s.trace_id == stored)
        asked[tid] = stored
        if progress is not None:
            progress(done, len(ids))
    return Imported(client.target, traces, asked, None)


def import_traces(
    target: Target | str,
    store: TraceStore,
    trace_ids: Sequence[str] = (),
    *,
    redact: Any = True,
    **options: Any,
) -> Imported:
    """``pull``, then store everything read in one write (see ``pull`` for the options)."""
    got = pull(target, trace_ids, **options)
    return got._replace(stats=ingest_traces(got.traces, store, redact=redact))
