"""A report against its baseline: which cases regressed, improved, moved without significance, or cannot
be decided by the trials run (``_verdict``), which flipped, which failed on both sides, and whose step
count changed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from ._metrics import COST_METRICS, METRICS, delta, fmt, metrics_of, priced_in_both
from ._results import CaseResult
from ._spool import kept
from ._verdict import MAX_TRIALS_ASKED, Verdict, verdict

if TYPE_CHECKING:
    from ._report import Report

__all__ = ["ALPHA", "Comparison", "compare", "failed_too_text"]

ALPHA = 0.05
SHOWN = 10  # inconclusive cases and step changes the terminal lists; --json has every one


@dataclass
class Comparison:
    """This report against a baseline: what regressed, what moved without significance, what improved,
    what the trials cannot decide, which cases flipped and whose step count changed."""

    regressed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)  # dropped, not significantly (trials)
    improved: list[str] = field(default_factory=list)
    inconclusive: list[str] = field(default_factory=list)  # a drop the trials cannot decide
    missing: list[str] = field(default_factory=list)  # in the baseline, not run now
    added: list[str] = field(default_factory=list)
    deltas: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)  # before, now
    warnings: list[str] = field(default_factory=list)
    decides: dict[str, str] = field(default_factory=dict)  # inconclusive id -> "passed 1/1, now 2/4: ..."
    pass_to_fail: list[str] = field(default_factory=list)  # passed every trial before, not now
    fail_to_pass: list[str] = field(default_factory=list)
    steps: dict[str, tuple[int, int]] = field(default_factory=dict)  # id -> (steps before, now), when changed
    # Cases (not variants) that fail now and failed in the baseline too: no verdict ever names them, and a
    # red baseline must not make a red run look green.
    failed_too: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "regressed": self.regressed,
            "inconclusive": [{"id": i, "detail": self.decides.get(i, "")} for i in self.inconclusive],
            "changed_not_significant": self.changed,
            "improved": self.improved,
            "flips": {"pass_to_fail": self.pass_to_fail, "fail_to_pass": self.fail_to_pass},
            "failed_in_baseline_too": self.failed_too,
            "steps_changed": {i: {"baseline": b, "current": n} for i, (b, n) in self.steps.items()},
            "missing": self.missing,
            "added": self.added,
            "warnings": self.warnings,
            "metrics": {m: {"baseline": b, "current": n, "delta": delta(b, n)} for m, (b, n) in self.deltas.items()},
        }

    def lines(self) -> list[str]:
        out = [f"warning: {w}" for w in self.warnings]
        out.append(f"regressed: {self.regressed}")
        if self.failed_too:
            more = len(self.failed_too) - SHOWN
            shown = f"{self.failed_too[:SHOWN]}" + (f" ... and {more} more (every one in --json)" if more > 0 else "")
            out.append(f"{failed_too_text(len(self.failed_too))}: {shown}")
        out += [f"inconclusive: {i} ({self.decides.get(i, '')})" for i in self.inconclusive[:SHOWN]]
        if len(self.inconclusive) > SHOWN:
            out.append(f"  ... and {len(self.inconclusive) - SHOWN} more inconclusive (every one in --json)")
        if self.changed:
            out.append(f"changed, not significant: {self.changed}")
        if self.improved:
            out.append(f"improved: {self.improved}")
        if self.pass_to_fail or self.fail_to_pass:
            out.append(f"flips: pass -> fail {self.pass_to_fail}   fail -> pass {self.fail_to_pass}")
        out += [f"  steps: {i} {b} -> {n}" for i, (b, n) in list(self.steps.items())[:SHOWN]]
        if len(self.steps) > SHOWN:
            out.append(f"  ... and {len(self.steps) - SHOWN} more cases whose step count changed (every one in --json)")
        for m, (b, n) in self.deltas.items():
            d = delta(b, n)
            if d and abs(d) > 1e-9 * max(abs(b or 0.0), abs(n or 0.0), 1e-12):  # float noise is no change
                out.append(f"  {m}: {fmt(b)} -> {fmt(n)} ({d:+.4g})")
        return out


def failed_too_text(n: int) -> str:
    """``7 cases failed in the baseline too``: the words every output uses for ``Comparison.failed_too``."""
    return f"{n} case{'s' * (n != 1)} failed in the baseline too"


class _Was(NamedTuple):
    """What the comparison keeps of a baseline case while it reads the current report."""

    passed: bool
    passes: int
    trials: int
    errored: bool
    steps: int


def _in(ids: set[str]) -> Callable[[CaseResult], bool]:
    return lambda r: r.id in ids


def _decides(before: _Was, now: CaseResult, v: Verdict) -> str:
    seen = f"passed {before.passes}/{before.trials} trials, now {now.passes}/{now.trials}"
    if v.needed is None:
        return f"{seen}: not decidable within {MAX_TRIALS_ASKED} trials per side"
    if v.both_sides:
        return f"{seen}: {v.needed} trials on each side would decide it"
    return f"{seen}: {v.needed} trials of this run against this baseline would decide it"


def _trial_warning(baseline: Report, report: Report) -> str | None:
    """Differing trial counts change what can be decided: say how, instead of silently weakening the gate."""
    if baseline.trials == report.trials:
        return None
    return (
        f"the baseline ran {baseline.trials} trial{'s' * (baseline.trials != 1)} per case, this run "
        f"{report.trials}: a case that passed every baseline trial and fails every trial now is a regression; "
        "a partial drop is tested only when both sides have trials enough to be significant, else it is "
        "inconclusive (exit 3)"
    )


def compare(report: Report, baseline: Report, alpha: float = ALPHA) -> Comparison:
    """This report against a baseline: regressions, inconclusive drops, changes, improvements, flips,
    step changes, metric deltas."""
    out = Comparison()
    if (baseline.suite, baseline.suite_version) != (report.suite, report.suite_version):
        out.warnings.append(
            f"baseline is {baseline.suite} {baseline.suite_version or '(unversioned)'}, this run "
            f"is {report.suite} {report.suite_version or '(unversioned)'}: comparing the cases "
            "both ran"
        )
    out.warnings += [w for w in (_trial_warning(baseline, report), baseline.read_note) if w]
    before = {r.id: _Was(r.passed, r.passes or 0, r.trials, r.errored, r.steps) for r in baseline.results}
    now_ids: set[str] = set()
    for r in report.results:
        now_ids.add(r.id)
        b = before.get(r.id)
        if b is None:
            out.added.append(r.id)
            continue
        if r.errored or b.errored:  # not evaluated on one side: no verdict to draw (``errored`` counts it)
            continue
        v = verdict((b.passes or 0, b.trials), (r.passes or 0, r.trials), alpha)
        if v.kind == "regressed":
            out.regressed.append(r.id)
        elif v.kind == "improved":
            out.improved.append(r.id)
        elif v.kind == "inconclusive":
            out.inconclusive.append(r.id)
            out.decides[r.id] = _decides(b, r, v)
        elif v.kind == "changed" and (r.passes or 0) * b.trials < (b.passes or 0) * r.trials:
            out.changed.append(r.id)
        if not b.passed and not r.passed and r.variant_of is None:
            out.failed_too.append(r.id)
        if b.passed and not r.passed:
            out.pass_to_fail.append(r.id)
        elif r.passed and not b.passed:
            out.fail_to_pass.append(r.id)
        if b.steps != r.steps:
            out.steps[r.id] = (b.steps, r.steps)
    out.missing = sorted(set(before) - now_ids)
    for lst in (
        out.regressed,
        out.changed,
        out.improved,
        out.added,
        out.inconclusive,
        out.pass_to_fail,
        out.fail_to_pass,
        out.failed_too,
    ):
        lst.sort()
    out.steps = dict(sorted(out.steps.items()))
    # The figures over the cases both ran, each report read again (a result at a time, as it is on disk).
    shared, theirs_shared = kept(report.results, lambda r: r.id in before), kept(baseline.results, _in(now_ids))
    mine, theirs = metrics_of(shared), metrics_of(theirs_shared)
    priced_before, priced_now, _, _ = priced_in_both(theirs_shared, shared)
    costs_before, costs_now = metrics_of(priced_before), metrics_of(priced_now)
    out.deltas = {m: (costs_before[m], costs_now[m]) if m in COST_METRICS else (theirs[m], mine[m]) for m in METRICS}
    return out
