"""A report against its baseline: which cases regressed, moved without significance or improved."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ._metrics import COST_METRICS, METRICS, delta, fisher_drop_p, fmt, metrics_of, priced_in_both

if TYPE_CHECKING:
    from ._report import Report

__all__ = ["ALPHA", "Comparison", "compare"]

ALPHA = 0.05


@dataclass
class Comparison:
    """This report against a baseline: what regressed, what moved without significance, what improved."""

    regressed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)  # dropped, not significantly (trials)
    improved: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # in the baseline, not run now
    added: list[str] = field(default_factory=list)
    deltas: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)  # before, now
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "regressed": self.regressed,
            "changed_not_significant": self.changed,
            "improved": self.improved,
            "missing": self.missing,
            "added": self.added,
            "warnings": self.warnings,
            "metrics": {m: {"baseline": b, "current": n, "delta": delta(b, n)} for m, (b, n) in self.deltas.items()},
        }

    def lines(self) -> list[str]:
        out = [f"warning: {w}" for w in self.warnings]
        out.append(f"regressed: {self.regressed}")
        if self.changed:
            out.append(f"changed, not significant: {self.changed}")
        if self.improved:
            out.append(f"improved: {self.improved}")
        for m, (b, n) in self.deltas.items():
            d = delta(b, n)
            if d and abs(d) > 1e-9 * max(abs(b or 0.0), abs(n or 0.0), 1e-12):  # float noise is no change
                out.append(f"  {m}: {fmt(b)} -> {fmt(n)} ({d:+.4g})")
        return out


def compare(report: Report, baseline: Report, alpha: float = ALPHA) -> Comparison:
    """This report against a baseline: regressions (significant drops), changes, improvements, metric deltas."""
    out = Comparison()
    if (baseline.suite, baseline.suite_version) != (report.suite, report.suite_version):
        out.warnings.append(
            f"baseline is {baseline.suite} {baseline.suite_version or '(unversioned)'}, this run "
            f"is {report.suite} {report.suite_version or '(unversioned)'}: comparing the cases "
            "both ran"
        )
    before = {r.id: r for r in baseline.results}
    now_ids = {r.id for r in report.results}
    for r in report.results:
        b = before.get(r.id)
        if b is None:
            out.added.append(r.id)
            continue
        if r.pass_rate < b.pass_rate:
            single = r.trials == 1 and b.trials == 1
            bp, np_ = b.passes or 0, r.passes or 0
            significant = single or fisher_drop_p(bp, b.trials - bp, np_, r.trials - np_) < alpha
            (out.regressed if significant else out.changed).append(r.id)
        elif r.passed and not b.passed:
            out.improved.append(r.id)
    out.missing = sorted(set(before) - now_ids)
    for lst in (out.regressed, out.changed, out.improved, out.added):
        lst.sort()
    shared = [r for r in report.results if r.id in before]
    mine, theirs = metrics_of(shared), metrics_of([before[r.id] for r in shared])
    priced_before, priced_now, _, _ = priced_in_both([before[r.id] for r in shared], shared)
    costs_before, costs_now = metrics_of(priced_before), metrics_of(priced_now)
    out.deltas = {m: (costs_before[m], costs_now[m]) if m in COST_METRICS else (theirs[m], mine[m]) for m in METRICS}
    return out
