"""One case-trial: a fresh agent on its own thread, under its own root span, its tools served by its
own executor; what it did, observed and judged, comes back as an ``Outcome``.

A thread per trial, rather than one shared event loop, because agents are mostly sync code blocking
on network I/O, because a hung sync agent can only be abandoned (not cancelled) and must not hold
anything another case needs, and because an async agent then gets a fresh event loop of its own
(framework clients bound to a loop never leak across cases).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import ReadableSpan

from .. import adapters, seam
from .._threads import case_thread
from ..case import AgentCase, Case
from ..checks import Panel
from ..config import Config, ModelMode
from ..errors import ReplayTimeout, ToolFailure
from ..fixtures import FixtureTools
from ..model import ErrorInfo, Run
from ..redact import Redactor
from ..report import CheckResult, ModelServed
from ._agent import wants
from ._evaluate import Judge, evaluate, judged, recorded_calls_only, recordings_consumed
from ._live import LiveCall, live_calls, models_traced, no_live_calls
from ._models import RecordedModel, recorded_model
from ._observe import observed_run, observer
from ._policy import Policy
from ._reach import Reach
from ._refusal import Refusal, sealed_check
from ._sandbox import Sandbox, SandboxTools
from ._seal import Seal, last_seq, suite_refusals_since, within

__all__ = ["Attempt", "Done", "Job", "Outcome", "Runner", "Seen", "blank_spec"]


@dataclass
class Job:
    index: int  # position of the case in the plan
    case: Case
    trial: int


@dataclass
class Attempt:
    """What a trial's thread saw of its agent run, handed to the judging: the answer or the error, the
    spans it left, whether the factory built it and took the case's history."""

    job: Job
    tools: FixtureTools
    seen: Seen
    started: float  # perf_counter at the thread's start
    answer: Any = None
    error: BaseException | None = None
    spans: list[ReadableSpan] = field(default_factory=list)
    built: bool = False
    handed: bool = True


@dataclass
class Outcome:
    passed: bool
    checks: list[CheckResult]
    run: Run | None
    error: str | None
    duration_ms: float
    tools: FixtureTools | None
    build_failed: bool = False  # the factory raised or built something unusable: the agent never ran
    live: list[LiveCall] | None = None
    harness_failed: bool = False  # harvester itself raised reading or checking the run
    model: ModelServed | None = None  # how its model was served (None: live)
    # The seal refused something while it ran (its failed ``sealed`` check): the agent, or code running
    # then, tried to leave the process. No other trial or --confirm rerun makes such a case pass.
    sealed: bool = False

    @property
    def errored(self) -> bool:
        """The harness could not evaluate the agent here (no agent built, a framework left unguarded, a
        recording that cannot serve the model, harvester's own error): the case is ``errored``, not
        failed, and stays out of pass rates."""
        return (
            self.build_failed
            or self.harness_failed
            or any(c.name in ("hermetic", "recorded_model") and c.passed is False for c in self.checks)
        )


Done = queue.SimpleQueue[tuple[Job, Outcome]]


class Seen(NamedTuple):
    """Where a case-trial started: the refused calls and seal refusals before it are not its own."""

    orphans: int
    refusals: int
    seal: Seal | None  # its own seal (None: the replay is not sealed)
    models: RecordedModel | None  # its model server (None: the live model answers)


def _sealed_calls(refusals: list[Refusal], dropped: int) -> list[LiveCall]:
    """What the seal refused, as live calls; ``dropped``: refused too, but no longer kept (counted, not
    named)."""
    calls = [LiveCall(r.during or r.target, None, "sealed", r.summary()) for r in refusals]
    return calls + calls[-1:] * dropped


def blank_spec(case: Case) -> AgentCase:
    """The spec of an in-code case: nothing recorded, so every tool call it makes is a ``no_fixture``."""
    return AgentCase.model_construct(id=case.id, prompt=case.task, status="accepted")


class Runner:
    """What every job shares: the factory, the observer, the adapters, prices and the judge."""

    def __init__(
        self,
        build_agent: Callable[..., Any],
        timeout: float,
        judge: Judge | None,
        prices: Config | None,
        ignore_args: Mapping[str, Sequence[str]] | None = None,
        policy: Policy | None = None,
        model: ModelMode = "live",
        sandbox: Sandbox | None = None,
        panel: Panel | None = None,
        redactor: Redactor | None = None,
    ) -> None:
        self.build_agent = build_agent
        self.redactor = redactor  # the redaction capture applied: fixtures' args may hold its placeholders
        self.sandbox = sandbox  # None: every tool is served from fixtures
        self.panel = panel
        self.model = model
        self.reach = Reach(policy, model) if policy is not None else None  # None: the replay is not sealed
        self.suite_seal: Seal | None = None  # set by the suite while its seal is on
        self.counted: set[int] = set()  # the suite seal's refusals (by seq) a case counts as its own
        self._counting = threading.Lock()
        self.ignore_args = ignore_args
        self.wants = wants(build_agent)
        self.timeout = timeout
        self.judge = judge
        self.prices = prices
        self.tracer, self.collector = observer()
        self.adapters = adapters.Session()
        self.answered: set[int] = set()  # id() of the jobs whose agent returned or raised: now being judged
        self._seals: dict[int, Seal] = {}  # by trace id, the seals of the case-trials not yet judged

    def start(self, job: Job, done: Done) -> tuple[int, FixtureTools]:
        """Start the job's thread; returns the trace id its spans are keyed by, and its executor."""
        spec = job.case.spec if job.case.spec is not None else blank_spec(job.case)
        tools = (
            FixtureTools(spec, ignore_args=self.ignore_args, redactor=self.redactor)
            if self.sandbox is None
            else SandboxTools(spec, self.sandbox, ignore_args=self.ignore_args, redactor=self.redactor)
        )
        root = self.tracer.start_span(
            f"{seam.ROOT_PREFIX}{job.case.id}",
            context=otel_context.Context(),
            attributes={seam.CASE_ATTRIBUTE: job.case.id, "harvester.trial": job.trial},
        )
        trace_id = root.get_span_context().trace_id
        seam.remember(trace_id)
        if self.collector is not None:
            self.collector.watch(trace_id)
        recorded = job.case.spec.recorded.model_hosts if job.case.spec is not None else ()
        seal = Seal(self.reach.case(recorded), job.case.id) if self.reach is not None else None
        models = recorded_model(job.case.spec, self.model)
        refusal = models.refusal() if models is not None else None
        if refusal is not None:  # the recording cannot serve this case's model: it is not run
            root.end()
            self.release(trace_id)
            assert models is not None
            done.put((job, Outcome(False, [refusal], None, None, 0.0, tools, model=models.result())))
            return trace_id, tools
        ctx = contextvars.copy_context()
        seen = Seen(seam.STATE.seq, last_seq(), seal, models)
        if seal is not None:
            self._seals[trace_id] = seal
        # a daemon (a hung agent is abandoned); the threads the agent makes on it are not, as in production
        case_thread(ctx.run, (self._body, job, root, trace_id, tools, seen, done), f"harvester-{job.case.id}").start()
        return trace_id, tools

    def release(self, trace_id: int) -> list[ReadableSpan]:
        return self.collector.release(trace_id) if self.collector is not None else []

    def abandon(self, trace_id: int, tools: FixtureTools, timeout: float) -> Outcome:
        """The outcome of a case-trial whose agent outlived ``timeout``: failed, with what its seal refused
        so far (closed: what the agent goes on to try is the suite's, failing the cases then in flight)."""
        self.release(trace_id)
        seal = self._seals.pop(trace_id, None)
        own, total = seal.close() if seal is not None else ([], 0)
        check = sealed_check(own, total)
        live = _sealed_calls(own, total - len(own))
        error = f"ReplayTimeout: agent did not finish within {timeout:g}s"
        checks = [check] if check is not None else []
        return Outcome(False, checks, None, error, timeout * 1000, tools, live=live, sealed=check is not None)

    def _body(self, job: Job, root: Any, trace_id: int, tools: FixtureTools, seen: Seen, done: Done) -> None:
        attempt = Attempt(job, tools, seen, time.perf_counter())
        token = otel_context.attach(within(seam.case_context(root, tools, seen.models), seen.seal))
        try:
            target = self._build(tools, job.case)
            attempt.built = True
            target, attempt.handed = adapters.with_history(target, job.case.spec)
            attempt.answer = self._run(target, job.case.task)
        except BaseException as exc:
            attempt.error = exc
        finally:
            otel_context.detach(token)
            root.end()
            tools.close()  # a thread of this case that goes on cannot reach the next case's fixtures
            self.answered.add(id(job))
        attempt.spans = self.release(trace_id)
        try:
            outcome = self._judge(attempt)
        except Exception as exc:  # harvester's own failure: the case is errored, never the agent's fault
            outcome = Outcome(
                False,
                [CheckResult(name="harness", passed=False, detail=f"{type(exc).__name__}: {exc}")],
                None,
                f"harness error: {type(exc).__name__}: {exc}",
                (time.perf_counter() - attempt.started) * 1000,
                tools,
                harness_failed=True,
            )
        self._seals.pop(trace_id, None)
        done.put((job, outcome))

    def _judge(self, attempt: Attempt) -> Outcome:
        """The run read from the case's spans, and every check of it."""
        job, tools, seen, spans = attempt.job, attempt.tools, attempt.seen, attempt.spans
        answer, error = attempt.answer, attempt.error
        try:
            run = observed_run(job.case, answer, spans, tools, self.prices)
        except TypeError as exc:  # garbage returned and no span to read it from
            error, run = exc, observed_run(job.case, None, spans, tools, self.prices)
        if error is not None:
            # What the run did before it failed still counts: a forbidden call that executed is reported.
            run = run.model_copy(
                update={
                    "stop": "error",
                    "answer": None,
                    "error": ErrorInfo(type=_type_name(error), message=_message(error)),
                }
            )
        denied = job.case.spec.recorded.denied if job.case.spec is not None else ()
        refused = [LiveCall(o.name, o.args, "refused") for o in seam.orphans_since(seen.orphans)]
        live = live_calls(run, tools, spans, denied)
        for call in refused:  # a request refused off the case's context is that call, not another one
            same = next((c for c in live if c.how == "unserved" and c.name == call.name), None)
            if same is not None:
                live.remove(same)
        live += refused
        outside = suite_refusals_since(self.suite_seal, seen.refusals)  # first: it reads children's back
        abandoned = seen.seal is not None and seen.seal.closed  # timed out: its outcome is dropped, counts none
        own, own_total = seen.seal.close() if seen.seal is not None else ([], 0)
        sealed = [*own, *outside]
        counted = self._count(outside) if not abandoned else []
        live += _sealed_calls([*own, *counted], own_total - len(own))
        # a judge function is the caller's, not the agent's: the seal lets it ask its model (without one the
        # checks reach nothing, and stay sealed: a finalizer of the agent's the collector runs here is not ours)
        with seam.own_work() if self.judge is not None else contextlib.nullcontext():
            checks = evaluate(job.case, run, judge=self.judge)
        breach = sealed_check(sealed, own_total + len(outside))
        checks.extend(
            c
            for c in (
                seen.models.check() if seen.models is not None else None,
                breach,
                recorded_calls_only(job.case, tools),
                recordings_consumed(job.case, tools),
                no_live_calls([c for c in live if c.how != "sealed"]),
                self._guarded(),
                None if attempt.handed else _history_lost(job.case),
                models_traced(
                    run, self.adapters.untraced(job.case.spec.recorded.instrumentation if job.case.spec else ())
                ),
            )
            if c is not None
        )
        checks.extend(judged(job.case, run, self.panel, checks) if error is None else ())
        passed = error is None and all(c.passed is not False for c in checks)
        message = f"{_type_name(error)}: {_message(error)}" if error is not None else None
        return Outcome(
            passed,
            checks,
            _kept(run),
            message,
            (time.perf_counter() - attempt.started) * 1000,
            tools,
            build_failed=not attempt.built,
            live=live,
            model=seen.models.result() if seen.models is not None else None,
            sealed=breach is not None,
        )

    def _count(self, outside: list[Refusal]) -> list[Refusal]:
        """The suite seal's refusals made while this case ran (a process the agent started, code without
        the case's context) that no other case counted yet: they fail every case then in flight, and
        count once in ``live_tool_calls``, in the first of those cases to be judged. The suite counts
        those no case was there to count (``counted``)."""
        with self._counting:
            mine = [r for r in outside if r.seq not in self.counted]
            self.counted.update(r.seq for r in mine)
        return mine

    def _guarded(self) -> CheckResult | None:
        """A failed check when a framework in use could not be guarded: nothing stopped its tools."""
        if not self.adapters.failed:
            return None
        why = "; ".join(f"{name}: {err}" for name, err in sorted(self.adapters.failed.items()))
        return CheckResult(
            name="hermetic",
            passed=False,
            detail=f"harvester could not route this framework's tool calls ({why}): its tools "
            "may have run for real; upgrade harvester or pin the framework",
        )

    def _build(self, tools: FixtureTools, case: Case) -> Callable[[str], Any]:
        """The agent's entry point from a fresh ``factory()``; whatever fails here is the factory's fault."""
        kwargs: dict[str, Any] = {}
        if "tools" in self.wants:
            kwargs["tools"] = tools
        if "case" in self.wants:
            kwargs["case"] = case.spec if case.spec is not None else case
        agent = self.build_agent(**kwargs)
        self.adapters.refresh()  # the factory may have imported its framework just now
        target = adapters.entry(agent, case.spec if case.spec is not None else case)
        if target is None:
            target = agent if callable(agent) else getattr(agent, "run", None)
        if not callable(target):
            raise TypeError(
                f"the factory built a {type(agent).__name__}, which is neither callable, nor has "
                ".run(prompt), nor is an agent of a framework harvester knows"
            )
        return target

    def _run(self, target: Callable[[str], Any], prompt: str) -> Any:
        result = target(prompt)
        if inspect.isawaitable(result):
            result = asyncio.run(_within(result, self.timeout))
        return result


def _history_lost(case: Case) -> CheckResult:
    """A later turn replayed without its conversation answers a question nobody asked: it fails."""
    n = len(case.spec.history) if case.spec is not None else 0
    return CheckResult(
        name="history",
        passed=False,
        detail=f"the case holds {n} earlier message{'s' * (n != 1)} but the agent cannot be given them: "
        "give the callable the factory returns a `history` parameter (see docs/replay.md)",
    )


def _type_name(error: BaseException) -> str:
    """The error's type as the report names it: a replayed tool failure by the type it was recorded as."""
    return error.type if isinstance(error, ToolFailure) else type(error).__name__


def _message(error: BaseException) -> str:
    return error.message if isinstance(error, ToolFailure) else str(error)


async def _within(awaitable: Any, timeout: float) -> Any:
    """Await the agent for at most ``timeout`` seconds. The agent's own exceptions (its own
    ``TimeoutError`` included) come out as they are; only the harness's deadline says it gave up."""
    task = asyncio.ensure_future(awaitable)
    done, _ = await asyncio.wait({task}, timeout=timeout)
    if not done:
        task.cancel()
        await asyncio.wait({task}, timeout=1.0)  # let it unwind (its own cleanup, spans ended)
        raise ReplayTimeout(f"agent did not finish within {timeout:g}s")
    return task.result()


def _kept(run: Run | None) -> Run | None:
    """What the report needs of a judged trial's run: not its model calls' requests and texts (each
    request is the conversation so far, the bulk of a run), which a suite would otherwise hold for every
    case until its report is made."""
    if run is None or not any(c.request is not None or c.text is not None for c in run.llm_calls):
        return run
    calls = [c.model_copy(update={"request": None, "text": None}) for c in run.llm_calls]
    return run.model_copy(update={"llm_calls": calls})
