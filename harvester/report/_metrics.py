"""The release metrics over a set of case results, and the one statistical test a regression needs."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from ._results import CaseResult

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


def metrics_of(results: Sequence[CaseResult], refused: int = 0) -> dict[str, float | None]:
    """The release metrics over some results (``refused``: the report's calls refused with no case to
    own them, which count as live tool calls). ``None`` = no data (no variants, no known cost)."""
    evaluated = [r for r in results if not r.errored]
    tasks = [r for r in evaluated if r.variant_of is None]
    variants = [r for r in evaluated if r.variant_of is not None]
    steps = sorted(r.steps for r in tasks)
    calls = sum(r.tool_calls for r in evaluated)
    priced = [r for r in tasks if r.cost is not None]  # an unknown cost is left out, never read as 0
    costs = [(r.cost or 0.0) * r.trials for r in priced]
    successes = sum(r.passes or 0 for r in priced)
    return {
        "task_completion": _mean([r.pass_rate for r in tasks]),
        "errored": float(len(results) - len(evaluated)),
        "mean_steps": _mean([float(s) for s in steps]),
        "p95_steps": float(steps[max(0, math.ceil(0.95 * len(steps)) - 1)]) if steps else None,  # nearest rank
        "tool_calls": float(sum(r.tool_calls for r in tasks)),
        "mean_cost": _mean([r.cost for r in priced if r.cost is not None]),
        "unauthorised_actions": float(sum(r.unauthorised for r in results)),
        "live_tool_calls": float(sum(r.live_calls for r in results) + refused),
        "recovery_rate": _mean([r.pass_rate for r in variants]),
        "redundant_call_rate": sum(r.redundant_calls for r in results) / calls if calls else 0.0,
        "cost_per_success": sum(costs) / successes if costs and successes else None,
        "abstention_rate": _mean([float(r.abstained) for r in tasks]),
        "divergence_rate": _mean([float(r.divergence is not None or r.no_fixture > 0) for r in tasks]),
    }


COST_METRICS: frozenset[str] = frozenset({"cost_per_success", "mean_cost"})


def cost_unknown(results: Sequence[CaseResult]) -> tuple[int, int]:
    """(cases whose cost is unknown, cases): what a cost metric left out."""
    tasks = [r for r in results if r.variant_of is None]
    return sum(r.cost is None for r in tasks), len(tasks)


def priced_in_both(
    before: Sequence[CaseResult], now: Sequence[CaseResult]
) -> tuple[list[CaseResult], list[CaseResult], int, int]:
    """(before, now) kept to the cases whose cost both know (and every variant), (cases left out,
    cases): a cost delta over them, so a case whose cost became unknown does not read as one that got
    cheaper, nor one whose cost became known as one that got dearer."""
    known = {r.id for r in before if r.cost is not None} & {r.id for r in now if r.cost is not None}
    tasks = [r for r in now if r.variant_of is None]

    def keep(results: Sequence[CaseResult]) -> list[CaseResult]:
        return [r for r in results if r.variant_of is not None or r.id in known]

    return keep(before), keep(now), sum(r.id not in known for r in tasks), len(tasks)


def pass_hat_k(results: Iterable[CaseResult], trials: int) -> dict[int, float]:
    """pass^k for k = 1..trials with tau-bench's estimator: the mean over cases of C(c, k) / C(n, k),
    c the case's passes of its n trials ("how often does it get this right k times in a row")."""
    cases = [r for r in results if r.variant_of is None and not r.errored and r.trials >= 1]
    out: dict[int, float] = {}
    for k in range(1, trials + 1):
        rated = [math.comb(r.passes or 0, k) / math.comb(r.trials, k) for r in cases if r.trials >= k]
        if rated:
            out[k] = sum(rated) / len(rated)
    return out


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
