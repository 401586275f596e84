"""Counts of how runs changed, per scope (overall, an agent, a failure kind, a tool path), that add up:
a shard's tallies merge into the whole by addition, and every rate carries its confidence interval.

A rate over a few hundred runs is an estimate of the candidate's behaviour on all traffic like them, so
each is shown with a Wilson score interval (95%): it stays inside 0..1 and is honest at 0 of n, which is
the number a release manager reads most ("0 newly mutating runs of 300: at most 1.3%").
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from ._change import RunChange

__all__ = ["DELTAS", "FLAGS", "METRICS", "RATES", "Tally", "is_rate", "wilson"]

# What can change in a run, each a count of runs (and a rate over the runs shadowed).
FLAGS: tuple[str, ...] = (
    "new_mutating",  # a mutating or forbidden tool the production run did not execute
    "newly_failed",  # production went fine, the candidate has a failure kind
    "changed",  # anything below
    "diverged",  # its trajectory left production's (the first divergent step, as the HTML report shows it)
    "answer_changed",
    "new_calls",
    "dropped_calls",
    "args_changed",
    "stop_changed",
    "kind_changed",
    "fixed",  # production failed, the candidate did not
    "no_fixture",  # the recording could not answer a call the candidate made
    "errored",  # the harness could not evaluate it (the factory raised, ...)
    "live_tool_calls",  # a tool ran (or tried to) around the executor: the seal's business
)
DELTAS: tuple[str, ...] = ("mean_steps_delta", "mean_tokens_delta", "mean_cost_delta", "cost_delta")
RATES: tuple[str, ...] = ("same", *FLAGS)
METRICS: tuple[str, ...] = (*RATES, *DELTAS)
Z95 = 1.959964


def is_rate(metric: str) -> bool:
    return metric in RATES


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of ``k`` successes in ``n`` trials; (0, 1) when ``n`` is 0."""
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (0.0 if k == 0 else max(0.0, centre - half)), (1.0 if k == n else min(1.0, centre + half))


class Tally(BaseModel):
    """Runs of one scope: how many changed in each way, and the sums the deltas are means of (a delta
    over the runs where both sides knew it: an unknown token count is not zero)."""

    model_config = ConfigDict(extra="forbid")

    runs: int = 0
    counts: dict[str, int] = Field(default_factory=dict)
    steps_delta: int = 0
    tokens_delta: int = 0
    tokens_known: int = 0
    cost_production: float = 0.0
    cost_candidate: float = 0.0
    cost_known: int = 0

    def add(self, change: RunChange) -> None:
        self.runs += 1
        for flag in change.flags():
            self.counts[flag] = self.counts.get(flag, 0) + 1
        self.steps_delta += change.steps[1] - change.steps[0]
        before, after = change.tokens
        if before is not None and after is not None:
            self.tokens_delta += after - before
            self.tokens_known += 1
        before_cost, after_cost = change.cost
        if before_cost is not None and after_cost is not None:
            self.cost_production += before_cost
            self.cost_candidate += after_cost
            self.cost_known += 1

    def merge(self, other: Tally) -> None:
        self.runs += other.runs
        for flag, n in other.counts.items():
            self.counts[flag] = self.counts.get(flag, 0) + n
        self.steps_delta += other.steps_delta
        self.tokens_delta += other.tokens_delta
        self.tokens_known += other.tokens_known
        self.cost_production += other.cost_production
        self.cost_candidate += other.cost_candidate
        self.cost_known += other.cost_known

    def count(self, flag: str) -> int:
        return self.runs - self.counts.get("changed", 0) if flag == "same" else self.counts.get(flag, 0)

    def rate(self, flag: str) -> float:
        return self.count(flag) / self.runs if self.runs else 0.0

    def interval(self, flag: str) -> tuple[float, float]:
        return wilson(self.count(flag), self.runs)

    def rate_text(self, flag: str) -> str:
        """``12 (4.0%, 95% CI 2.3-6.9%)``."""
        lo, hi = self.interval(flag)
        return f"{self.count(flag)} ({self.rate(flag):.1%}, 95% CI {lo:.1%}-{hi:.1%})"

    def metrics(self) -> dict[str, float | None]:
        """Every gateable figure: each rate (0..1), the mean deltas per run, the total cost delta."""
        out: dict[str, float | None] = {flag: self.rate(flag) for flag in RATES}
        out["mean_steps_delta"] = self.steps_delta / self.runs if self.runs else None
        out["mean_tokens_delta"] = self.tokens_delta / self.tokens_known if self.tokens_known else None
        cost = self.cost_candidate - self.cost_production
        out["mean_cost_delta"] = cost / self.cost_known if self.cost_known else None
        out["cost_delta"] = cost if self.cost_known else None
        return out
