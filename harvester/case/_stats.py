"""What an accepted suite can measure: its mix by kind, its abstention and recovery cases, what it covers,
and a warning for each thing it cannot measure yet (``harvester suite stats``).

Kinds come from tags and failure kinds through the config's ``[tool.harvester.suite]`` mapping
(``config.SuiteMix``). An abstention case is one whose only passing behaviour is to decline (its
checks hold ``abstained``); a recovery variant of a tool is a case in which that tool fails (an
injected failure, or a recorded error the agent has to get past).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..config import Config
from ..model import Run
from ..store import epoch
from ._format import AgentCase

__all__ = ["SuiteStats", "daily_tools", "kind_of", "suite_stats"]


def kind_of(case: AgentCase, config: Config) -> str:
    """The first kind of the mapping with a word among the case's tags or its failure kind; else typical."""
    words = {*case.tags, *([case.source.failure_kind] if case.source.failure_kind else [])}
    return next((kind for kind, names in config.suite.kinds.items() if words & set(names)), "typical")


def daily_tools(runs: Iterable[Run]) -> list[str]:
    """Tools called on every day (UTC) on which any of ``runs`` started: what production relies on daily."""
    days: set[str] = set()
    seen: dict[str, set[str]] = {}
    for run in runs:
        day = (run.started_at or "")[:10]
        days.add(day)
        for call in run.calls:
            seen.setdefault(call.name, set()).add(day)
    return sorted(tool for tool, on in seen.items() if on >= days) if days else []


@dataclass
class SuiteStats:
    cases: int
    kinds: dict[str, int]
    mix: dict[str, float]  # the mix aimed for
    abstention: list[str]  # case ids
    recovery: dict[str, int]  # tool -> cases in which it fails
    agents: list[str]
    tools: list[str]
    oldest: tuple[str, str, float] | None  # (case id, captured at, age in days) of the oldest recording
    warnings: list[str] = field(default_factory=list)

    def share(self, kind: str) -> float:
        return self.kinds.get(kind, 0) / self.cases if self.cases else 0.0

    def lines(self) -> list[str]:
        mix = "  ".join(
            f"{kind} {self.kinds.get(kind, 0)} ({self.share(kind):.0%}, aim {target:.0%})"
            for kind, target in self.mix.items()
        )
        recovery = ", ".join(f"{tool} {n}" for tool, n in sorted(self.recovery.items())) or "none"
        oldest = f"{self.oldest[0]}, {self.oldest[2]:.0f} days ({self.oldest[1]})" if self.oldest else "-"
        return [
            f"{self.cases} accepted cases",
            f"  kinds:       {mix}",
            f"  abstention:  {len(self.abstention)} ({', '.join(self.abstention) or 'no unanswerable case'})",
            f"  recovery:    {recovery}",
            f"  agents:      {', '.join(self.agents) or '-'}",
            f"  tools:       {', '.join(self.tools) or '-'}",
            f"  oldest:      {oldest}",
            *(f"warning: {w}" for w in self.warnings),
        ]

    def to_dict(self) -> dict[str, Any]:
        return {
            "cases": self.cases,
            "kinds": {kind: self.kinds.get(kind, 0) for kind in {**self.mix, **self.kinds}},
            "mix": self.mix,
            "abstention": self.abstention,
            "recovery": self.recovery,
            "agents": self.agents,
            "tools": self.tools,
            "oldest": {"case": self.oldest[0], "captured_at": self.oldest[1], "age_days": round(self.oldest[2], 1)}
            if self.oldest
            else None,
            "warnings": self.warnings,
        }


def suite_stats(
    cases: Iterable[AgentCase], config: Config, *, daily: Iterable[str] = (), now: float | None = None
) -> SuiteStats:
    """The stats of ``cases`` (the accepted ones); ``daily``: tools production calls every day (``daily_tools``)."""
    cases = list(cases)
    now = time.time() if now is None else now
    kinds: dict[str, int] = {}
    recovery: dict[str, int] = {}
    tools: set[str] = set()
    first: tuple[float, str, str] | None = None  # (start time, case id, captured at) of the oldest recording
    for case in cases:
        kind = kind_of(case, config)
        kinds[kind] = kinds.get(kind, 0) + 1
        for tool in {*case.inject_failures, *(f.tool for f in case.fixtures if f.error is not None)}:
            recovery[tool] = recovery.get(tool, 0) + 1
        tools.update(f.tool for f in case.fixtures)
        tools.update(case.appropriate_tools)
        ts = epoch(case.source.captured_at)
        if ts is not None and (first is None or ts < first[0]):
            first = (ts, case.id, case.source.captured_at or "")
    stats = SuiteStats(
        cases=len(cases),
        kinds=kinds,
        mix=dict(config.suite.mix),
        abstention=[c.id for c in cases if any(check.get("check") == "abstained" for check in c.checks)],
        recovery=recovery,
        agents=sorted({c.source.agent for c in cases if c.source.agent}),
        tools=sorted(tools),
        oldest=(first[1], first[2], (now - first[0]) / 86400) if first else None,
    )
    if not stats.abstention:
        stats.warnings.append(
            "no unanswerable case: the abstention rate measures nothing (accept a case whose check is abstained)"
        )
    missing = [t for t in daily if t not in tools]
    if missing:
        stats.warnings.append(f"no case calls {', '.join(missing)}, which production called every day")
    documented = "/".join(f"{v:.0%}".rstrip("%") for v in stats.mix.values())
    for kind, target in stats.mix.items():
        if stats.share(kind) < target * config.suite.far_below:
            stats.warnings.append(
                f"{kind}: {stats.share(kind):.0%} of the suite, far below the {target:.0%} of the mix ({documented})"
            )
    return stats
