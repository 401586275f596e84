"""Which stored runs a shadow replays: streamed from the store, never loaded whole.

The filters are the store's (since, agent, failed); then runs that already are cases are left out
(their review stands, and ``replay`` runs them), ``sample`` keeps a reproducible sample stratified by
agent and outcome (a first pass counts each stratum and keeps its lowest-priority run ids, a second
streams the runs chosen), and a shard keeps its slice of that (stable by run, as ``replay --shard``
is by case id), so the shards of one sample split it. Memory grows with the sample and the strata,
never with the store.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from ..canonical import digest
from ..model import Run
from ..replay import in_shard
from ..store import time_arg
from ._change import run_key

__all__ = ["Selection", "allocate", "production_runs"]

_Stratum = tuple[str, bool]  # (agent, failed)


@dataclass
class Selection:
    """What to shadow: the store's filters, the runs to leave out (cases' own), a shard, a sample size."""

    since: str | float | datetime | None = None
    agent: str | None = None
    failed: bool = False
    shard: tuple[int, int] | None = None
    sample: int | None = None
    exclude: set[tuple[str, str]] = field(default_factory=set)  # (trace id, run id) of runs that are cases

    def mine(self, run: Run) -> bool:
        """In this shard (every run without one)."""
        return self.shard is None or in_shard(run_key(run), self.shard)


def _priority(run: Run) -> int:
    """A reproducible pseudo-random order, so the same store always yields the same sample."""
    return int(digest([run.trace_id, run.run_id], length=12), 16)


def allocate(sizes: dict[_Stratum, int], n: int) -> dict[_Stratum, int]:
    """``n`` split across strata in proportion to their sizes, each stratum getting one run first while
    ``n`` allows (the rare outcome must be seen), none more than it holds; each further run goes to
    the stratum furthest below its proportional share."""
    total = sum(sizes.values())
    if total <= n:
        return dict(sizes)
    order = sorted(sizes, key=lambda s: (-sizes[s], s))
    share = {s: int(i < n) for i, s in enumerate(order)}
    heap = [(share[s] - n * sizes[s] / total, s) for s in order if share[s] < sizes[s]]
    heapq.heapify(heap)
    for _ in range(n - sum(share.values())):
        _, s = heapq.heappop(heap)
        share[s] += 1
        if share[s] < sizes[s]:
            heapq.heappush(heap, (share[s] - n * sizes[s] / total, s))
    return share


def production_runs(store: Any, selection: Selection) -> Iterator[Run]:
    """The runs to shadow, oldest first, streamed (twice with ``sample``: count, then take; an age like
    ``24h`` is read once, so both passes see the same runs)."""
    selection = replace(selection, since=time_arg(selection.since))
    if selection.sample is None:
        yield from (r for r in _stream(store, selection) if selection.mine(r))
        return
    chosen = _sample(_stream(store, selection), selection.sample)  # the whole sample: shards split it
    yield from (r for r in _stream(store, selection) if (r.trace_id, r.run_id) in chosen and selection.mine(r))


def _stream(store: Any, selection: Selection) -> Iterator[Run]:
    """The store's runs the filters select, oldest first, but those that are cases."""
    failed = True if selection.failed else None
    runs = store.runs(failed=failed, agent=selection.agent, since=selection.since, newest_first=False)
    return (r for r in runs if (r.trace_id, r.run_id) not in selection.exclude)


def _sample(runs: Iterable[Run], n: int) -> set[tuple[str, str]]:
    """The (trace id, run id) of ``n`` runs, stratified by (agent, failed): each stratum keeps the ids of
    its ``n`` lowest priorities while its size is counted, then each gives its share of ``n``."""
    sizes: dict[_Stratum, int] = {}
    heaps: dict[_Stratum, list[tuple[int, str, str]]] = {}  # max-heaps of (-priority, trace id, run id)
    for run in runs:
        stratum = (run.agent or "", run.failed)
        sizes[stratum] = sizes.get(stratum, 0) + 1
        heap = heaps.setdefault(stratum, [])
        entry = (-_priority(run), run.trace_id, run.run_id)
        if len(heap) < n:
            heapq.heappush(heap, entry)
        elif entry > heap[0]:
            heapq.heapreplace(heap, entry)
    share = allocate(sizes, n)
    return {(t, r) for s, heap in heaps.items() for _, t, r in sorted(heap, reverse=True)[: share[s]]}
