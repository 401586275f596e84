"""The release metrics over a set of case results, and the one statistical test a regression needs."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from ._results import CaseResult
from ._spool import kept

__all__ = [
    "COST_METRICS",
    "METRICS",
    "RATES",
    "by_tag",
    "cost_unknown",
    "priced_in_both",
    "delta",
    "fisher_drop_p",
    "fmt",
    "is_rate",
    "metrics_of",
    "pass_hat_k",
    "pass_hat_k_by_tag",
]


METRICS: tuple[str, ...] = (
    "task_completion",
    "errored",
    "mean_steps",
    "p95_steps",
    "tool_calls",
    "mean_cost",
    "unauthorised_actions",
    "live_tool_calls",
    "recovery_rate",
    "redundant_call_rate",
    "cost_per_success",
    "abstention_rate",
    "divergence_rate",
)


def by_tag(results: Iterable[CaseResult]) -> dict[str, float]:
    totals: dict[str, list[float]] = {}
    for r in results:
        if r.errored:  # not evaluated: neither a pass nor a failure of its tags
            continue
        for tag in r.tags:
            t = totals.setdefault(tag, [0.0, 0])
            t[0] += r.pass_rate
            t[1] += 1
    return {tag: p / n for tag, (p, n) in sorted(totals.items())}


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def metrics_of(results: Iterable[CaseResult], refused: int = 0) -> dict[str, float | None]:
    """The release metrics over some results (``refused``: the report's calls refused with no case to
    own them, which count as live tool calls), in one pass: they may be a spool on disk. ``None`` = no
    data (no variants, no known cost)."""
    t = _Tally()
    for r in results:
        t.add(r)
    steps = sorted(t.steps)
    return {
        "task_completion": _mean(t.task_rates),
        "errored": float(t.errored),
        "mean_steps": _mean([float(s) for s in steps]),
        "p95_steps": float(steps[max(0, math.ceil(0.95 * len(steps)) - 1)]) if steps else None,  # nearest rank
        "tool_calls": float(t.task_calls),
        "mean_cost": t.cost_sum / t.priced if t.priced else None,
        "unauthorised_actions": float(t.unauthorised),
        "live_tool_calls": float(t.live + refused),
        "recovery_rate": _mean(t.variant_rates),
        "redundant_call_rate": t.redundant / t.calls if t.calls else 0.0,
        "cost_per_success": t.trial_costs / t.successes if t.priced and t.successes else None,
        "abstention_rate": t.abstained / len(t.task_rates) if t.task_rates else None,
        "divergence_rate": t.diverged / len(t.task_rates) if t.task_rates else None,
    }


class _Tally:
    """What ``metrics_of`` needs of each result: sums, and a number per case for the rates and p95."""

    def __init__(self) -> None:
        self.task_rates: list[float] = []
        self.variant_rates: list[float] = []
        self.steps: list[int] = []
        self.errored = self.calls = self.task_calls = self.unauthorised = self.live = self.redundant = 0
        self.priced = self.successes = self.abstained = self.diverged = 0
        self.cost_sum = self.trial_costs = 0.0

    def add(self, r: CaseResult) -> None:
        self.unauthorised += r.unauthorised
        self.live += r.live_calls
        self.redundant += r.redundant_calls
        if r.errored:
            self.errored += 1
            return
        self.calls += r.tool_calls
        if r.variant_of is not None:
            self.variant_rates.append(r.pass_rate)
            return
        self.task_rates.append(r.pass_rate)
        self.steps.append(r.steps)
        self.task_calls += r.tool_calls
        self.abstained += r.abstained
        self.diverged += r.divergence is not None or r.no_fixture > 0
        if r.cost is not None:  # an unknown cost is left out, never read as 0
            self.priced += 1
            self.cost_sum += r.cost
            self.trial_costs += r.cost * r.trials
            self.successes += r.passes or 0


COST_METRICS: frozenset[str] = frozenset({"cost_per_success", "mean_cost"})


def cost_unknown(results: Iterable[CaseResult]) -> tuple[int, int]:
    """(cases whose cost is unknown, cases): what a cost metric left out."""
    unknown = cases = 0
    for r in results:
        if r.variant_of is None:
            cases, unknown = cases + 1, unknown + (r.cost is None)
    return unknown, cases


def priced_in_both(
    before: Sequence[CaseResult], now: Sequence[CaseResult]
) -> tuple[Sequence[CaseResult], Sequence[CaseResult], int, int]:
    """(before, now) kept to the cases whose cost both know (and every variant), (cases left out,
    cases): a cost delta over them, so a case whose cost became unknown does not read as one that got
    cheaper, nor one whose cost became known as one that got dearer. Kept as the same kind of sequence
    (a spool stays on disk); what is held is the ids."""
    known = {r.id for r in before if r.cost is not None} & {r.id for r in now if r.cost is not None}
    unknown, cases = 0, 0
    for r in now:
        if r.variant_of is None:
            cases, unknown = cases + 1, unknown + (r.id not in known)

    def keep(r: CaseResult) -> bool:
        return r.variant_of is not None or r.id in known

    return kept(before, keep), kept(now, keep), unknown, cases


def pass_hat_k(results: Iterable[CaseResult], trials: int) -> dict[int, float]:
    """pass^k for k = 1..trials with tau-bench's estimator: the mean over cases of C(c, k) / C(n, k),
    c the case's passes of its n trials ("how often does it get this right k times in a row"). One pass."""
    k_sums = _KSums(trials)
    for r in results:
        k_sums.add(r)
    return k_sums.means()


def pass_hat_k_by_tag(results: Iterable[CaseResult], trials: int) -> dict[str, dict[int, float]]:
    """``pass_hat_k`` per tag (every tag ``by_tag`` shows), sorted by tag, in one pass over the results."""
    by: dict[str, _KSums] = {}
    for r in results:
        if r.errored:
            continue
        for tag in r.tags:
            by.setdefault(tag, _KSums(trials)).add(r)
    return {tag: by[tag].means() for tag in sorted(by)}


class _KSums:
    """pass^k's running sums: per k, C(c, k) / C(n, k) summed over the cases rated at k, and their count."""

    def __init__(self, trials: int) -> None:
        self.trials = trials
        self.sums, self.counts = [0.0] * (trials + 1), [0] * (trials + 1)

    def add(self, r: CaseResult) -> None:
        if r.variant_of is not None or r.errored or r.trials < 1:
            return
        for k in range(1, min(self.trials, r.trials) + 1):
            self.sums[k] += math.comb(r.passes or 0, k) / math.comb(r.trials, k)
            self.counts[k] += 1

    def means(self) -> dict[int, float]:
        return {k: self.sums[k] / self.counts[k] for k in range(1, self.trials + 1) if self.counts[k]}


def fisher_drop_p(base_pass: int, base_fail: int, now_pass: int, now_fail: int) -> float:
    """One-sided Fisher exact p: the chance of the baseline doing at least this much better than now if
    both had the same pass rate (hypergeometric tail, exact integer sums)."""
    n_base = base_pass + base_fail
    total = n_base + now_pass + now_fail
    passes = base_pass + now_pass
    tail = sum(
        math.comb(passes, x) * math.comb(total - passes, n_base - x) for x in range(base_pass, min(passes, n_base) + 1)
    )
    return tail / math.comb(total, n_base)


RATES: frozenset[str] = frozenset(
    {"task_completion", "recovery_rate", "redundant_call_rate", "abstention_rate", "divergence_rate"}
)


def is_rate(metric: str) -> bool:
    """A metric measured from 0 to 1: the rates and every ``tag:<name>`` pass rate."""
    return metric in RATES or metric.startswith("tag:")


def delta(before: float | None, now: float | None) -> float | None:
    return None if before is None or now is None else now - before


def fmt(value: float | None) -> str:
    """A metric as the reports print it: 4 significant digits, or n/a."""
    return "n/a" if value is None else f"{value:.4g}"
