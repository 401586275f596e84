"""``harvest --by-cluster``: one pending case per failure cluster no case covers yet, made from the
cluster's most recent run, its size, span and signature in the review notes.

A cluster a case covers (``_triage``) is never proposed again: an accepted case is told how many runs
of the window it now stands for, a pending one is waiting for review, a rejected one's verdict stands.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..case import NOTE_PREFIX, CaseFolder, CaseIds, save_case
from ..config import Config
from ._case import build_case
from ._kinds import read_run
from ._triage import Cluster, triage

__all__ = ["ClusterHarvest", "harvest_clusters"]


@dataclass
class ClusterHarvest:
    clusters: int = 0
    proposed: dict[str, str] = field(default_factory=dict)  # new case id -> its cluster
    waiting: dict[str, list[str]] = field(default_factory=dict)  # cluster -> pending cases covering it
    accepted: list[str] = field(default_factory=list)  # clusters accepted cases cover
    rejected: list[str] = field(default_factory=list)  # clusters only rejected cases cover
    covers: dict[str, int] = field(default_factory=dict)  # accepted case id -> runs of the window it covers

    def summary(self) -> str:
        return (
            f"{self.clusters} clusters: {len(self.proposed)} new cases proposed; covered already: "
            f"{len(self.accepted)} by accepted cases, {len(self.waiting)} by pending ones, "
            f"{len(self.rejected)} by rejected ones"
        )

    def lines(self) -> list[str]:
        return [self.summary()] + [
            f"  {case_id} now covers {runs} run{'s' * (runs != 1)}" for case_id, runs in sorted(self.covers.items())
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "clusters": self.clusters,
            "proposed": self.proposed,
            "pending": self.waiting,
            "accepted": self.accepted,
            "rejected": self.rejected,
            "covers": self.covers,
        }


def cluster_note(cluster: Cluster) -> str:
    return (
        f"{NOTE_PREFIX}cluster {cluster.id}: {cluster.size} failing runs from {cluster.first_seen} to "
        f"{cluster.last_seen} ({cluster.trend}, {cluster.previous} in the window before); "
        f"signature: {cluster.key.summary()}"
    )


def harvest_clusters(
    store: Any,
    cases_dir: str | Path,
    *,
    since: Any = None,
    until: Any = None,
    agent: str | None = None,
    config: Config | None = None,
) -> ClusterHarvest:
    """Triage the window (``triage``) and write a pending case for each uncovered cluster."""
    config = config or Config()
    folder = CaseFolder(cases_dir)
    found = triage(store, cases_dir, since=since, until=until, agent=agent, config=config)
    result = ClusterHarvest(clusters=len(found.clusters))
    ids = CaseIds(folder.ids())
    for cluster in found.clusters:
        accepted = [cid for cid, status in cluster.covered.items() if status == "accepted"]
        if accepted:
            result.accepted.append(cluster.id)
        for cid in accepted:
            result.covers[cid] = result.covers.get(cid, 0) + cluster.size
        pending = sorted(cid for cid, status in cluster.covered.items() if status == "pending")
        if pending and not accepted:
            result.waiting[cluster.id] = pending
        if cluster.covered:
            if not accepted and not pending:
                result.rejected.append(cluster.id)
            continue
        assert cluster.example is not None  # a cluster of the window has a run in it
        trace_id, run_id = cluster.example
        run = next(r for r in store.get(trace_id) if r.run_id == run_id)
        case = build_case(run, read_run(run, config, incident=False, forbid=()), config)
        case.id = ids.claim(case.id)
        case.source.cluster = cluster.id
        case.source.seen = cluster.size
        case.review_notes.append(cluster_note(cluster))
        save_case(case, folder.folder_for("pending"))
        result.proposed[case.id] = cluster.id
    return result
