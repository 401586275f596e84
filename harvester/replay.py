"""The runner: a fresh agent per case, every check evaluated, one report.

An agent that raises fails its case; a check that raises fails its case; neither stops the suite.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from . import checks as checklib
from .case import Case
from .model import Run
from .report import CaseResult, CheckResult, Report


def call_agent(build_agent: Callable[..., Any], prompt: str) -> Any:
    """Build a fresh agent and run it once; sync or async, callable or with ``.run``."""
    agent = build_agent()
    target = agent if callable(agent) else getattr(agent, "run", None)
    if target is None:
        raise TypeError(f"agent {agent!r} is neither callable nor has .run(prompt)")
    result = target(prompt)
    if inspect.isawaitable(result):
        result = asyncio.run(_await(result))
    return result


async def _await(awaitable: Any) -> Any:
    return await awaitable


def as_run(result: Any, prompt: str) -> Run:
    """An agent may return a ``Run`` or just its answer."""
    if isinstance(result, Run):
        return result
    return Run(trace_id="", prompt=prompt, answer=None if result is None else str(result),
               stop="answered" if result is not None else "unknown")


def evaluate(case: Case, run: Run) -> list[CheckResult]:
    out = []
    for check in case.checks:
        passed, detail = checklib.run_check(check, run)
        out.append(CheckResult(name=checklib.label(check), passed=passed, detail=detail))
    return out


def run_case(case: Case, build_agent: Callable[..., Any]) -> CaseResult:
    started = time.perf_counter()
    try:
        run = as_run(call_agent(build_agent, case.task), case.task)
    except Exception as exc:  # noqa: BLE001 - an agent that raises fails its case, not the suite
        return CaseResult(id=case.id, passed=False, tags=case.tags, why=case.why,
                          error=f"{type(exc).__name__}: {exc}", stop="error",
                          duration_ms=(time.perf_counter() - started) * 1000)
    results = evaluate(case, run)
    return CaseResult(id=case.id, passed=all(r.passed for r in results), tags=case.tags, why=case.why,
                      checks=results, stop=run.stop, answer=run.answer, trajectory=run.trajectory(),
                      requested=run.requested_tools(), steps=run.steps, cost=run.cost,
                      duration_ms=(time.perf_counter() - started) * 1000)


@dataclass
class Suite:
    cases: Sequence[Case]
    name: str = "suite"
    version: str | None = None

    def run(self, build_agent: Callable[..., Any]) -> Report:
        """Run every case against a FRESH agent from ``build_agent()``."""
        return Report(suite=self.name, suite_version=self.version,
                      results=[run_case(c, build_agent) for c in self.cases])
