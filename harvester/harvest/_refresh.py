"""Refreshing a stale case from a newer run: new fixtures and recording, the reviewer's decisions kept.

A case goes stale when the agent legitimately changes how it works (a new tool, other arguments): its
replay then meets calls the recording cannot answer. Re-harvesting would make a new pending case and
lose what the reviewer decided; ``rerecord`` instead takes the recording from the new run (fixtures,
model fixtures (so an older case gains them), ``recorded``, ``min_steps``, ``appropriate_tools``,
``max_cost``, the source) and keeps every field a reviewer owns: ``why``, ``status``, ``tags``,
``checks``, ``required_elements``, ``expected``, ``forbidden_tools``, ``ignore_args``,
``strict_consumption``, ``inject_failures``, ``rejected_why``; each harvested check
(``checks.HARVESTED``: the trajectory check, ``order``) keeps the reviewer's edits its own way,
against the new recording (its ``refresh``). ``strict_repeats`` is kept as ``order`` is: the
reviewer's (``true``, or the tools listed) plus the new recording's mutating tools it does not name,
so a case harvested before ``mutating_tools`` was configured (``false``, the default then) gains them.
A tool the case forbids is never what it expects: a newer run that executed one still gets a fixture
for it, but not a place in ``appropriate_tools``, ``min_steps`` or a harvested check.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from .. import checks as checklib
from ..canonical import canonical_json
from ..case import AgentCase, CaseFolder
from ..config import Config
from ..errors import InputError
from ..model import Run
from ..store import epoch
from ._case import case_from_run
from ._kinds import failure_kind
from ._signature import normalize_prompt

__all__ = ["Refreshed", "matching_runs", "refresh", "rerecord", "same_situation"]

_KEPT = (
    "why",
    "status",
    "tags",
    "checks",
    "required_elements",
    "expected",
    "forbidden_tools",
    "ignore_args",
    "strict_consumption",
    "inject_failures",
    "rejected_why",
)
_REFRESHED = ("fixtures", "model_fixtures", "recorded", "min_steps", "appropriate_tools", "max_cost", "review_notes")


class Refreshed(NamedTuple):
    """The refreshed case and what changed, one line each (empty: the new run recorded the same)."""

    case: AgentCase
    changes: list[str]


def _same_agent(case: AgentCase, run: Run) -> bool:
    """The run is of the case's agent (or one of them does not say)."""
    return not (case.source.agent and run.agent) or case.source.agent == run.agent


def same_situation(case: AgentCase, run: Run) -> bool:
    """``run`` could be rerecorded into ``case``: the same agent and the same normalized prompt."""
    return _same_agent(case, run) and normalize_prompt(run.prompt) == normalize_prompt(case.prompt)


def rerecord(case: AgentCase, run: Run, *, config: Config | None = None) -> Refreshed:
    """``case`` with its recording taken from ``run``; an ``InputError`` when ``run`` is not a run of
    the same situation (another agent, or another prompt)."""
    if not _same_agent(case, run):
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
    # the case's forbidden tools are the reviewer's: what the new run did with them is not what it needed
    fresh = case_from_run(run, config=config, incident=case.source.incident, forbid=case.forbidden_tools)
    data = fresh.model_dump(by_alias=True)
    old = case.model_dump(by_alias=True)
    for name in _KEPT:
        data[name] = old[name]
    data["strict_repeats"] = _strict_repeats(case.strict_repeats, fresh.strict_repeats)
    data["id"] = case.id
    # the refreshed case's recording: the new run's calls, the reviewer's forbidden tools and ignored args
    recording = checklib.Recording(fresh.fixtures, fresh.recorded.trajectory, case.forbidden_tools, case.ignore_args)
    for check in checklib.HARVESTED:
        kept = check.refresh(case.held(check), fresh.held(check), recording)
        data.update(checklib.placed(check, data, kept))
    seen = case.source.seen + (0 if (run.trace_id, run.run_id) == (case.source.trace_id, case.source.run_id) else 1)
    earlier = list(case.source.earlier_signatures)
    if case.source.signature and case.source.signature != data["source"]["signature"]:
        earlier.append(case.source.signature)  # runs of the old path stay this case's on a re-harvest
    earlier = [s for s in dict.fromkeys(earlier) if s != data["source"]["signature"]]
    data["source"] = {**data["source"], "seen": seen, "earlier_signatures": earlier}
    new = AgentCase.model_validate(data)
    return Refreshed(new, _changes(case, new))


def _strict_repeats(reviewed: bool | list[str], fresh: bool | list[str]) -> bool | list[str]:
    """The reviewer's ``strict_repeats`` and the new recording's mutating tools it does not name, as
    ``order`` keeps the reviewer's rules and adds the new recording's: ``true`` stays (every tool held),
    and ``false`` cannot tell a reviewer's choice from the default of a config without
    ``mutating_tools``, so it takes the new recording's list (still ``false`` when that has none)."""
    if reviewed is True:
        return True
    kept = list(reviewed or [])
    proposed = fresh if isinstance(fresh, list) else []
    return kept + [tool for tool in proposed if tool not in kept] or False


def _changes(old: AgentCase, new: AgentCase) -> list[str]:
    out = []
    if old.recorded.trajectory != new.recorded.trajectory:
        was, now = " -> ".join(old.recorded.trajectory) or "(none)", " -> ".join(new.recorded.trajectory) or "(none)"
        out.append(f"trajectory: {was}  =>  {now}")
    before = {(f.tool, canonical_json(f.args)) for f in old.fixtures}
    after = {(f.tool, canonical_json(f.args)) for f in new.fixtures}
    out += [f"+ fixture {tool}({args})" for tool, args in sorted(after - before)]
    out += [f"- fixture {tool}({args})" for tool, args in sorted(before - after)]
    was_served, now_served = _outcomes(old), _outcomes(new)
    out += [
        f"~ fixture {tool}({args}): result changed"
        for tool, args in sorted(before & after)
        if was_served[tool, args] != now_served[tool, args]
    ]
    if old.recorded.stop != new.recorded.stop:
        out.append(f"stop: {old.recorded.stop}  =>  {new.recorded.stop}")
    for check in checklib.HARVESTED:
        out += check.changes(old.held(check), new.held(check))
    if old.strict_repeats != new.strict_repeats:
        out.append(f"strict_repeats: {old.strict_repeats!r}  =>  {new.strict_repeats!r}")
    if old.model_fixtures != new.model_fixtures:
        out.append(f"model fixtures: {len(old.model_fixtures)} turns  =>  {len(new.model_fixtures)} turns")
    for name in _REFRESHED[3:]:
        was, now = getattr(old, name), getattr(new, name)
        if was != now:
            out.append(f"{name}: {was!r}  =>  {now!r}")
    if old.recorded.answer != new.recorded.answer:
        out.append(f"answer: {(old.recorded.answer or '')[:60]!r}  =>  {(new.recorded.answer or '')[:60]!r}")
    return out


def _outcomes(case: AgentCase) -> dict[tuple[str, str], list[str]]:
    """What each recorded call served (its result or its error), in order, by (tool, canonical args)."""
    out: dict[tuple[str, str], list[str]] = {}
    for f in case.fixtures:
        served = canonical_json({"result": f.result, "error": f.error.model_dump() if f.error else None})
        out.setdefault((f.tool, canonical_json(f.args)), []).append(served)
    return out


def _started_after(started: str, last: str) -> bool:
    """``started`` is a later time than ``last`` (ISO times: ``Z`` or an offset, any precision)."""
    a, b = epoch(started), epoch(last)
    return a > b if a is not None and b is not None else started > last


def matching_runs(
    runs: Iterable[Run], cases: Iterable[AgentCase], *, config: Config | None = None
) -> Iterator[tuple[AgentCase, Run]]:
    """(case, the newest run of its situation that started after its recording) for each case that has
    one: same agent, same normalized prompt, same failure kind. ``runs`` newest first, as
    ``TraceStore.runs()`` streams them.

    The failure kind is what a case protects against: a regression case (a tool that timed out) is not
    refreshed from a run where nothing failed, nor a typical case from a night of timeouts. One prompt
    may have several cases (a typical one and a failure); a run that retraces one's recorded path is
    that case's, else it goes to the first of its kind."""
    config = config or Config()
    wanted: dict[tuple[str | None, str], list[AgentCase]] = {}
    for case in cases:
        wanted.setdefault((case.source.agent, normalize_prompt(case.prompt)), []).append(case)
    for run in runs:
        if not wanted:
            return
        prompt = normalize_prompt(run.prompt)
        key = (run.agent, prompt) if (run.agent, prompt) in wanted else (None, prompt)
        waiting = wanted.get(key, [])
        fits = []
        for case in list(waiting):
            if (run.trace_id, run.run_id) == (case.source.trace_id, case.source.run_id):
                waiting.remove(case)  # its own run: nothing newer is left in the store
            elif _newer(run, case) and _kind(run, case, config) == case.source.failure_kind:
                fits.append(case)
        if fits:
            trajectory = run.trajectory()
            case = next((c for c in fits if c.recorded.trajectory == trajectory), fits[0])
            waiting.remove(case)
            yield case, run
        if key in wanted and not waiting:
            del wanted[key]


def _newer(run: Run, case: AgentCase) -> bool:
    """``run`` started after the newest run the case counts (a run or a case without a time: yes)."""
    last = case.source.last_seen or case.source.captured_at
    return not (last and run.started_at) or _started_after(run.started_at, last)


def _kind(run: Run, case: AgentCase, config: Config) -> str | None:
    """``run``'s failure kind read as the case's was (an incident's, with the tools it forbids)."""
    return failure_kind(run, config=config, incident=case.source.incident, forbid=case.forbidden_tools)


def refresh(store: Any, cases_dir: Any, *, config: Config | None = None) -> list[Refreshed]:
    """Every accepted case with a newer run of its situation (``matching_runs``) in ``store``, rerecorded
    from that run and saved; a case the newest run left unchanged is not rewritten (nor returned)."""
    folder = CaseFolder(cases_dir)
    accepted = [f.case for f in folder.each_accepted(required=False)] if folder.root.is_dir() else []
    done = []
    for case, run in matching_runs(store.runs(newest_first=True), accepted, config=config):
        refreshed = rerecord(case, run, config=config)
        if refreshed.changes:
            folder.save(refreshed.case)
            done.append(refreshed)
    return done
