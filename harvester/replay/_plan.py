"""The plan: which cases a replay runs, in order, each a small record until its turn comes.

A case read from a folder (a ``CaseFile``) is planned from the read that validated it, and read again
from its file when it runs: planning 10,000 cases holds 10,000 records, not 10,000 cases. A case handed
in memory (an ``AgentCase`` or a ``Case``) is held as given.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..case import AgentCase, Case, CaseFile, InjectSpec, Source, load_case
from ..fixtures import MODES
from ..suite import SuiteContent
from ._evaluate import variant_case

__all__ = ["FolderPlan", "Planned", "in_shard", "plan", "plan_folder", "recovery_variants"]


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
    judges: tuple[str, ...]  # the judges its case names
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

    def release(self) -> None:
        """Let go of a case read from a file once its result is on disk: the plan stays a small record a
        case however long the replay (a case handed in memory is the caller's, kept)."""
        if self.file is not None:
            self.held = None


def plan(
    cases: Iterable[AgentCase | Case | CaseFile | Planned], inject: bool, shard: tuple[int, int] | None
) -> list[Planned]:
    """The runnable cases in run order, each recovery variant after its case; an entry planned already
    (a command that planned while it read the folder) is taken as it is."""
    if shard is not None and not (
        len(shard) == 2 and all(isinstance(x, int) for x in shard) and 1 <= shard[0] <= shard[1]
    ):
        raise ValueError(f"shard must be (i, n) with 1 <= i <= n, got {shard!r}")
    out: list[Planned] = []
    for item in cases:
        if isinstance(item, Planned):
            out.append(item)
            continue
        file = (item.path, item.max_bytes) if isinstance(item, CaseFile) else None
        runnable = item.to_case() if isinstance(item, AgentCase) else item if isinstance(item, Case) else None
        spec = item.case if isinstance(item, CaseFile) else runnable.spec if runnable is not None else None
        case_id = spec.id if spec is not None else runnable.id if runnable is not None else ""
        if shard is not None and not in_shard(case_id, shard):
            continue
        hosts = tuple(spec.recorded.model_hosts) if spec is not None else ()
        instrumentation = tuple(spec.recorded.instrumentation) if spec is not None else ()
        judges = tuple(spec.judges) if spec is not None else ()
        out.append(Planned(case_id, None, hosts, instrumentation, judges, runnable, file))
        if inject and spec is not None:
            variants = recovery_variants(spec)
            out.extend(
                Planned(
                    v.id, case_id, hosts, instrumentation, judges, variant_case(v) if file is None else None, file, k
                )
                for k, v in enumerate(variants)
            )
    return out


@dataclass
class FolderPlan:
    """A folder's accepted cases read once: the plan, the suite's content (hash, count), and what else
    a command asked to keep of them."""

    planned: list[Planned] = field(default_factory=list)
    content: SuiteContent = field(default_factory=SuiteContent)
    sources: dict[str, Source] = field(default_factory=dict)  # case id -> its production run's source
    held: list[AgentCase] = field(default_factory=list)  # the cases naming judges (``every``: all of them)


def plan_folder(
    files: Iterable[CaseFile],
    inject: bool,
    shard: tuple[int, int] | None,
    *,
    sources: bool = False,
    every: bool = False,
) -> FolderPlan:
    """``plan`` of ``files`` (``CaseFolder.each_accepted``), the suite hash taken from the same read.

    ``sources``: keep each case's ``source`` (the production run exported verdicts link to). The cases
    naming judges are kept whole (their panel is built before anything runs); ``every``: every case is
    (``--sandbox`` checks its tools against all of them).
    """
    out = FolderPlan()
    for file in files:
        out.content.add(file.case)
        out.planned += plan([file], inject, shard)
        if sources:
            out.sources[file.case.id] = file.case.source
        if every or file.case.judges:
            out.held.append(file.case)
    return out


def recovery_variants(case: AgentCase, modes: tuple[str, ...] = MODES) -> list[AgentCase]:
    """One copy of ``case`` per failure mode on its first appropriate tool: ``<id>@<mode>``.

    A variant is tagged ``recovery`` and ``recovery/<mode>`` and nothing else: it checks recovery, not
    what the base case's tags promise (a ``tag:security>=1.0`` gate must not count broken-tool runs).
    The tool is the first of ``appropriate_tools``, else the first recorded call; a case that used no
    tool has nothing to break and gets no variants.
    """
    tool = next(iter(case.appropriate_tools or case.recorded.trajectory or [f.tool for f in case.fixtures]), None)
    if tool is None:
        return []
    return [
        case.model_copy(
            update={
                "id": f"{case.id}@{mode}",
                "inject_failures": {tool: InjectSpec(mode=mode)},
                "tags": ["recovery", f"recovery/{mode}"],
            }
        )
        for mode in modes
    ]
