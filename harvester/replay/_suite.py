"""The suite: the plan's cases (``_plan``), at most ``concurrency`` trials at once under the calling
thread's deadlines, and one report at the end.

An agent that raises, hangs or returns garbage fails its case; a check that raises fails its case;
neither stops the suite, and the report is always written. Building the agent is told apart from
running it: a factory that fails for EVERY case is a harness error, ``AgentBuildError``, not a suite
of failed cases. The GIL is released while agents wait on I/O, so 16 trials in flight give close to
16x on IO-bound agents.
"""

from __future__ import annotations

import contextlib
import queue
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import seam
from .._progress import Progress
from ..case import AgentCase, Case, CaseFile
from ..checks import Panel
from ..config import MODEL_MODES, Config, ModelMode
from ..errors import AgentBuildError
from ..fixtures import FixtureTools
from ..report import MAX_NO_FIXTURE_CALLS, Judging, Report
from ._agent import factory_name
from ._evaluate import Judge
from ._live import LiveCall
from ._plan import Planned, plan
from ._policy import Policy
from ._results import case_result
from ._sandbox import Sandbox, sandbox_env
from ._seal import last_seq, sealing, suite_refusals_since
from ._trial import Job, Outcome, Runner

__all__ = ["DEFAULT_CONCURRENCY", "INJECT_NEEDS_A_MODEL", "Progress", "Suite", "replay"]

DEFAULT_CONCURRENCY = 8


INJECT_NEEDS_A_MODEL = (
    "inject needs a live model: an injected failure changes what the model reads next, which no recording "
    "answers (use model live or recorded-then-live)"
)


def replay(
    cases: Iterable[AgentCase | Case | CaseFile | Planned],
    build_agent: Callable[..., Any],
    *,
    trials: int = 1,
    confirm: int = 0,
    concurrency: int | None = None,
    inject: bool = False,
    timeout: float = 60.0,
    shard: tuple[int, int] | None = None,
    judge: Judge | None = None,
    progress: Progress | None = None,
    suite: Any = None,
    prices: Config | Mapping[str, Any] | None = None,
    ignore_args: Mapping[str, Sequence[str]] | None = None,
    seal: bool = True,
    allow_hosts: Iterable[str] = (),
    allow_commands: Iterable[str] = (),
    model: ModelMode = "live",
    sandbox: Sandbox | None = None,
    judges: Panel | None = None,
) -> Report:
    """Replay every case ``trials`` times against fresh agents from ``build_agent`` and report.

    ``cases``: in memory, or read from a folder (``CaseFolder.each_accepted``: each is planned from that
    read and read again when it runs), or planned already (``plan``: taken as they are). ``suite``: a
    name, or anything with ``.name``/``.version`` (the suite manifest). ``prices``: a
    ``Config`` or its ``prices`` mapping (USD per 1k tokens), used when a run has tokens and no cost.
    ``ignore_args``: the project's ``{tool: [arg paths]}`` (the config's), left out of fixture matching
    along with each case's own. ``progress``: called as ``progress(done, total)`` each time a
    case-trial finishes. ``confirm``: a case that fails is rerun up to that many times; a rerun that
    passes makes it ``flaky`` (passed, its reruns counted as trials), all failing ``confirmed``.
    ``seal``: refuse every connection and process start a case did not expect (its recording's model
    hosts, ``allow_hosts``, ``allow_commands``: docs/seal.md); ``False`` replays unsealed and says so.
    ``model``: ``live`` calls the agent's model; ``recorded`` answers every model call from the case's
    model fixtures (no model host is reachable) and fails a case whose request drifted with
    ``model_input_changed``; ``recorded-then-live`` continues a drifted case on the live model.
    ``sandbox``: tools that run for real (``replay --sandbox``), with its environment set and its hosts
    allowed by the seal while the replay runs; every other tool is served from fixtures.
    ``judges``: the panel that answers the ``judge:NAME`` checks of cases that name judges (None: they
    are not judged).
    """
    if model not in MODEL_MODES:
        raise ValueError(f"model must be one of {', '.join(MODEL_MODES)}, got {model!r}")
    if inject and model == "recorded":
        raise ValueError(INJECT_NEEDS_A_MODEL)
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    if confirm < 0:
        raise ValueError(f"confirm must be >= 0, got {confirm}")
    if timeout <= 0:
        raise ValueError(f"timeout must be > 0, got {timeout}")
    planned = plan(cases, inject, shard)
    limit = max(1, concurrency if concurrency is not None else DEFAULT_CONCURRENCY)
    price_config = prices if isinstance(prices, Config) or prices is None else Config(prices=dict(prices))
    hosts = (*allow_hosts, *(sandbox.hosts if sandbox is not None else ()))
    policy = Policy(hosts, allow_commands) if seal else None
    runner = Runner(build_agent, timeout, judge, price_config, ignore_args, policy, model, sandbox, judges)
    refused_before, sealed_before = seam.STATE.seq, last_seq()
    # A process the agent starts seals itself with what any case of the plan may reach.
    sealed = (
        sealing(policy, policy.with_hosts(h for entry in planned for h in runner.hosts(entry.model_hosts)))
        if policy is not None
        else contextlib.nullcontext()
    )
    env = sandbox_env(sandbox.env) if sandbox is not None else contextlib.nullcontext()
    with seam.replaying_now(), sealed as suite_seal, env:
        runner.suite_seal = suite_seal
        runner.adapters.open(s for entry in planned for s in entry.instrumentation)
        try:
            outcomes = _drive(runner, planned, trials, limit, timeout, progress)
            confirmed = _confirm(runner, planned, outcomes, confirm, limit, timeout)
        finally:
            runner.adapters.close()
    builds = [o for outs in outcomes for o in outs]
    if builds and all(o.build_failed for o in builds):  # not one agent was built: the harness is wrong, not the cases
        raise AgentBuildError(factory_name(build_agent), builds[0].error or "no agent built")
    name = suite if isinstance(suite, str) else getattr(suite, "name", None) or "suite"
    version = None if isinstance(suite, str) else getattr(suite, "version", None)
    refused = [  # each once, whichever cases were in flight
        *(LiveCall(o.name, o.args, "refused") for o in seam.orphans_since(refused_before)),
        *(LiveCall(r.target, None, "sealed", r.summary()) for r in suite_refusals_since(suite_seal, sealed_before)),
    ]
    return Report(
        suite=name,
        suite_version=version,
        trials=trials,
        shard=f"{shard[0]}/{shard[1]}" if shard else None,
        results=[
            case_result(entry.case(), outs, entry.variant_of, confirmed[i])
            for i, (entry, outs) in enumerate(zip(planned, outcomes))
        ],
        refused=len(refused),
        refused_calls=[c.summary() for c in refused[:MAX_NO_FIXTURE_CALLS]],
        sealed=policy is not None,
        model=model,
        sandbox=list(sandbox.tools) if sandbox is not None else None,
        judging=_judging(judges, planned),
    )


def _judging(panel: Panel | None, plan: list[Planned]) -> Judging | None:
    """The bill of the judges the plan's cases name (None when none names one, or no panel was given)."""
    named = {n for entry in plan for n in entry.judges}
    if panel is None or not named:
        return None
    if panel.skipped:
        return Judging(skipped=True)
    return Judging(judges=[t for t in panel.tallies() if t.name in named])


def _confirm(
    runner: Runner,
    plan: list[Planned],
    outcomes: list[list[Outcome]],
    confirm: int,
    limit: int,
    timeout: float,
) -> list[str | None]:
    """Rerun each failed (not errored) case up to ``confirm`` times, one round at a time, until a rerun
    passes ("flaky") or every rerun failed ("confirmed"); the reruns join the case's outcomes."""
    verdicts: list[str | None] = [None] * len(plan)
    pending = [
        i for i, outs in enumerate(outcomes) if not all(o.passed for o in outs) and not any(o.errored for o in outs)
    ]
    for _ in range(confirm):
        if not pending:
            break
        reruns = _drive(runner, [plan[i] for i in pending], 1, limit, timeout, None)
        still = []
        for i, outs in zip(pending, reruns):
            outcomes[i].extend(outs)
            if outs and outs[0].passed:
                verdicts[i] = "flaky"
            else:
                still.append(i)
        pending = still
    if confirm:
        for i in pending:
            verdicts[i] = "confirmed"
    return verdicts


def _drive(
    runner: Runner,
    plan: list[Planned],
    trials: int,
    limit: int,
    timeout: float,
    progress: Progress | None,
) -> list[list[Outcome]]:
    """Run every case-trial, at most ``limit`` at once, and give up on any that outlives ``timeout``."""
    jobs = (Job(i, entry.case(), t) for i, entry in enumerate(plan) for t in range(trials))  # each read at its turn
    outcomes: list[list[Outcome]] = [[] for _ in plan]
    total = remaining = len(plan) * trials
    done: queue.SimpleQueue[tuple[Job, Outcome]] = queue.SimpleQueue()
    inflight: dict[int, tuple[Job, float, int, FixtureTools]] = {}  # id(job) -> job, deadline, trace id, executor
    grace = 1.0  # an async agent is cancelled at the timeout: let it report that itself
    while remaining:
        while len(inflight) < limit:
            job = next(jobs, None)
            if job is None:
                break
            trace_id, tools = runner.start(job, done)
            inflight[id(job)] = (job, time.monotonic() + timeout + grace, trace_id, tools)
        # The deadline is the agent's: once it answered, its checks and judges take what they take (a
        # judge is bounded by its own timeout), and a slow judge never reads as an agent that hung.
        running = [entry[1] for entry in inflight.values() if id(entry[0]) not in runner.answered]
        wait = min(running) - time.monotonic() if running else None
        try:
            finished = [done.get(timeout=None if wait is None else max(wait, 0.0))]
        except queue.Empty:
            now = time.monotonic()
            finished = []
            for job, deadline, trace_id, tools in list(inflight.values()):
                if deadline <= now and id(job) not in runner.answered:  # a hung agent: abandon it, fail its case
                    runner.release(trace_id)
                    finished.append(
                        (
                            job,
                            Outcome(
                                False,
                                [],
                                None,
                                f"ReplayTimeout: agent did not finish within {timeout:g}s",
                                timeout * 1000,
                                tools,
                            ),
                        )
                    )
        for job, outcome in finished:
            runner.answered.discard(id(job))
            if inflight.pop(id(job), None) is None:  # timed out already: the late answer is dropped
                continue
            outcomes[job.index].append(outcome)
            remaining -= 1
            if progress is not None:
                progress(total - remaining, total)
    return outcomes


@dataclass
class Suite:
    cases: Sequence[Case | AgentCase]
    name: str = "suite"
    version: str | None = None

    def run(self, build_agent: Callable[..., Any], **kwargs: Any) -> Report:
        """Run every case against a FRESH agent from ``build_agent()`` (keyword options as for ``replay``)."""
        return replay(self.cases, build_agent, suite=self, **kwargs)
