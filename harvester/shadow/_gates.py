"""Gates on a shadow report: any of its rates or deltas (``new_mutating<=0``, ``newly_failed<=0.02``),
parsed with replay's grammar before anything runs, judged with its exit codes (0 pass, 1 a gate failed)."""

from __future__ import annotations

from collections.abc import Iterable

from ..report import Gate, GateResult, parse_gate
from ._report import ShadowReport
from ._tally import METRICS, is_rate

__all__ = ["judge", "parse_gates"]


def parse_gates(exprs: Iterable[str]) -> list[Gate]:
    """Every gate parsed now: a typo or an unknown metric is a ``GateError`` naming it, before the run."""
    return [parse_gate(expr, known=METRICS, rates=is_rate, tags=False) for expr in exprs]


def judge(report: ShadowReport, gates: Iterable[Gate]) -> list[GateResult]:
    """Each gate on the report's overall figures; one with no data (no cost known) passes only in a
    shard, where the merged report will judge it."""
    figures = report.metrics()
    out = []
    for gate in gates:
        value = figures[gate.metric]
        if value is None:
            shard = report.shard
            detail = f"no data in shard {shard}" if shard else "no data"
            out.append(GateResult(gate.expr, shard is not None, None, detail))
        else:
            out.append(GateResult(gate.expr, gate.holds(value), value, f"{value:.4g}"))
    return out
