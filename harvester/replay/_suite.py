"""The suite: the plan's cases (``_plan``), at most ``concurrency`` trials at once under the calling
thread's deadlines, each case's result on disk as soon as the case finishes (handed to an ``on_case``
sink too), and one report over them at the end.

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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import seam
from .._progress import Progress
from ..case import AgentCase, Case, CaseFile
from ..checks import Panel
from ..config import MODEL_MODES, Config, ModelMode, command_problem, entries_problem, host_problem
from ..errors import AgentBuildError
from ..fixtures import FixtureTools
from ..redact import Redactor
from ..report import MAX_NO_FIXTURE_CALLS, Judging, Report, ResultSpool
from ._agent import factory_name
from ._c_calls import unchecked_note
from ._evaluate import Judge
from ._live import LiveCall
from ._plan import Planned, plan
from ._policy import Policy
from ._results import CaseSink, Finished, case_result
from ._sandbox import Sandbox, sandbox_env
from ._seal import last_seq, sealing, suite_refusals_since
from ._trial import Job, Outcome, Runner

__all__ = ["DEFAULT_CONCURRENCY", "INJECT_NEEDS_A_MODEL", "Progress", "Suite", "replay"]

DEFAULT_CONCURRENCY = 8


INJECT_NEEDS_A_MODEL = (
    "inject needs a live model: an injected failure changes what the model reads next, which no recording "
    "answers (use model live or recorded-then-live)"
)


def _entries(name: str, entries: Iterable[str], problem: Callable[[str], str | None]) -> tuple[str, ...]:
    """``entries`` read once, checked as the config checks its field of that name: a ValueError names the
    argument and its first bad entry, before any case runs (a lone string is not a list of entries)."""
    if isinstance(entries, (str, bytes)):
        raise ValueError(f"{name} must be a list of entries, not the string {entries!r}")
    listed = tuple(entries)
    why = entries_problem(listed, problem)
    if why is not None:
        raise ValueError(f"{name} {why}")
    return listed


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
    on_case: CaseSink | None = None,
    redact: bool | Redactor | Mapping[str, Any] = True,
) -> Report:
    """Replay every case ``trials`` times against fresh agents from ``build_agent`` and report.

    ``cases``: in memory, or read from a folder (``CaseFolder.each_accepted``: each is planned from that
    read and read again when it runs), or planned already (``plan``: taken as they are). ``suite``: a
    name, or anything with ``.name``/``.version`` (the suite manifest). ``prices``: a
    ``Config`` or its ``prices`` mapping (USD per 1k tokens), used when a run has tokens and no cost.
    ``ignore_args``: the project's ``{tool: [arg paths]}`` (the config's), left out of fixture matching
    along with each case's own. ``redact``: the redaction capture applied (``True``: the built-in
    rules, keyed by ``$HARVESTER_REDACT_KEY``; a ``Redactor``, or its rules; ``False``): a call whose
    args match a fixture only as that redaction writes them is served it. ``progress``: called as
    ``progress(done, total)`` each time a case-trial finishes. ``confirm``: a case that fails is rerun
    up to that many times; a rerun that passes makes it ``flaky`` (passed, its reruns counted as
    trials), all failing ``confirmed``; a case the seal refused something in fails, and is not rerun.
    ``seal``: refuse every connection and process start a case did not expect (its recording's model
    hosts, ``allow_hosts``, ``allow_commands``: docs/seal.md, checked as the config's fields are, a bad
    entry a ValueError before any case runs); ``False`` replays unsealed and says so.
    ``model``: ``live`` calls the agent's model; ``recorded`` answers every model call from the case's
    model fixtures (no model host is reachable) and fails a case whose request drifted with
    ``model_input_changed``; ``recorded-then-live`` continues a drifted case on the live model.
    ``sandbox``: tools that run for real (``replay --sandbox``), with its environment set and its hosts
    allowed by the seal while the replay runs; every other tool is served from fixtures.
    ``judges``: the panel that answers the ``judge:NAME`` checks of cases that name judges (None: they
    are not judged). ``on_case``: called with each case's ``Finished`` (the case, its trials' outcomes
    and runs, its result) as soon as the case has its verdict, from the calling thread. The report's
    results are on disk (a ``ResultSpool``, in plan order), written as cases finish: memory stays flat
    in the number of cases.
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
    allow_hosts = _entries("allow_hosts", allow_hosts, host_problem)
    allow_commands = _entries("allow_commands", allow_commands, command_problem)
    planned = plan(cases, inject, shard)
    limit = max(1, concurrency if concurrency is not None else DEFAULT_CONCURRENCY)
    price_config = prices if isinstance(prices, Config) or prices is None else Config(prices=dict(prices))
    hosts = (*allow_hosts, *(sandbox.hosts if sandbox is not None else ()))
    policy = Policy(hosts, allow_commands) if seal else None
    redactor = Redactor.from_option(redact)
    runner = Runner(build_agent, timeout, judge, price_config, ignore_args, policy, model, sandbox, judges, redactor)
    refused_before, sealed_before = seam.STATE.seq, last_seq()
    sealed = (
        sealing(runner.reach.suite([entry.model_hosts for entry in planned]))
        if runner.reach is not None
        else contextlib.nullcontext()
    )
    unchecked = unchecked_note() if policy is not None else None  # read once: each sealed case carries it
    spool = ResultSpool()  # each case's result goes to disk as the case finishes, in plan order
    builds = failed_builds = 0
    build_error: str | None = None

    def finish(index: int, case: Case, variant_of: str | None, outs: list[Outcome], verdict: str | None) -> None:
        nonlocal builds, failed_builds, build_error
        builds += len(outs)
        failed = [o for o in outs if o.build_failed]
        failed_builds += len(failed)
        build_error = build_error or next((o.error for o in failed if o.error), None)
        result = case_result(case, outs, variant_of, verdict)
        if unchecked is not None:
            result.notes.append(unchecked)
        spool.add(result, index)
        planned[index].release()
        if on_case is not None:
            with _callers():
                on_case(Finished(case, variant_of, outs, result))

    env = sandbox_env(sandbox.env) if sandbox is not None else contextlib.nullcontext()
    with seam.replaying_now(), sealed as suite_seal, env:
        runner.suite_seal = suite_seal
        runner.adapters.open(s for entry in planned for s in entry.instrumentation)
        try:
            held: dict[int, Ran] = {}  # failed cases a --confirm rerun may yet call flaky
            total = len(planned) * trials
            for ran in _drive(
                runner,
                ((i, entry.case(), entry.variant_of) for i, entry in enumerate(planned)),
                trials,
                limit,
                timeout,
                progress,
                total,
            ):
                index, _, _, outs = ran
                if confirm and _rerunnable(outs):
                    held[index] = ran
                else:
                    finish(*ran, None)
            for ran, verdict in _confirm(runner, held, confirm, limit, timeout):
                finish(*ran, verdict)
        finally:
            runner.adapters.close()
    if builds and failed_builds == builds:  # not one agent was built: the harness is wrong, not the cases
        raise AgentBuildError(factory_name(build_agent), build_error or "no agent built")
    name = suite if isinstance(suite, str) else getattr(suite, "name", None) or "suite"
    version = None if isinstance(suite, str) else getattr(suite, "version", None)
    outside = [r for r in suite_refusals_since(suite_seal, sealed_before) if r.seq not in runner.counted]
    refused = [  # each once, whichever cases were in flight; a seal refusal a case counted is that case's
        *(LiveCall(o.name, o.args, "refused") for o in seam.orphans_since(refused_before)),
        *(LiveCall(r.target, None, "sealed", r.summary()) for r in outside),
    ]
    # the suite seal keeps its newest refusals: those it let go are counted, not named
    untold = suite_seal.refused - len(runner.counted) - len(outside) if suite_seal is not None else 0
    report = Report(
        suite=name,
        suite_version=version,
        trials=trials,
        shard=f"{shard[0]}/{shard[1]}" if shard else None,
        refused=len(refused) + max(untold, 0),
        refused_calls=[c.summary() for c in refused[:MAX_NO_FIXTURE_CALLS]],
        sealed=policy is not None,
        model=model,
        sandbox=list(sandbox.tools) if sandbox is not None else None,
        judging=_judging(judges, planned),
    )
    report.results = spool
    return report


def _callers() -> contextlib.AbstractContextManager[None]:
    """How the caller's callbacks run (``on_case``, ``progress``): as the caller's own work, not the
    agent's, so a dashboard they report to is reached; in the ``harvester`` program (``seam.harness``)
    they are its own progress bar and report, which reach nothing, and run sealed: a signal handler of
    the agent's that fires on the main thread meanwhile is held to the seal."""
    return contextlib.nullcontext() if seam.STATE.harness else seam.own_work()


ToRun = tuple[int, Case, "str | None"]  # a case's place in the plan, the case, the case it is a variant of
Ran = tuple[int, Case, "str | None", list[Outcome]]  # ... and every trial's outcome


def _judging(panel: Panel | None, plan: list[Planned]) -> Judging | None:
    """The bill of the judges the plan's cases name (None when none names one, or no panel was given)."""
    named = {n for entry in plan for n in entry.judges}
    if panel is None or not named:
        return None
    if panel.skipped:
        return Judging(skipped=True)
    return Judging(judges=[t for t in panel.tallies() if t.name in named])


def _rerunnable(outs: list[Outcome]) -> bool:
    """A case ``--confirm`` may rerun: it failed, not errored, and the seal refused nothing in it (an
    attempt to leave the process is not flakiness: no rerun that passes can undo it)."""
    return not all(o.passed for o in outs) and not any(o.errored or o.sealed for o in outs)


def _confirm(
    runner: Runner, held: dict[int, Ran], confirm: int, limit: int, timeout: float
) -> Iterator[tuple[Ran, str | None]]:
    """Rerun each failed (not errored, not sealed) case up to ``confirm`` times, one round at a time,
    until a rerun passes ("flaky") or every rerun failed ("confirmed"); the reruns join the case's
    outcomes, and each case is handed back with its verdict as soon as it has one. A rerun the seal
    refused something in ends the case's reruns: it is "confirmed", and fails."""
    for _ in range(confirm):
        if not held:
            break
        again = [(i, case, variant_of) for i, case, variant_of, _ in held.values()]
        for index, _, _, outs in _drive(runner, again, 1, limit, timeout, None, 0):
            held[index][3].extend(outs)
            if outs and outs[0].passed:
                yield held.pop(index), "flaky"
            elif any(o.sealed for o in outs):
                yield held.pop(index), "confirmed"
    for ran in held.values():
        yield ran, "confirmed" if confirm else None


def _drive(
    runner: Runner,
    plan: Iterable[ToRun],
    trials: int,
    limit: int,
    timeout: float,
    progress: Progress | None,
    total: int,
) -> Iterator[Ran]:
    """Run every case-trial, at most ``limit`` at once, and give up on any that outlives ``timeout``;
    each case is handed back with its outcomes as soon as its last trial ends, in the order cases
    finish. Only the cases in flight are held: jobs are made from ``plan`` as slots free up."""
    jobs = ((Job(i, case, t), variant_of) for i, case, variant_of in plan for t in range(trials))
    outcomes: dict[int, Ran] = {}  # the cases in flight, with the trials finished so far
    done: queue.SimpleQueue[tuple[Job, Outcome]] = queue.SimpleQueue()
    inflight: dict[int, tuple[Job, float, int, FixtureTools]] = {}  # id(job) -> job, deadline, trace id, executor
    grace = 1.0  # an async agent is cancelled at the timeout: let it report that itself
    finished_n = 0
    exhausted = False
    while True:
        while not exhausted and len(inflight) < limit:
            planned = next(jobs, None)
            if planned is None:
                exhausted = True
                break
            job, variant_of = planned
            outcomes.setdefault(job.index, (job.index, job.case, variant_of, []))
            trace_id, tools = runner.start(job, done)
            inflight[id(job)] = (job, time.monotonic() + timeout + grace, trace_id, tools)
        if not inflight:
            return
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
                    finished.append((job, runner.abandon(trace_id, tools, timeout)))
        for job, outcome in finished:
            runner.answered.discard(id(job))
            if inflight.pop(id(job), None) is None:  # timed out already: the late answer is dropped
                continue
            outs = outcomes[job.index][3]
            outs.append(outcome)
            finished_n += 1
            if progress is not None:
                with _callers():
                    progress(finished_n, total)
            if len(outs) == trials:
                yield outcomes.pop(job.index)


@dataclass
class Suite:
    cases: Sequence[Case | AgentCase]
    name: str = "suite"
    version: str | None = None

    def run(self, build_agent: Callable[..., Any], **kwargs: Any) -> Report:
        """Run every case against a FRESH agent from ``build_agent()`` (keyword options as for ``replay``)."""
        return replay(self.cases, build_agent, suite=self, **kwargs)
