"""Release gates: ``task_completion>=0.85``, ``tag:security>=1.0``, ``delta:task_completion>=-0.03``.

The default gates are always on (a gate of your own on the same metric replaces one), and a
regression against the baseline fails the job whatever the gates say.

So is the floor, ``task_completion>=min_task_completion`` (``[tool.harvester.replay]``, default 0.5):
a baseline only names what changed, so against a red baseline a red run regresses nothing, and without
the floor it would pass. Both the floor and a gate of your own on ``task_completion`` apply, the stricter
deciding; one of yours at least as strict stands for it (one line, not two). A weaker one does not lower
it: only the config does (0 turns it off), so a ``--gate`` in a CI script can never switch it off.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from ..config import ReplayPolicy
from ..errors import GateError
from ._compare import ALPHA, Comparison, failed_too_text
from ._metrics import COST_METRICS, METRICS, cost_unknown, delta, is_rate, priced_in_both
from ._report import Report

__all__ = [
    "DEFAULT_GATES",
    "EXIT_INCONCLUSIVE",
    "INCONCLUSIVE_POLICIES",
    "MIN_TASK_COMPLETION",
    "Gate",
    "GateOutcome",
    "GateResult",
    "evaluate_gates",
    "parse_gate",
]


# On whatever the user gates: an unauthorised or live tool call, or a case the harness could not evaluate.
DEFAULT_GATES: tuple[str, ...] = ("unauthorised_actions<=0", "live_tool_calls<=0", "errored<=0")
# The floor on task_completion whatever the baseline says: the config's default, where users change it.
MIN_TASK_COMPLETION: float = ReplayPolicy.model_fields["min_task_completion"].default
FLOOR_KEY = "replay.min_task_completion"
_GATE = re.compile(
    r"^\s*(?P<delta>delta:)?(?P<metric>tag:[^\s<>=!]+|[a-z_][a-z0-9_]*)\s*(?P<op>>=|<=|==|>|<)"
    r"\s*(?P<value>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$"
)
_OPS = {
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    "<": lambda a, b: a < b,
    "==": lambda a, b: math.isclose(a, b, abs_tol=1e-9),
}


@dataclass(frozen=True)
class Gate:
    expr: str
    metric: str  # a METRICS name or "tag:<name>"
    op: str
    value: float
    delta: bool = False
    floor: bool = False  # the config's floor, not a gate the user wrote

    def measure(self, report: Report) -> float | None:
        if self.metric.startswith("tag:"):
            return report.by_tag().get(self.metric[4:])
        return report.metrics()[self.metric]

    def holds(self, value: float) -> bool:
        return _OPS[self.op](value, self.value)

    def holds_floor(self, floor: float) -> bool:
        """True when this gate passes only at a task_completion of ``floor`` or more."""
        return (
            self.metric == "task_completion" and not self.delta and self.op in (">=", ">", "==") and self.value >= floor
        )


def parse_gate(
    expr: str, *, known: Sequence[str] = METRICS, rates: Callable[[str], bool] = is_rate, tags: bool = True
) -> Gate:
    """``[delta:]metric OP number``; a typo must stop the job, not silently pass it. ``known``, ``rates``
    and ``tags``: another report's metrics (``harvester shadow``'s), which of them are rates, and whether
    ``tag:<name>`` and ``delta:`` gates exist there."""
    m = _GATE.match(expr)
    if m is None:
        raise GateError(
            f"malformed gate {expr!r} (expected e.g. 'task_completion>=0.85', 'tag:security>=1.0', "
            "'delta:task_completion>=-0.03')"
            if tags
            else f"malformed gate {expr!r} (expected e.g. '{known[0]}<=0')"
        )
    metric = m["metric"]
    if metric not in known and not (tags and metric.startswith("tag:")):
        extra = ", tag:<name>" if tags else ""
        raise GateError(f"unknown metric {metric!r} in gate {expr!r} (known: {', '.join(known)}{extra})")
    if m["delta"] and not tags:
        raise GateError(f"gate {expr!r}: delta: compares with a baseline, and there is none here")
    value, delta = float(m["value"]), bool(m["delta"])
    if rates(metric):  # 85 for 85% would never pass (or always would): a typo must stop the job
        if delta and abs(value) > 1:
            raise GateError(
                f"gate {expr.strip()!r}: a change in {metric}, a rate, lies between -1 and 1 "
                f"({value:g}% is {value / 100:g})"
            )
        if not delta and not 0 <= value <= 1:
            example = f"{value:g}% is {value / 100:g}" if value > 1 else "e.g. 0.85 for 85%"
            raise GateError(f"gate {expr.strip()!r}: {metric} is a rate from 0 to 1 ({example})")
    return Gate(expr.strip(), metric, m["op"], value, delta)


@dataclass
class GateResult:
    expr: str
    passed: bool
    value: float | None
    detail: str
    floor: bool = False

    @property
    def label(self) -> str:
        """The expression, and for the floor where it comes from: nobody looks for it on the command line."""
        return f"{self.expr} (floor: {FLOOR_KEY})" if self.floor else self.expr

    def summary(self) -> str:
        return f"gate {self.label}: {'ok' if self.passed else 'FAIL'} ({self.detail})"


INCONCLUSIVE_POLICIES = ("fail", "pass")
EXIT_INCONCLUSIVE = 3  # nothing failed, but a drop the trials cannot decide: the job must say so


@dataclass
class GateOutcome:
    gates: list[GateResult]
    regressions: list[str]
    comparison: Comparison | None = None
    # What an inconclusive case does to the exit code: None exits 3, "fail" 1, "pass" 0.
    inconclusive_policy: str | None = None

    @property
    def inconclusive(self) -> list[str]:
        return self.comparison.inconclusive if self.comparison is not None else []

    @property
    def exit_code(self) -> int:
        if self.regressions or not all(g.passed for g in self.gates):
            return 1
        if self.inconclusive and self.inconclusive_policy != "pass":
            return 1 if self.inconclusive_policy == "fail" else EXIT_INCONCLUSIVE
        return 0

    def lines(self) -> list[str]:
        out = self.comparison.lines() if self.comparison is not None else []
        return out + [g.summary() for g in self.gates]

    def summary(self) -> str:
        """The last line of a gated command: what its exit code means, so a failing job never ends on "ok"."""
        n = len(self.inconclusive)
        undecided = f"{n} case{'s' * (n != 1)} inconclusive" if n else ""
        failed_too = self.comparison.failed_too if self.comparison is not None else []
        too = [failed_too_text(len(failed_too))] if failed_too else []  # said whatever the verdict
        if self.exit_code == 0:
            notes = [f"{undecided}, --inconclusive pass"] * bool(n) + too
            return f"release gate: PASS ({'; '.join(notes)})" if notes else "release gate: PASS"
        if self.exit_code == EXIT_INCONCLUSIVE:
            return f"release gate: INCONCLUSIVE ({'; '.join([f'{undecided}: more trials would decide', *too])}; exit 3)"
        why = []
        if self.regressions:
            why.append(f"{len(self.regressions)} case{'s' if len(self.regressions) != 1 else ''} regressed")
        failed = sum(not g.passed for g in self.gates)
        if failed:
            why.append(f"{failed} gate{'s' if failed != 1 else ''} failed")
        if n and self.inconclusive_policy == "fail":
            why.append(f"{undecided}, --inconclusive fail")
        return f"release gate: FAIL ({'; '.join([', '.join(why), *too])})"

    def warnings(self, report: Report) -> list[str]:
        """Failing cases a passing job would hide: once any gate is configured, failures alone do not fail it."""
        cases = report.cases
        failed = sum(not r.passed for r in cases)
        if self.exit_code != 0 or not failed:
            return []
        return [
            f"warning: {failed}/{len(cases)} case{'s' if len(cases) != 1 else ''} failed but no gate covers "
            "them (add --gate task_completion>=1)"
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "exit_code": self.exit_code,
            "verdict": self.summary(),
            "regressions": self.regressions,
            "inconclusive": self.inconclusive,
            "inconclusive_policy": self.inconclusive_policy,
            "gates": [
                {"gate": g.expr, "passed": g.passed, "value": g.value, "detail": g.detail, "floor": g.floor}
                for g in self.gates
            ],
            "comparison": self.comparison.to_dict() if self.comparison is not None else None,
        }


def _left_out(metric: str, report: Report) -> str:
    """A cost gate counts only cases whose cost is known, and says how many it left out."""
    if metric not in COST_METRICS:
        return ""
    unknown, cases = cost_unknown(report.results)
    return _left_out_text(unknown, cases)


def _left_out_text(unknown: int, cases: int) -> str:
    return f" ({unknown} of {cases} cases left out: cost unknown)" if unknown else ""


def _priced_in_both(before: Report, now: Report) -> tuple[Report, Report, str]:
    """``priced_in_both`` on two reports, and what it left out."""
    kept_before, kept_now, unknown, cases = priced_in_both(before.results, now.results)
    return (
        before.model_copy(update={"results": kept_before}),
        now.model_copy(update={"results": kept_now}),
        _left_out_text(unknown, cases),
    )


def evaluate_gates(
    report: Report,
    gates: Iterable[str] = (),
    baseline: Report | None = None,
    *,
    alpha: float = ALPHA,
    inconclusive: str | None = None,
    min_task_completion: float = MIN_TASK_COMPLETION,
) -> GateOutcome:
    """Every gate (plus the default ones and the floor) against ``report``; regressions against
    ``baseline`` fail too.

    A metric with no data (``recovery_rate`` without ``--inject``) fails its gate: a gate that cannot be
    measured protects nothing. In a shard's report it passes as "no data in shard": one shard of four
    may hold no ``security`` case, and the merged report judges the gate on the whole suite. A ``delta:``
    gate without a baseline is a usage error. ``alpha`` is the significance a partial drop needs;
    ``inconclusive`` ("fail" or "pass") makes a drop the trials cannot decide binary (default: exit 3).
    ``min_task_completion`` is the floor (the config's ``replay.min_task_completion``; 0: none).
    """
    if inconclusive is not None and inconclusive not in INCONCLUSIVE_POLICIES:
        raise GateError(f"--inconclusive must be fail or pass, got {inconclusive!r}")
    if not 0 < alpha < 1:
        raise GateError(f"--alpha must be between 0 and 1, got {alpha:g}")
    parsed = [parse_gate(g) for g in gates]
    for default in DEFAULT_GATES:
        gate = parse_gate(default)
        if not any(p.metric == gate.metric and not p.delta for p in parsed):
            parsed.append(gate)
    if not 0 <= min_task_completion <= 1:
        raise GateError(f"{FLOOR_KEY} is a rate from 0 to 1, got {min_task_completion:g}")
    if min_task_completion > 0 and not any(p.holds_floor(min_task_completion) for p in parsed):
        floor = min_task_completion
        parsed.append(Gate(f"task_completion>={floor:g}", "task_completion", ">=", floor, floor=True))
    comparison = report.compare(baseline, alpha) if baseline is not None else None
    shared_now = shared_before = None
    if baseline is not None:  # deltas over the cases both ran: another suite version adds and drops some
        before_ids, now_ids = {r.id for r in baseline.results}, {r.id for r in report.results}
        shared_now = report.model_copy(update={"results": [r for r in report.results if r.id in before_ids]})
        shared_before = baseline.model_copy(update={"results": [r for r in baseline.results if r.id in now_ids]})
    results = []
    for gate in parsed:
        left_out = _left_out(gate.metric, report)
        if gate.delta:
            if shared_now is None or shared_before is None:
                raise GateError(f"gate {gate.expr!r} compares against a baseline: pass --baseline")
            before, now = shared_before, shared_now
            if gate.metric in COST_METRICS:
                before, now, left_out = _priced_in_both(before, now)
            value = delta(gate.measure(before), gate.measure(now))
        else:
            value = gate.measure(report)
        if value is None:
            # One shard may hold no case of a tag: the merged report is where such a gate is judged.
            in_shard = report.shard is not None
            detail = f"no data in shard {report.shard}" if in_shard else "no data"
            results.append(GateResult(gate.expr, in_shard, None, detail + left_out, gate.floor))
            continue
        passed = gate.holds(value)
        results.append(GateResult(gate.expr, passed, value, f"{value:.4g}{left_out}", gate.floor))
    return GateOutcome(results, comparison.regressed if comparison else [], comparison, inconclusive)
