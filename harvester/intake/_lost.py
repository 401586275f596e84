"""``LostTraces``: the ids of the traces capture dropped spans of, so their runs are stored marked.

A span dropped on the app's thread (the queue full) may be a child of a run whose other spans are
stored: without a record of the drop, that run would read as whole. The app's thread only appends
the trace id to a bounded deque (O(1), lock-free: ``deque.append`` is atomic); the worker moves those
into its own bounded LRU of ids before it writes a trace, and marks the trace if its id is there.

Children end before their parents, so a drop is always noted before the local root that completes
the trace is queued: the worker, reading the deque when it writes, never misses it. Memory is bounded
in ids (``capacity`` in each of the two, a few tens of bytes each); an id that could not be noted or
was forgotten is counted in ``forgotten``: its trace, if stored, is not marked.

The queue drops whole traces (``QUEUE_FULL``): the spans of a trace it refused that were queued before
are dropped by the worker too (``Refused``), so no run is stored cut in two by a full queue.
"""

from __future__ import annotations

import collections
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from ..conventions import INCOMPLETE_KEY
from ..spans import SpanData
from ._tally import Tally

__all__ = ["QUEUE_FULL", "LostTraces", "Refused"]

QUEUE_FULL = "queue_full"


class LostTraces:
    """Trace ids that lost a span, each counted once in ``count`` (the ``lost_traces`` of ``stats()``)."""

    def __init__(self, capacity: int = 4_096) -> None:
        self.capacity = max(capacity, 1)
        self._noted: collections.deque[tuple[int, str]] = collections.deque()  # app threads -> worker
        self._ids: collections.OrderedDict[str, str] = collections.OrderedDict()  # the worker's: id -> reason
        self._unnoted = Tally()  # app threads found the deque full
        self.count = 0  # traces that lost a span (distinct while remembered)
        self.evicted = 0  # ids the worker forgot to make room
        self.refused: list[str] = []  # ids the queue refused, taken since ``Refused.take`` last looked

    # -- the app's thread ------------------------------------------------------------------------
    def note(self, span: ReadableSpan | None, reason: str) -> None:
        """A span (the SDK's) was dropped: remember its trace. O(1), never blocks, never raises."""
        noted = self._noted
        if len(noted) >= self.capacity:
            self._unnoted.add()
            return
        try:
            trace_id = span.context.trace_id  # type: ignore[union-attr]  # None: counted below
            if noted and noted[-1][0] == trace_id:  # the same trace dropping span after span: once is enough
                return
        except IndexError:  # emptied by the worker meanwhile
            pass
        except Exception:  # a span without a context: no trace to remember
            self._unnoted.add()
            return
        noted.append((trace_id, reason))

    # -- the worker ------------------------------------------------------------------------------
    def lose(self, trace_id: str, reason: str) -> None:
        """A span of ``trace_id`` (hex) was dropped on the worker (too big, too old, unconvertible)."""
        ids = self._ids
        if trace_id in ids:
            ids.move_to_end(trace_id)
            return
        ids[trace_id] = reason
        self.count += 1
        if len(ids) > self.capacity:
            ids.popitem(last=False)
            self.evicted += 1

    def take(self) -> None:
        """Remember (and count) the ids the app's threads noted: before every write, and every loop."""
        noted = self._noted
        while noted:
            tid, why = noted.popleft()
            self.lose(hex_id := format(tid, "032x"), why)
            if why == QUEUE_FULL:
                self.refused.append(hex_id)

    def has_notes(self) -> bool:
        return bool(self._noted)

    def pop_notes(self) -> list[tuple[str, str]]:
        """The ids the app's threads noted, as (hex id, reason), for another process to ``lose``."""
        noted, out = self._noted, []
        while noted:
            tid, why = noted.popleft()
            out.append((format(tid, "032x"), why))
        return out

    def reason(self, trace_id: str) -> str | None:
        """Why ``trace_id`` lost spans (the first drop's reason), or None if it lost none that is known."""
        self.take()
        return self._ids.get(trace_id)

    def marked(self, spans: list[SpanData]) -> list[SpanData]:
        """``spans`` of one trace; if it lost spans, with a copy of the first carrying ``INCOMPLETE_KEY``."""
        if not spans or (reason := self.reason(spans[0].trace_id)) is None:
            return spans
        first = spans[0]
        return [SpanData(**{**first.to_dict(), "attributes": {**first.attributes, INCOMPLETE_KEY: reason}}), *spans[1:]]

    @property
    def forgotten(self) -> int:
        """Ids not remembered: not noted (the deque full) or evicted; their traces may be stored unmarked."""
        return self._unnoted.value() + self.evicted

    def clear(self) -> None:
        """In a forked child: the parent's drops are the parent's."""
        self._noted.clear()
        self._ids.clear()
        self.refused.clear()
        self._unnoted = Tally()
        self.count = self.evicted = 0


class Refused:
    """The traces the queue refused, on the worker's side: their open spans go, and their spans still to come.

    The app's thread drops every later span of a refused trace itself; what it queued before the
    refusal reaches the worker, which drops it here, until the trace's local root (refused too) ends
    it. At most ``capacity`` ids are remembered (an id pushed out lets its trace's later spans through:
    stored, they are marked with the drop, as any run that lost a span).
    """

    def __init__(self, capacity: int = 4_096) -> None:
        self.capacity = max(capacity, 1)
        self.ids: collections.OrderedDict[str, None] = collections.OrderedDict()

    def take(self, lost: LostTraces, assembler: Any) -> None:
        """Refuse the traces ``lost`` learned were refused: drop what ``assembler`` holds of them."""
        for trace_id in lost.refused:
            if trace_id in assembler.open:
                assembler.closed(trace_id)
            self.ids[trace_id] = None
            if len(self.ids) > self.capacity:
                self.ids.popitem(last=False)
        lost.refused.clear()

    def drops(self, trace_id: str, local_root: bool) -> bool:
        """True for a span of a refused trace (its local root ends the refusal)."""
        if not self.ids or trace_id not in self.ids:
            return False
        if local_root:
            del self.ids[trace_id]
        return True
