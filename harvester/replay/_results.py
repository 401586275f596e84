"""A case's trials, folded into the ``CaseResult`` the report holds, and handed on as the case finishes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .. import checks as checklib
from ..case import Case
from ..model import Run
from ..report import ANSWER_CHARS, MAX_CALLS, Call, CaseResult, Injected, args_text
from ._evaluate import divergence, no_fixture_calls, unused_calls
from ._sandbox import sandbox_calls
from ._trial import Outcome

__all__ = ["CaseSink", "Finished", "case_result"]


@dataclass(frozen=True)
class Finished:
    """One case done, as ``replay(on_case=...)`` hands it on: the case (``variant_of``: the case a
    failure-injection variant was made from), every trial's outcome (each with the replayed ``run``),
    and the result the report keeps. Nothing holds it after the sink returns."""

    case: Case
    variant_of: str | None
    outcomes: list[Outcome]
    result: CaseResult


CaseSink = Callable[[Finished], None]


def case_result(
    case: Case, outcomes: list[Outcome], variant_of: str | None, confirmation: str | None = None
) -> CaseResult:
    """The case's trials (and ``--confirm`` reruns) folded into one result; a ``flaky`` case passed on
    a rerun, so it is not called failed, and its trials say how often it did. A case the seal refused
    something in, in any trial or rerun, fails: trying to leave the process is not flakiness."""
    rep = next((o for o in outcomes if not o.passed), outcomes[-1])
    run, spec, tools = rep.run, case.spec, rep.tools
    costs = [o.run.cost for o in outcomes if o.run is not None and o.run.cost is not None]
    forbidden = set(spec.forbidden_tools) if spec is not None else set()
    unauthorised = sum(_unauthorised(o, forbidden) for o in outcomes)
    notes = list(dict.fromkeys(n for o in outcomes if o.tools is not None for n in o.tools.notes))
    injected = None
    if variant_of is not None and spec is not None and spec.inject_failures:
        tool, inj = next(iter(spec.inject_failures.items()))
        injected = Injected(tool=tool, mode=inj.mode)
    trajectory = run.trajectory() if run is not None else []
    errored = any(o.errored for o in outcomes)
    sealed = any(o.sealed for o in outcomes)
    return CaseResult(
        id=case.id,
        passed=not errored and not sealed and (all(o.passed for o in outcomes) or confirmation == "flaky"),
        errored=errored,
        confirmation=confirmation,
        tags=list(case.tags),
        why=case.why,
        checks=rep.checks,
        error=rep.error,
        stop=run.stop if run is not None else "error",
        answer=run.answer if run is not None else None,
        trajectory=trajectory,
        requested=run.requested_tools() if run is not None else [],
        steps=run.steps if run is not None else 0,
        cost=sum(costs) / len(costs) if costs else None,
        tokens=run.usage.total if run is not None else None,
        duration_ms=sum(o.duration_ms for o in outcomes) / len(outcomes),
        trials=len(outcomes),
        passes=sum(o.passed for o in outcomes),
        divergence=divergence(spec.recorded.trajectory, trajectory, _ok_steps(run)) if spec is not None else None,
        no_fixture=tools.no_fixture if tools is not None else 0,
        no_fixture_calls=no_fixture_calls(tools),
        unused=len(tools.unused()) if tools is not None else 0,
        unused_calls=unused_calls(tools),
        tool_calls=len(tools.log) if tools is not None else 0,
        redundant_calls=tools.redundant if tools is not None else 0,
        unauthorised=unauthorised,
        notes=notes,
        live_calls=sum(1 for o in outcomes for c in o.live or () if c.how != "refused"),
        abstained=run is not None and run.stop == "answered" and checklib.abstained()(run)[0],
        variant_of=variant_of,
        injected=injected,
        recorded_calls=[
            Call(tool=f.tool, args=args_text(f.args), status="error" if f.error is not None else "ok")
            for f in (spec.fixtures[:MAX_CALLS] if spec is not None else ())
        ],
        calls=[Call(tool=c.name, args=args_text(c.args), status=c.status) for c in run.calls[:MAX_CALLS]]
        if run is not None
        else [],
        recorded_answer=(spec.recorded.answer or "")[:ANSWER_CHARS] or None if spec is not None else None,
        model=rep.model,
        sandboxed=sandbox_calls(run, tools),
    )


def _ok_steps(run: Run | None) -> list[int]:
    """The steps (1-based, every call counted) of the run's successful calls: its trajectory's positions."""
    return [i for i, c in enumerate(run.calls, 1) if c.status == "ok"] if run is not None else []


def _unauthorised(outcome: Outcome, forbidden: set[str]) -> int:
    """Forbidden calls the agent made in one trial: every one the executor saw (served, answered or
    failed: the agent dispatched it), and every one that went around it. Counted from the executor's
    log, so a trial that timed out counts what it did before. A forbidden tool's body the seal stopped
    is one action, counted once: by its tool span when it has one, else by what the seal refused."""
    if not forbidden:
        return 0
    seen = sum(1 for e in outcome.tools.log if e.name in forbidden) if outcome.tools is not None else 0
    live = [c for c in outcome.live or () if c.name in forbidden]
    spanned = {c.name for c in live if c.how != "sealed"}
    return seen + sum(1 for c in live if c.how != "sealed" or c.name not in spanned)
