"""A whole store to cases: runs streamed through ``case_from_run``, one case per signature."""

from __future__ import annotations

import difflib
import fnmatch
import heapq
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from .._progress import Progress
from ..canonical import digest
from ..case import NOTE_PREFIX, AgentCase, CaseFolder, CaseIds, case_signatures, load_case, save_case
from ..config import Config
from ..model import Run
from ._case import build_case
from ._kinds import read_run
from ._signature import normalize_prompt, signature_of

__all__ = ["NO_MUTATING_TOOLS", "HarvestResult", "harvest"]

# Said by a harvest whose new cases hold tool calls when the config names no mutating tool: such a case
# has no ``order`` rule and no ``strict_repeats``, so a refund issued twice, or before the lookup, passes.
NO_MUTATING_TOOLS = (
    "no mutating_tools configured: no order rule before a mutating call, no strict_repeats (a second refund "
    'passes); set mutating_tools = ["issue_refund", ...] in harvester.toml and redo these cases '
    "(docs/cases.md#tools-with-side-effects)"
)


@dataclass
class HarvestResult:
    runs: int = 0
    new: int = 0  # cases written
    updated: int = 0  # existing pending cases whose ``seen`` grew
    skipped: int = 0  # runs whose signature belongs to a reviewed (accepted/rejected) case
    counted: int = 0  # runs an earlier harvest already counted in a pending case's ``seen``
    new_ids: list[str] = field(default_factory=list)
    twins: int = 0  # new cases that repeat a reported incident (marked so in the case)
    warnings: list[str] = field(default_factory=list)  # config the store contradicts (a mutating tool no run has)
    notes: list[str] = field(default_factory=list)  # config the new cases lack (no mutating tool named)

    @property
    def cases(self) -> int:
        return self.new + self.updated

    def summary(self) -> str:
        counted = f", {self.counted} already counted" if self.counted else ""
        return (
            f"harvested {self.runs} runs into {self.cases} cases "
            f"(new {self.new}, updated {self.updated}, skipped {self.skipped} reviewed{counted})"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "runs": self.runs,
            "cases": self.cases,
            "new": self.new,
            "updated": self.updated,
            "counted": self.counted,
            "skipped": self.skipped,
            "new_ids": self.new_ids,
            "twins": self.twins,
            "warnings": self.warnings,
            "notes": self.notes,
        }


class _Known:
    """What the cases already in the folder tell a harvest, each file read lightly."""

    def __init__(self, folder: CaseFolder) -> None:
        # signature -> (status, file, last_seen): a run with one of these adds to that case, or is skipped.
        self.index: dict[str, tuple[str, Path, str | None]] = {}
        # The cases' own runs (trace id, run id): a run ``harvester incident`` made into a case has
        # another signature (the incident's failure kind), and must not come back as a new case, nor
        # count again in ``seen``. The run id matters: a trace can hold several runs, each its own case.
        self.runs: set[tuple[str, str]] = set()
        # normalized prompt -> (case id, its forbidden tools) of reported incidents (not rejected).
        self.incidents: dict[str, tuple[str, tuple[str, ...]]] = {}
        for case in case_signatures(folder.root):
            if case.trace_id is not None and case.run_id is not None:
                self.runs.add((case.trace_id, case.run_id))
            for signature in (case.signature, *case.earlier):
                if signature:
                    self.index.setdefault(signature, (case.status, case.path, case.last_seen))
            if case.incident and case.status != "rejected" and case.prompt and case.forbidden:
                self.incidents.setdefault(normalize_prompt(case.prompt), (case.id or case.path.stem, case.forbidden))

    def twin(self, run: Run) -> tuple[str, list[str]] | None:
        """(incident case id, the harmful tools the run executed) when ``run`` repeats a reported
        incident: the same prompt, and a tool that incident forbids executed again."""
        hit = self.incidents.get(normalize_prompt(run.prompt)) if run.prompt else None
        if hit is None:
            return None
        harmful = list(dict.fromkeys(c.name for c in run.calls if c.executed and c.name in hit[1]))
        return (hit[0], harmful) if harmful else None


def _mark_twin(case: AgentCase, incident_id: str, harmful: list[str]) -> None:
    """A harvested run that repeats a reported incident: its harmful calls are forbidden here too."""
    case.appropriate_tools = [t for t in case.appropriate_tools if t not in harmful]
    case.forbidden_tools = list(dict.fromkeys([*case.forbidden_tools, *harmful]))
    case.tags = list(dict.fromkeys([*case.tags, "twin"]))
    case.review_notes.append(
        f"{NOTE_PREFIX}repeats incident case {incident_id} (same prompt; it ran {', '.join(harmful)} again, "
        "which that incident forbids): review it as that incident's twin, or reject it"
    )


def _unmatched_mutating(config: Config, tools: set[str]) -> list[str]:
    """A warning per ``mutating_tools`` name or glob that no tool of the store's runs matches: such a
    name protects nothing (``unauthorised_actions`` cannot see a tool it does not name)."""
    out = []
    for pattern in config.mutating_tools:
        if any(fnmatch.fnmatchcase(t, pattern) for t in tools):
            continue
        words = set(re.findall(r"[a-z0-9]+", pattern.lower()))
        alike = sorted(t for t in tools if words & set(re.findall(r"[a-z0-9]+", t.lower())))
        closest = list(dict.fromkeys([*alike, *difflib.get_close_matches(pattern, sorted(tools), n=3, cutoff=0.5)]))
        hint = f" (closest: {', '.join(closest[:3])})" if closest else ""
        out.append(f"mutating_tools: {pattern!r} matches no tool the harvested runs called{hint}")
    return out


def _sample_priority(run: Run) -> int:
    """A reproducible pseudo-random order, so the same store always yields the same sample."""
    return int(digest([run.trace_id, run.run_id], length=12), 16)


def harvest(
    store: Any,
    cases_dir: str | Path,
    *,
    failed_only: bool = False,
    since: str | datetime | None = None,
    agent: str | None = None,
    limit: int | None = None,
    sample: int | None = None,
    config: Config | None = None,
    progress: Progress | None = None,
) -> HarvestResult:
    """Stream ``store.runs(...)`` into ``cases_dir/pending/``; memory grows with distinct cases, never with runs.

    ``sample=N`` keeps every failed run and a reproducible sample of at most N of the others.
    Runs matching a reviewed case are skipped (its verdict stands); runs matching a pending case or
    an earlier run of this harvest add to that case's ``source.seen`` instead of adding a twin. A
    pending case from an earlier harvest counts only runs that started after its ``last_seen``, so
    harvesting the same store twice counts nothing twice.
    ``progress(done, None)`` is called with the number of runs read so far (every 100 runs and at the end).
    """
    config = config or Config()
    folder = CaseFolder(cases_dir)
    pending_dir = folder.folder_for("pending")
    known = _Known(folder)
    index = known.index
    tools: set[str] = set()  # every tool name the runs called, for the mutating_tools check
    ids = CaseIds(folder.ids())
    extra_seen: dict[Path, tuple[int, str | None]] = {}  # path -> (runs to add, newest start)
    created: set[Path] = set()
    result = HarvestResult()
    reservoir: list[tuple[int, int, Run]] = []  # (-priority, order, run): a max-heap of the N smallest priorities

    def take(run: Run) -> None:
        reading = read_run(run, config, incident=False, forbid=())
        sig = signature_of(run, reading.kind)
        hit = index.get(sig)
        own = (run.trace_id, run.run_id) in known.runs  # a case's own run: counted when it was made
        if hit is not None:
            status, path, last_seen = hit
            if status != "pending":
                result.skipped += 1
            elif not own and (path in created or not (run.started_at and last_seen) or run.started_at > last_seen):
                count, newest = extra_seen.get(path, (0, None))
                extra_seen[path] = (count + 1, max(filter(None, (newest, run.started_at)), default=None))
            else:
                result.counted += 1
            return
        if own:  # already a case under another signature (an incident's)
            result.counted += 1
            return
        case = build_case(run, reading, config)
        twin = known.twin(run)
        if twin is not None:
            _mark_twin(case, *twin)
            result.twins += 1
        case.id = ids.claim(case.id)
        path = save_case(case, pending_dir)
        index[sig] = ("pending", path, run.started_at)
        created.add(path)
        result.new += 1
        result.new_ids.append(case.id)
        if case.fixtures and not config.mutating_tools and NO_MUTATING_TOOLS not in result.notes:
            result.notes.append(NO_MUTATING_TOOLS)

    runs = store.runs(failed=True if failed_only else None, agent=agent, since=since, limit=limit)
    for n, run in enumerate(runs, 1):
        result.runs = n
        tools.update(c.name for c in run.calls)
        if progress is not None and n % 100 == 0:
            progress(n, None)
        if sample is not None and not failed_only and not run.failed:
            entry = (-_sample_priority(run), n, run)
            if len(reservoir) < sample:
                heapq.heappush(reservoir, entry)
            elif reservoir and entry > reservoir[0]:
                heapq.heapreplace(reservoir, entry)
            continue
        take(run)
    for _, _, run in sorted(reservoir, reverse=True):
        take(run)
    if result.runs:
        result.warnings += _unmatched_mutating(config, tools)
    if progress is not None:
        progress(result.runs, None)
    for path, (count, newest) in extra_seen.items():
        case = load_case(path)
        case.source.seen += count
        case.source.last_seen = max(filter(None, (case.source.last_seen, newest)), default=None)
        save_case(case, path.parent)
        if path not in created:
            result.updated += 1
    return result
