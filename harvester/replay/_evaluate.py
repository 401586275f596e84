"""Judging a replayed run: the case's checks, the judge, the recording's own checks (calls it cannot
answer, the first step off its path), and the recovery variants' checks."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .. import checks as checklib
from ..canonical import canonical_json
from ..case import AgentCase, Case
from ..fixtures import FixtureTools
from ..model import Run
from ..report import MAX_NO_FIXTURE_CALLS, CheckResult, Divergence, NoFixtureCall

__all__ = [
    "recordings_consumed",
    "unused_calls",
    "Judge",
    "divergence",
    "evaluate",
    "judged",
    "no_fixture_calls",
    "recorded_calls_only",
    "recovered",
    "variant_case",
]

Judge = Callable[[Case, Run], "tuple[bool, str]"]
_KEPT_IN_VARIANTS = ("never_used", "max_steps")  # of a case's own checks, those a recovery variant keeps


def evaluate(case: Case, run: Run, judge: Judge | None = None) -> list[CheckResult]:
    """The case's checks in order (mechanical, structural: ``to_case`` put them so), then the judge.

    The judge is the expensive one, so it only runs when every cheap check passed.
    """
    out = []
    for check in case.checks:
        passed, detail = checklib.run_check(check, run)
        out.append(CheckResult(name=checklib.label(check), passed=passed, detail=detail))
    if judge is not None and all(c.passed is not False for c in out):
        passed, detail = checklib.run_check(lambda r: judge(case, r), run)
        out.append(CheckResult(name="judge", passed=passed, detail=detail))
    return out


def judged(case: Case, run: Run, panel: checklib.Panel | None, checks: Sequence[CheckResult]) -> list[CheckResult]:
    """The case's named judges, ``judge:NAME`` each, run last: only when the run has an answer (not an
    error, not a deferred run waiting on approval) and every other check passed (a judge is the
    expensive check, and judging a wrong path's answer tells nothing). A recovery variant is not judged:
    its tool is broken on purpose, so the expected answer may be out of reach. Without a panel
    (``--no-judges``, a library replay without judges) none runs."""
    spec = case.spec
    if panel is None or panel.skipped or spec is None or not spec.judges or spec.inject_failures:
        return []
    if run.answer is None or any(c.passed is False for c in checks):
        return []
    subject = checklib.Subject.of(spec, run)
    out = []
    for name in spec.judges:
        passed, reason = panel.verdict(name, subject)
        out.append(CheckResult(name=f"judge:{name}", passed=passed, detail=reason))
    return out


def recovered() -> checklib.Check:
    """A failure-injection variant ended properly: it answered (or abstained), not error, loop or budget."""

    def fn(run: Run) -> tuple[bool, str]:
        if run.stop != "answered":
            err = f" ({run.error.type}: {run.error.message})" if run.error else ""
            return False, f"stopped with {run.stop}{err}"
        abstain, _ = checklib.abstained()(run)
        return True, "abstained" if abstain else "answered"

    return checklib.Check("recovered", fn)


def variant_case(spec: AgentCase) -> Case:
    """A recovery variant's checks: no forbidden action, within the step bound, ended properly.

    The forbidden tools and the step bound are the case's own (``AgentCase.auto_checks``, where the
    bound is made from ``min_steps``). The answer-content checks of the base case are dropped: with a
    tool broken on purpose the right answer is often unavailable, and saying so is a recovery.
    """
    checks = [c for c in spec.auto_checks() if c.name in _KEPT_IN_VARIANTS]
    checks.append(recovered())
    tool = next(iter(spec.inject_failures))
    return Case(
        id=spec.id,
        task=spec.prompt,
        checks=checks,
        tags=list(spec.tags),
        why=f"recovers when {tool} fails ({spec.why or 'no why recorded'})",
        spec=spec,
    )


def divergence(recorded: Sequence[str], actual: Sequence[str], ok_steps: Sequence[int] = ()) -> Divergence | None:
    """Where the replayed trajectory (its successful calls) first leaves the recorded one; None when
    they agree. ``ok_steps`` are the successful calls' steps in the run (1-based positions among every
    call, whatever its status), so "step 3" means the run's third tool call in every line of a report,
    as in ``never_used``'s "executed at step 3"; without them, the position in the trajectory."""

    def step(i: int) -> int:
        if not ok_steps:
            return i + 1
        return ok_steps[i] if i < len(ok_steps) else ok_steps[-1] + 1

    for i, (a, b) in enumerate(zip(recorded, actual)):
        if a != b:
            return Divergence(step=step(i), recorded=a, actual=b)
    if len(recorded) == len(actual):
        return None
    i = min(len(recorded), len(actual))
    return Divergence(
        step=step(i), recorded=recorded[i] if i < len(recorded) else None, actual=actual[i] if i < len(actual) else None
    )


def no_fixture_calls(tools: FixtureTools | None) -> list[NoFixtureCall]:
    """The first few unanswered calls: tool, reason, the args sent, and the closest recording and where it differs."""
    out = []
    for entry in tools.log if tools is not None else ():
        missing = entry.missing
        if missing is None:
            continue
        closest = missing["closest"][0] if missing["closest"] else None
        differs = closest["differs"] if closest is not None and missing["reason"] == "no_match" else []
        out.append(
            NoFixtureCall(
                tool=entry.name,
                reason=missing["reason"],
                differs=list(differs),
                args=entry.args,
                closest=closest["args"] if closest is not None else None,
            )
        )
        if len(out) == MAX_NO_FIXTURE_CALLS:
            break
    return out


def unused_calls(tools: FixtureTools | None) -> list[str]:
    """The recorded calls the replay never made, as ``tool(args)`` (the first MAX_NO_FIXTURE_CALLS)."""
    if tools is None:
        return []
    return [_call_text(fx.tool, fx.args) for fx in tools.unused()[:MAX_NO_FIXTURE_CALLS]]


def _call_text(tool: str, args: object) -> str:
    text = canonical_json(args) if args is not None else ""
    return f"{tool}({text if len(text) <= 80 else text[:77] + '...'})"


def recordings_consumed(case: Case, tools: FixtureTools | None) -> CheckResult | None:
    """A failed check when a ``strict_consumption`` case leaves recorded calls unmade (None otherwise).

    Recovery variants are exempt: with a tool broken on purpose, the rest of the recording may go unused.
    A recorded call of a tool the case forbids is never demanded back: not making it is what the case
    wants (an incident's recording holds the harmful call), so only the report lists it.
    """
    spec = case.spec
    if tools is None or spec is None or not spec.strict_consumption or spec.inject_failures:
        return None
    forbidden = set(spec.forbidden_tools)
    unused = [fx for fx in tools.unused() if fx.tool not in forbidden]
    if not unused:
        left = [fx.tool for fx in tools.unused()]  # all of forbidden tools
        calls = f"{len(left)} call{'s' * (len(left) != 1)}"
        but = f", except {calls} of a forbidden tool ({', '.join(dict.fromkeys(left))})" if left else ""
        return CheckResult(name="recordings_consumed", passed=True, detail=f"every recorded call was made{but}")
    shown = "; ".join(_call_text(fx.tool, fx.args) for fx in unused[:MAX_NO_FIXTURE_CALLS])
    more = f"; and {len(unused) - MAX_NO_FIXTURE_CALLS} more" if len(unused) > MAX_NO_FIXTURE_CALLS else ""
    return CheckResult(
        name="recordings_consumed",
        passed=False,
        detail=f"{len(unused)} recorded call{'s' * (len(unused) != 1)} never made: {shown}{more}",
    )


def recorded_calls_only(case: Case, tools: FixtureTools | None) -> CheckResult | None:
    """A failed check when the agent made a call its recording cannot answer (None when it made none).

    Such a call got a synthetic ``no_fixture`` result, so whatever the agent did next was not tested
    against anything real: like vcrpy refusing an unrecorded request, the case fails and says which call.
    Cases that inject failures are exempt: a recovery path is expected to leave the recording.
    """
    if tools is None or not tools.no_fixture or (case.spec is not None and case.spec.inject_failures):
        return None
    calls = no_fixture_calls(tools)
    more = f"; and {tools.no_fixture - len(calls)} more" if tools.no_fixture > len(calls) else ""
    return CheckResult(
        name="recorded_calls_only",
        passed=False,
        detail=f"{tools.no_fixture} call{'s' if tools.no_fixture != 1 else ''} the recording cannot answer: "
        + "; ".join(c.summary(detailed=True) for c in calls)
        + more,
    )
