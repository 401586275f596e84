"""``shadow``: stored production runs replayed against a candidate, each compared with its production run.

Each run becomes an unreviewed case in memory (``harvest.case_from_run``: its own recorded tool
results, and model calls for ``model="recorded"``, are the fixtures) and goes through ``replay`` as any
case does: sealed the same way, a call the recording cannot answer gets ``no_fixture``, no tool body
runs. The runs stream from the store in batches of ``BATCH``; a batch's cases and results are dropped
once tallied, so memory grows with the changed runs the report lists, never with the runs read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .. import seam
from .._progress import Progress
from ..case import AgentCase, CaseFolder
from ..config import Config, ModelMode
from ..harvest import case_from_run
from ..model import Run
from ..redact import redaction_for
from ..replay import DEFAULT_CONCURRENCY, Sandbox, replay
from ._change import compare, run_key
from ._propose import Proposer
from ._report import ShadowReport
from ._select import Selection, production_runs

__all__ = ["BATCH", "shadow", "shadow_case"]

BATCH = 256  # runs replayed per call of the runner: enough to keep every worker busy, few enough to forget


def shadow_case(run: Run, config: Config) -> AgentCase:
    """``run`` as an unreviewed case: named by its trace and run ids, so no two runs share one."""
    case = case_from_run(run, config=config)
    case.id = run_key(run)
    return case


def shadow(
    store: Any,
    build_agent: Callable[..., Any],
    *,
    selection: Selection | None = None,
    candidate: str = "",
    config: Config | None = None,
    concurrency: int | None = None,
    timeout: float = 60.0,
    model: ModelMode = "live",
    seal: bool = True,
    allow_hosts: Iterable[str] = (),
    allow_commands: Iterable[str] = (),
    propose: CaseFolder | None = None,
    progress: Progress | None = None,
    sandbox: Sandbox | None = None,
) -> ShadowReport:
    """Replay the runs ``selection`` picks from ``store`` against ``build_agent`` and compare each with
    production. ``propose``: a cases folder where each run that changed for the worse (newly called
    a mutating tool, newly failed) becomes a pending case. ``progress(done, None)`` after each batch.
    ``sandbox``: tools that run for real against a sandbox (``shadow --sandbox``), as replay runs them."""
    config = config or Config()
    selection = selection or Selection()
    proposer = Proposer(propose, candidate) if propose is not None else None
    shard = f"{selection.shard[0]}/{selection.shard[1]}" if selection.shard else None
    since = selection.since if selection.since is None or isinstance(selection.since, str) else str(selection.since)
    ran: dict[str, int] | None = {} if sandbox is not None else None  # the sandbox tools' real calls
    report = ShadowReport(candidate=candidate, since=since, shard=shard, sealed=seal, model=model, sandbox=ran)
    done = 0
    for batch in _batches(production_runs(store, selection), report):
        cases = [shadow_case(run, config) for run in batch]
        replayed = replay(
            cases,
            build_agent,
            concurrency=concurrency or DEFAULT_CONCURRENCY,
            timeout=timeout,
            suite="shadow",
            prices=config if config.prices else None,
            ignore_args=config.ignore_args,
            redact=redaction_for(config),
            seal=seal,
            allow_hosts=allow_hosts,
            allow_commands=allow_commands,
            model=model,
            sandbox=sandbox,
        )
        report.refused += replayed.refused
        for run, case, result in zip(batch, cases, replayed.results, strict=True):
            change = compare(run, case, result, config)
            report.add(change, result, " -> ".join(run.trajectory()) or "(no tools)")
            if proposer is not None and change.worse:
                report.proposed.append(proposer.propose(case, change))
        done += len(batch)
        if progress is not None:
            progress(done, None)
    return report.finish()


def _batches(runs: Iterable[Run], report: ShadowReport) -> Iterator[list[Run]]:
    """The runs with a prompt, ``BATCH`` at a time; one without (nothing to ask the candidate) is skipped."""
    batch: list[Run] = []
    for run in _read(runs):
        if not run.prompt:
            report.skipped += 1
            continue
        batch.append(run)
        if len(batch) == BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


def _read(runs: Iterable[Run]) -> Iterator[Run]:
    """The store's runs, read as harvester's own work: between two batches the process is still sealed
    (the ``--agent`` import's seal, held until the replay ends), and a store may connect as it reads."""
    found = iter(runs)
    while True:
        with seam.own_work():
            run = next(found, None)
        if run is None:
            return
        yield run
