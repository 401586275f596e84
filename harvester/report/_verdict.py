"""One case against its baseline: regressed, improved, inconclusive, changed or the same.

Whatever the two trial counts, a case that passed every baseline trial and fails every trial now is a
regression (and the reverse an improvement): more trials must never make the gate weaker. A partial
drop is tested with a one-sided Fisher exact test when the two sides' trials can reach ``alpha`` at
all; when they cannot (one baseline trial against four), the drop is **inconclusive**, and the verdict
says how many trials would decide it instead of calling it a pass.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, NamedTuple

from ._metrics import fisher_drop_p

__all__ = ["MAX_TRIALS_ASKED", "Verdict", "verdict"]

Kind = Literal["regressed", "improved", "inconclusive", "changed", "same"]
MAX_TRIALS_ASKED = 200  # beyond this many trials per side a drop is called undecidable, not priced


class Verdict(NamedTuple):
    kind: Kind
    p: float | None = None  # the Fisher p-value, when the drop (or rise) was tested
    needed: int | None = None  # trials per side that would decide an inconclusive drop (None: > MAX)
    both_sides: bool = False  # ``needed`` asks for more baseline trials too, not only more candidate ones


def verdict(before: tuple[int, int], now: tuple[int, int], alpha: float) -> Verdict:
    """``before`` and ``now`` are (passes, trials) of one case."""
    (bp, bn), (np_, nn) = before, now
    if bn <= 0 or nn <= 0:
        return Verdict("same")
    if bp == bn and np_ == 0:
        return Verdict("regressed")
    if bp == 0 and np_ == nn:
        return Verdict("improved")
    if np_ * bn == bp * nn:
        return Verdict("same")
    dropped = np_ * bn < bp * nn
    # A drop is the baseline doing better than now; a rise is now doing better than the baseline.
    hi, lo = ((bp, bn), (np_, nn)) if dropped else ((np_, nn), (bp, bn))
    if _p(hi, lo) < alpha:
        return Verdict("regressed" if dropped else "improved", _p(hi, lo))
    if not dropped:
        return Verdict("changed", _p(hi, lo))  # a rise that is not significant changes no verdict
    if _p((bn, bn), (0, nn)) >= alpha:  # even the most extreme outcome could not be significant
        needed, both = _needed(before, now, alpha)
        return Verdict("inconclusive", None, needed, both)
    return Verdict("changed", _p(hi, lo))


def _p(hi: tuple[int, int], lo: tuple[int, int]) -> float:
    return fisher_drop_p(hi[0], hi[1] - hi[0], lo[0], lo[1] - lo[0])


def _needed(before: tuple[int, int], now: tuple[int, int], alpha: float) -> tuple[int | None, bool]:
    """The fewest trials that would decide the drop at the rates seen: more candidate trials against this
    baseline if that can ever be enough, else the same number on both sides."""
    (bp, bn), (np_, nn) = before, now
    rate, base_rate = np_ / nn, bp / bn
    only_now = _fewest(nn + 1, lambda m: _p((bp, bn), (round(rate * m), m)) < alpha)
    if only_now is not None:
        return only_now, False
    return _fewest(max(bn, nn) + 1, lambda m: _p((round(base_rate * m), m), (round(rate * m), m)) < alpha), True


def _fewest(start: int, decides: Callable[[int], bool]) -> int | None:
    """The smallest m in [start, MAX_TRIALS_ASKED] that decides (the p-value falls as trials grow, so a
    doubling then a bisection: a handful of tests, not one per count)."""
    hi = start
    while not decides(hi):
        if hi >= MAX_TRIALS_ASKED:
            return None
        hi = min(hi * 2, MAX_TRIALS_ASKED)
    lo = max(start, hi // 2)
    while lo < hi:
        mid = (lo + hi) // 2
        if decides(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi
