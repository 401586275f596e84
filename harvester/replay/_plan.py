"""The plan: which cases a replay runs, in order, each a small record until its turn comes.

A case read from a folder (a ``CaseFile``) is planned from the read that validated it, and read again
from its file when it runs: planning 10,000 cases holds 10,000 records, not 10,000 cases. A case handed
in memory (an ``AgentCase`` or a ``Case``) is held as given.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..case import AgentCase, Case, CaseFile, load_case
from ..fixtures import recovery_variants
from ._evaluate import variant_case

__all__ = ["Planned", "in_shard", "plan"]


def in_shard(case_id: str, shard: tuple[int, int]) -> bool:
    """Stable split by case id: shard ``(i, n)``, ``1 <= i <= n``, holds the ids whose hash is i-1 mod n."""
    i, n = shard
    return int(hashlib.sha256(case_id.encode()).hexdigest()[:12], 16) % n == i - 1


@dataclass
class Planned:
    """One runnable case of the plan: what the suite needs before anything runs (its recording's model
    hosts and instrumentation), and the case, made when it is first asked for."""

    id: str
    variant_of: str | None  # the id of the case this is a recovery variant of
    model_hosts: tuple[str, ...]
    instrumentation: tuple[str, ...]
    held: Case | None = None  # the runnable case, once made (at once for a case handed in memory)
    file: tuple[Path, int] | None = None  # (path, size limit) of a case read from a folder
    variant: int = 0  # which of ``recovery_variants`` of the case, for a variant read from a file

    def case(self) -> Case:
        """The runnable case: the one handed in, or its file read (and checked) again, then kept."""
        if self.held is None:
            assert self.file is not None
            spec = load_case(self.file[0], max_bytes=self.file[1])
            self.held = variant_case(recovery_variants(spec)[self.variant]) if self.variant_of else spec.to_case()
        return self.held


def plan(cases: Iterable[AgentCase | Case | CaseFile], inject: bool, shard: tuple[int, int] | None) -> list[Planned]:
    """The runnable cases in run order, each recovery variant after its case."""
    if shard is not None and not (
        len(shard) == 2 and all(isinstance(x, int) for x in shard) and 1 <= shard[0] <= shard[1]
    ):
        raise ValueError(f"shard must be (i, n) with 1 <= i <= n, got {shard!r}")
    out: list[Planned] = []
    for item in cases:
        file = (item.path, item.max_bytes) if isinstance(item, CaseFile) else None
        runnable = item.to_case() if isinstance(item, AgentCase) else item if isinstance(item, Case) else None
        spec = item.case if isinstance(item, CaseFile) else runnable.spec if runnable is not None else None
        case_id = spec.id if spec is not None else runnable.id if runnable is not None else ""
        if shard is not None and not in_shard(case_id, shard):
            continue
        hosts = tuple(spec.recorded.model_hosts) if spec is not None else ()
        instrumentation = tuple(spec.recorded.instrumentation) if spec is not None else ()
        out.append(Planned(case_id, None, hosts, instrumentation, runnable, file))
        if inject and spec is not None:
            variants = recovery_variants(spec)
            out.extend(
                Planned(v.id, case_id, hosts, instrumentation, variant_case(v) if file is None else None, file, k)
                for k, v in enumerate(variants)
            )
    return out
