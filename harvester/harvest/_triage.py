"""``triage``: a window of failing runs as a short ranked list of clusters (``_clusters``), each with its
trend against the window before it and the cases that already cover it.

The store is streamed (failing runs only, through its ``failed`` index): memory grows with the number of
clusters, never with runs. A case covers a cluster when one of the cluster's runs is the case's own run
or would fold into it (the harvest ``signature``), or when ``harvest --by-cluster`` proposed it for the
cluster (``source.cluster``). Deterministic: the same store, window and cases give the same list.
"""

from __future__ import annotations

import difflib
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..case import case_signatures
from ..config import Config
from ..errors import InputError, NotFoundError
from ..store import epoch, time_arg
from ._clusters import ClusterKey, cluster_key, similar
from ._kinds import read_run
from ._signature import signature_of

__all__ = ["TRENDS", "Cluster", "Coverage", "Triage", "triage"]

TRENDS = ("new", "growing", "steady", "falling")  # the ranking: new first, then growing


@dataclass
class Cluster:
    key: ClusterKey
    size: int = 0  # failing runs of the window
    previous: int = 0  # failing runs of the window before it, of the same length
    first_seen: str | None = None  # over both windows
    last_seen: str | None = None
    example: tuple[str, str] | None = None  # (trace id, run id) of its most recent run
    covered: dict[str, str] = field(default_factory=dict)  # case id -> status
    merged: list[str] = field(default_factory=list)  # ids of the clusters ``--similar`` folded into it

    @property
    def id(self) -> str:
        return self.key.id

    @property
    def trend(self) -> str:
        if self.previous == 0:
            return "new"
        return "growing" if self.size > self.previous else "steady" if self.size == self.previous else "falling"

    def rank(self) -> tuple[int, int, int, str]:
        return (TRENDS.index(self.trend), self.previous - self.size, -self.size, self.id)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "signature": {**self.key.to_dict(), "summary": self.key.summary()},
            "size": self.size,
            "previous": self.previous,
            "change": self.size - self.previous,
            "trend": self.trend,
            "first_seen": self.first_seen,
            "last_seen": self.last_seen,
            "example": {"trace_id": self.example[0], "run_id": self.example[1]} if self.example else None,
            "covered_by": [{"id": cid, "status": status} for cid, status in sorted(self.covered.items())],
            "merged": self.merged,
        }


class Coverage:
    """What the case folder says covers a run: its own run, its signature, or its cluster (read lightly)."""

    def __init__(self, cases_dir: str | Path | None) -> None:
        self.by_run: dict[tuple[str, str], tuple[str, str]] = {}
        self.by_signature: dict[str, tuple[str, str]] = {}
        self.by_cluster: dict[str, dict[str, str]] = {}
        for case in case_signatures(cases_dir) if cases_dir is not None else ():
            named = (case.id or case.path.stem, case.status)
            if case.trace_id and case.run_id:
                self.by_run.setdefault((case.trace_id, case.run_id), named)
            for sig in (case.signature, *case.earlier):
                if sig:
                    self.by_signature.setdefault(sig, named)
            if case.cluster:
                self.by_cluster.setdefault(case.cluster, {}).setdefault(*named)

    def of(self, trace_id: str, run_id: str, signature: str) -> tuple[str, str] | None:
        return self.by_run.get((trace_id, run_id)) or self.by_signature.get(signature)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Triage:
    clusters: list[Cluster]
    start: float | None  # the window, unix seconds (None: from the first stored run)
    end: float
    runs: int = 0  # failing runs of the window
    previous_runs: int = 0
    gone: int = 0  # clusters of the previous window with no run in this one

    def find(self, cluster_id: str) -> Cluster:
        """The cluster ``cluster_id`` names (or one ``--similar`` merged into it); else a ``NotFoundError``."""
        for cluster in self.clusters:
            if cluster_id in (cluster.id, *cluster.merged):
                return cluster
        near = difflib.get_close_matches(cluster_id, [c.id for c in self.clusters], n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(near)}?" if near else " (list them with: harvester triage)"
        raise NotFoundError(f"no cluster {cluster_id!r} among the failing runs of the window{hint}")

    def summary(self) -> str:
        window = f"since {_iso(self.start)}" if self.start is not None else "in the whole store"
        previous = f"; previous window: {self.previous_runs} runs" if self.start is not None else ""
        gone = f", {self.gone} of the previous window did not recur" if self.gone else ""
        return f"{len(self.clusters)} clusters of {self.runs} failing runs {window}{previous}{gone}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "start": _iso(self.start) if self.start is not None else None,
            "end": _iso(self.end),
            "runs": self.runs,
            "previous_runs": self.previous_runs,
            "gone": self.gone,
            "clusters": [c.to_dict() for c in self.clusters],
        }


def _time(name: str, value: Any) -> float | None:
    """``time_arg`` of a window's bound, its error naming the option."""
    try:
        return time_arg(value)
    except InputError as exc:
        raise InputError(f"{name}: {exc}") from None


def _merge_similar(clusters: list[Cluster]) -> list[Cluster]:
    """``--similar``: each cluster folds into the first bigger (or equal, lower id) near duplicate kept."""
    kept: list[Cluster] = []
    for c in sorted(clusters, key=lambda c: (-(c.size + c.previous), c.id)):
        into = next((k for k in kept if similar(k.key, c.key)), None)
        if into is None:
            kept.append(c)
            continue
        into.size, into.previous = into.size + c.size, into.previous + c.previous
        into.first_seen = min(filter(None, (into.first_seen, c.first_seen)), default=None)
        if (c.last_seen or "") > (into.last_seen or ""):
            into.last_seen, into.example = c.last_seen, c.example
        into.covered = {**c.covered, **into.covered}
        into.merged += [c.id, *c.merged]
    return kept


def triage(
    store: Any,
    cases_dir: str | Path | None = None,
    *,
    since: Any = None,
    until: Any = None,
    agent: str | None = None,
    merge_similar: bool = False,
    config: Config | None = None,
) -> Triage:
    """Cluster the failing runs started in [``since``, ``until``) (default: up to now), and count each
    cluster's runs in the window of the same length before it (its trend). ``since=None``: the whole
    store up to ``until``, with no previous window (every cluster is new)."""
    config = config or Config()
    end = _time("until", until) or time.time()
    start = _time("since", since)
    if start is not None and start >= end:
        raise InputError(f"since: {since!r} is not before the end of the window ({_iso(end)})")
    before = start - (end - start) if start is not None else None
    coverage = Coverage(cases_dir)
    clusters: dict[ClusterKey, Cluster] = {}
    out = Triage([], start, end)
    for run in store.runs(failed=True, agent=agent, since=before, until=end):  # newest first, streamed
        reading = read_run(run, config, incident=False, forbid=())
        if reading.kind is None:  # stored as failed, yet not a failure: deferred to a human, say
            continue
        key = cluster_key(run, reading.kind)
        cluster = clusters.get(key) or clusters.setdefault(key, Cluster(key))
        ts = epoch(run.started_at)
        if start is not None and ts is not None and ts < start:
            cluster.previous += 1
            out.previous_runs += 1
        else:
            cluster.size += 1
            out.runs += 1
            if cluster.example is None:  # newest first: the first run of the window is its latest
                cluster.example, cluster.last_seen = (run.trace_id, run.run_id), run.started_at
        cluster.first_seen = run.started_at or cluster.first_seen
        hit = coverage.of(run.trace_id, run.run_id, signature_of(run, reading.kind))
        if hit is not None:
            cluster.covered.setdefault(*hit)
    current = [c for c in clusters.values() if c.size]
    out.gone = len(clusters) - len(current)
    if merge_similar:
        current = _merge_similar(current)
    for c in current:
        for cid in (c.id, *c.merged):
            for case_id, status in coverage.by_cluster.get(cid, {}).items():
                c.covered.setdefault(case_id, status)
    out.clusters = sorted(current, key=Cluster.rank)
    return out
