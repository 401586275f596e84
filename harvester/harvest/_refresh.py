"""Refreshing a stale case from a newer run: new fixtures and recording, the reviewer's decisions kept.

A case goes stale when the agent legitimately changes how it works (a new tool, other arguments): its
replay then meets calls the recording cannot answer. Re-harvesting would make a new pending case and
lose what the reviewer decided; ``rerecord`` instead takes the recording from the new run (fixtures,
``recorded``, ``min_steps``, ``appropriate_tools``, ``max_cost``, the source) and keeps every field a
reviewer owns: ``why``, ``status``, ``tags``, ``checks``, ``required_elements``, ``expected``,
``forbidden_tools``, ``ignore_args``, ``strict_repeats``, ``strict_consumption``, ``inject_failures``.
A ``trajectory_match`` check keeps its mode and args, and takes its reference from the new run.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from ..canonical import canonical_json
from ..case import AgentCase, CaseFolder, load_cases
from ..config import Config
from ..errors import InputError
from ..model import Run
from ._case import case_from_run
from ._signature import normalize_prompt

__all__ = ["Refreshed", "matching_runs", "refresh", "rerecord"]

_KEPT = (
    "why",
    "status",
    "tags",
    "checks",
    "required_elements",
    "expected",
    "forbidden_tools",
    "ignore_args",
    "strict_repeats",
    "strict_consumption",
    "inject_failures",
    "history",
)
_REFRESHED = ("fixtures", "recorded", "min_steps", "appropriate_tools", "max_cost", "review_notes")


class Refreshed(NamedTuple):
    """The refreshed case and what changed, one line each (empty: the new run recorded the same)."""

    case: AgentCase
    changes: list[str]


def rerecord(case: AgentCase, run: Run, *, config: Config | None = None) -> Refreshed:
    """``case`` with its recording taken from ``run``; an ``InputError`` when ``run`` is not a run of
    the same situation (another agent, or another prompt)."""
    if case.source.agent and run.agent and case.source.agent != run.agent:
        raise InputError(
            f"trace {run.trace_id[:12]} is a run of agent {run.agent!r}, case {case.id!r} is of {case.source.agent!r}",
            field="--trace",
        )
    if normalize_prompt(run.prompt) != normalize_prompt(case.prompt):
        raise InputError(
            f"trace {run.trace_id[:12]} answers another prompt ({(run.prompt or '')[:60]!r}, the case's is "
            f"{case.prompt[:60]!r})",
            field="--trace",
        )
    fresh = case_from_run(run, config=config, incident=case.source.incident)
    data = fresh.model_dump(by_alias=True)
    old = case.model_dump(by_alias=True)
    for name in _KEPT:
        if name in old:
            data[name] = old[name]
    data["id"] = case.id
    data["checks"] = [_refreshed_check(c, fresh) for c in old["checks"]]
    seen = case.source.seen + (0 if (run.trace_id, run.run_id) == (case.source.trace_id, case.source.run_id) else 1)
    data["source"] = {**data["source"], "seen": seen}
    new = AgentCase.model_validate(data)
    return Refreshed(new, _changes(case, new))


def _refreshed_check(spec: dict[str, Any], fresh: AgentCase) -> dict[str, Any]:
    """A reviewer's check, kept; a trajectory check's reference is the new recording's (mode kept)."""
    if spec.get("check") == "trajectory_match":
        return {**spec, "reference": [{"name": f.tool, "args": f.args} for f in fresh.fixtures if f.error is None]}
    return spec


def _changes(old: AgentCase, new: AgentCase) -> list[str]:
    out = []
    if old.recorded.trajectory != new.recorded.trajectory:
        was, now = " -> ".join(old.recorded.trajectory) or "(none)", " -> ".join(new.recorded.trajectory) or "(none)"
        out.append(f"trajectory: {was}  =>  {now}")
    before = {(f.tool, canonical_json(f.args)) for f in old.fixtures}
    after = {(f.tool, canonical_json(f.args)) for f in new.fixtures}
    out += [f"+ fixture {tool}({args})" for tool, args in sorted(after - before)]
    out += [f"- fixture {tool}({args})" for tool, args in sorted(before - after)]
    for name in _REFRESHED[2:]:
        was, now = getattr(old, name), getattr(new, name)
        if was != now:
            out.append(f"{name}: {was!r}  =>  {now!r}")
    if old.recorded.answer != new.recorded.answer:
        out.append(f"answer: {(old.recorded.answer or '')[:60]!r}  =>  {(new.recorded.answer or '')[:60]!r}")
    for c in new.checks:
        if c.get("check") == "trajectory_match" and c not in old.checks:
            out.append(f"trajectory_match reference: {len(c.get('reference') or [])} calls (mode kept)")
    return out


def matching_runs(runs: Iterable[Run], cases: Iterable[AgentCase]) -> Iterator[tuple[AgentCase, Run]]:
    """(case, the newest run of its situation that started after its recording) for each case that has
    one: same agent, same normalized prompt. ``runs`` newest first, as ``TraceStore.runs()`` streams them."""
    wanted: dict[tuple[str | None, str], AgentCase] = {}
    for case in cases:
        wanted.setdefault((case.source.agent, normalize_prompt(case.prompt)), case)
    for run in runs:
        if not wanted:
            return
        prompt = normalize_prompt(run.prompt)
        found = wanted.get((run.agent, prompt)) or wanted.get((None, prompt))
        if found is None:
            continue
        case = found
        last = case.source.last_seen or case.source.captured_at
        if (run.trace_id, run.run_id) == (case.source.trace_id, case.source.run_id):
            del wanted[(case.source.agent, normalize_prompt(case.prompt))]  # its own run: nothing newer
            continue
        if last and run.started_at and run.started_at <= last:
            continue
        del wanted[(case.source.agent, normalize_prompt(case.prompt))]
        yield case, run


def refresh(store: Any, cases_dir: Any, *, config: Config | None = None) -> list[Refreshed]:
    """Every accepted case with a newer run of its situation in ``store``, rerecorded from that run
    and saved; a case the newest run left unchanged is not rewritten (nor returned)."""
    folder = CaseFolder(cases_dir)
    accepted = load_cases(folder.root, status="accepted") if folder.root.is_dir() else []
    done = []
    for case, run in matching_runs(store.runs(newest_first=True), accepted):
        refreshed = rerecord(case, run, config=config)
        if refreshed.changes:
            folder.save(refreshed.case)
            done.append(refreshed)
    return done
