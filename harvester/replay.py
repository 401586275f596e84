"""The runner: a fresh agent per case and trial, tools served from fixtures, every check evaluated, one report.

An agent that raises, hangs or returns garbage fails its case; a check that raises fails its case;
neither stops the suite, and the report is always written. Building the agent is told apart from
running it: a factory that fails (raises, wrong signature, builds nothing callable) for EVERY case is
a harness error, ``AgentBuildError``, not a suite of failed cases; for some cases only, those fail.

The run is observed the way production observes it: through its spans, normalized by the SAME
``conventions.runs_from_spans``. Each case-trial runs under its own root span
(``harvester.replay <case>``); a span processor on the global SDK provider collects the spans of the
traces being replayed, so concurrent cases never mix. An agent that emits no agent span (a bare
function) still gets a Run: its answer plus the executor's log of tool calls.

Concurrency: one thread per in-flight case-trial, at most ``concurrency`` at once, supervised by the
calling thread, which enforces deadlines. A thread per job, rather than one shared event loop, because
agents are mostly sync code blocking on network I/O, because a hung sync agent can only be abandoned
(not cancelled) and must not hold anything another case needs, and because an async agent then gets a
fresh event loop of its own (framework clients bound to a loop never leak across cases). The GIL is
released while agents wait on I/O, so 16 threads give close to 16x on IO-bound agents.
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import importlib
import inspect
import os
import queue
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider

from . import adapters, seam
from . import checks as checklib
from .canonical import canonical_json
from .case import AgentCase, Case
from .config import Config
from .conventions import agent_names, runs_from_spans
from .errors import AgentBuildError, AgentLoadError, ReplayTimeout, ToolFailure
from .fixtures import FixtureTools, ToolLog, recovery_variants
from .model import ErrorInfo, Run, ToolCall, Usage
from .report import MAX_NO_FIXTURE_CALLS, CaseResult, CheckResult, Divergence, Injected, NoFixtureCall, Report

DEFAULT_CONCURRENCY = 8
Judge = Callable[[Case, Run], "tuple[bool, str]"]


# -- loading the agent ------------------------------------------------------------------------
def load_agent(spec: str) -> Callable[..., Any]:
    """``"pkg.module:attr"`` -> the agent factory, or an ``AgentLoadError`` that says what is wrong."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise AgentLoadError(f"--agent {spec!r}: expected module:attr (e.g. myapp.agent:build)")
    # As with ``python -m``: the app's own modules in the working directory import without installing it
    # (the console script's sys.path starts at its bin folder, not the cwd).
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - whatever the import raised, the user needs one line
        raise AgentLoadError(f"--agent {spec!r}: cannot import {module_name} ({type(exc).__name__}: {exc})") from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise AgentLoadError(f"--agent {spec!r}: {module_name} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise AgentLoadError(f"--agent {spec!r}: {attr} is a {type(obj).__name__}, not a callable that builds an agent")
    return obj


def _factory_name(factory: Callable[..., Any]) -> str:
    """``module:qualname`` as ``--agent`` spells it, else the repr."""
    module, name = getattr(factory, "__module__", None), getattr(factory, "__qualname__", None)
    return f"{module}:{name}" if module and name else repr(factory)


def _wants(factory: Callable[..., Any]) -> set[str]:
    """Which of ``tools`` (the case's executor) and ``case`` (the case replayed) the factory takes."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return set()
    return {name for name in ("tools", "case") if name in params}


# -- observing spans --------------------------------------------------------------------------
class _SpanCollector(SpanProcessor):
    """Keeps the finished spans of the traces being replayed, and nothing else (one dict lookup per span)."""

    def __init__(self) -> None:
        self._buckets: dict[int, list[ReadableSpan]] = {}

    def watch(self, trace_id: int) -> None:
        self._buckets[trace_id] = []

    def release(self, trace_id: int) -> list[ReadableSpan]:
        return self._buckets.pop(trace_id, [])

    def on_end(self, span: ReadableSpan) -> None:
        bucket = self._buckets.get(span.context.trace_id)
        if bucket is not None:
            bucket.append(span)


_collectors: "weakref.WeakKeyDictionary[Any, _SpanCollector]" = weakref.WeakKeyDictionary()
_install_lock = threading.Lock()


def _observer() -> tuple[trace.Tracer, Optional[_SpanCollector]]:
    """The tracer for root spans and the collector on the global provider (installed once).

    No provider set yet: set an SDK one, so instrumented frameworks have somewhere to send spans. A
    provider that is not the SDK's cannot take processors: cases then fall back to the returned answer.
    """
    with _install_lock:
        provider = trace.get_tracer_provider()
        if isinstance(provider, trace.ProxyTracerProvider):
            trace.set_tracer_provider(TracerProvider())
            provider = trace.get_tracer_provider()
        collector = _collectors.get(provider)
        if collector is None and isinstance(provider, TracerProvider):
            collector = _collectors[provider] = _SpanCollector()
            provider.add_span_processor(collector)
        return provider.get_tracer("harvester.replay"), collector


# -- one case-trial ---------------------------------------------------------------------------
@dataclass
class _Job:
    index: int  # position of the case in the plan
    case: Case
    trial: int


@dataclass
class LiveCall:
    """A tool call that did not go through the case's executor: ``ran`` (its tool span says it executed),
    ``unserved`` (requested, and nothing the executor saw answered it) or ``refused`` (it had lost the
    case's context, so the seam refused it)."""

    name: str
    args: Any
    how: str

    def summary(self) -> str:
        args = canonical_json(self.args) if self.args is not None else "(args not captured)"
        if self.how == "ran":
            return f"{self.name}({args}) ran for real: a tool span the executor never served"
        if self.how == "unserved":
            return (f"{self.name}({args}) was requested and never reached the executor: denied where the "
                    "recording ran it, or run where harvester cannot see (a process pool, a tool class with its "
                    "own invoke, the function called directly)")
        return f"{self.name}({args}) was called outside its case (a thread that lost or outlived it); refused"


@dataclass
class _Outcome:
    passed: bool
    checks: list[CheckResult]
    run: Optional[Run]
    error: Optional[str]
    duration_ms: float
    tools: Optional[FixtureTools]
    build_failed: bool = False  # the factory raised or built something unusable: the agent never ran
    live: Optional[list[LiveCall]] = None


Done = "queue.SimpleQueue[tuple[_Job, _Outcome]]"


def _blank(case: Case) -> AgentCase:
    """The spec of an in-code case: nothing recorded, so every tool call it makes is a ``no_fixture``."""
    return AgentCase.model_construct(id=case.id, prompt=case.task, status="accepted")


class _Runner:
    """What every job shares: the factory, the observer, the adapters, prices and the judge."""

    def __init__(self, build_agent: Callable[..., Any], timeout: float, judge: Optional[Judge],
                 prices: Optional[Config], ignore_args: Optional[Mapping[str, Sequence[str]]] = None) -> None:
        self.build_agent = build_agent
        self.ignore_args = ignore_args
        self.wants = _wants(build_agent)
        self.timeout = timeout
        self.judge = judge
        self.prices = prices
        self.tracer, self.collector = _observer()
        self.adapters = adapters.Session()

    def start(self, job: _Job, done: Done) -> tuple[int, FixtureTools]:
        """Start the job's thread; returns the trace id its spans are keyed by, and its executor."""
        tools = FixtureTools(job.case.spec if job.case.spec is not None else _blank(job.case),
                             ignore_args=self.ignore_args)
        root = self.tracer.start_span(f"{seam.ROOT_PREFIX}{job.case.id}", context=otel_context.Context(),
                                      attributes={seam.CASE_ATTRIBUTE: job.case.id, "harvester.trial": job.trial})
        trace_id = root.get_span_context().trace_id
        seam.remember(trace_id)
        if self.collector is not None:
            self.collector.watch(trace_id)
        ctx = contextvars.copy_context()
        threading.Thread(target=ctx.run, args=(self._body, job, root, trace_id, tools, seam.STATE.seq, done),
                         name=f"harvester-{job.case.id}", daemon=True).start()
        return trace_id, tools

    def release(self, trace_id: int) -> list[ReadableSpan]:
        return self.collector.release(trace_id) if self.collector is not None else []

    def _body(self, job: _Job, root: Any, trace_id: int, tools: FixtureTools, orphans_seen: int, done: Done) -> None:
        started = time.perf_counter()
        answer: Any = None
        error: Optional[BaseException] = None
        built = False
        token = otel_context.attach(seam.case_context(root, tools))
        try:
            target = self._build(tools, job.case)
            built = True
            answer = self._run(target, job.case.task)
        except BaseException as exc:  # noqa: BLE001 - an agent that raises (even SystemExit) fails its case only
            error = exc
        finally:
            otel_context.detach(token)
            root.end()
            tools.close()  # a thread of this case that goes on cannot reach the next case's fixtures
        spans = self.release(trace_id)
        try:
            run = self._observe(job, answer, spans, tools)
        except TypeError as exc:  # garbage returned and no span to read it from
            error, run = exc, self._observe(job, None, spans, tools)
        if error is not None:
            # What the run did before it failed still counts: a forbidden call that executed is reported.
            run = run.model_copy(update={"stop": "error", "answer": None,
                                         "error": ErrorInfo(type=_type_name(error), message=_message(error))})
        denied = job.case.spec.recorded.denied if job.case.spec is not None else ()
        refused = [LiveCall(o.name, o.args, "refused") for o in seam.orphans_since(orphans_seen)]
        live = live_calls(run, tools, spans, denied)
        for call in refused:  # a request refused off the case's context is that call, not another one
            same = next((c for c in live if c.how == "unserved" and c.name == call.name), None)
            if same is not None:
                live.remove(same)
        live += refused
        checks = evaluate(job.case, run, judge=self.judge)
        checks.extend(c for c in (_recorded_calls_only(job.case, tools), _no_live_calls(live),
                                  self._guarded()) if c is not None)
        passed = error is None and all(c.passed for c in checks)
        message = f"{_type_name(error)}: {_message(error)}" if error is not None else None
        done.put((job, _Outcome(passed, checks, run, message, (time.perf_counter() - started) * 1000, tools,
                                build_failed=not built, live=live)))

    def _guarded(self) -> Optional[CheckResult]:
        """A failed check when a framework in use could not be guarded: nothing stopped its tools."""
        if not self.adapters.failed:
            return None
        why = "; ".join(f"{name}: {err}" for name, err in sorted(self.adapters.failed.items()))
        return CheckResult(name="hermetic", passed=False,
                           detail=f"harvester could not route this framework's tool calls ({why}): its tools "
                                  "may have run for real; upgrade harvester or pin the framework")

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
            raise TypeError(f"the factory built a {type(agent).__name__}, which is neither callable, nor has "
                            ".run(prompt), nor is an agent of a framework harvester knows")
        return target

    def _run(self, target: Callable[[str], Any], prompt: str) -> Any:
        result = target(prompt)
        if inspect.isawaitable(result):
            result = asyncio.run(_within(result, self.timeout))
        return result

    def _observe(self, job: _Job, answer: Any, spans: list[ReadableSpan], tools: Optional[FixtureTools]) -> Run:
        if isinstance(answer, Run):
            run = answer
        else:
            runs = runs_from_spans(spans) if spans else []
            if runs:
                run = _joined(runs)
                if run.answer is None and isinstance(answer, str):
                    run = run.model_copy(update={"answer": answer})
            elif answer is None or isinstance(answer, str):
                run = _run_from_log(answer, tools)
            else:
                raise TypeError(f"agent returned {type(answer).__name__}, expected the answer (str) or a Run, "
                                "and emitted no agent span to read the run from")
        if run.prompt is None:
            run = run.model_copy(update={"prompt": job.case.task})
        if run.cost is None and self.prices is not None:
            run = run.model_copy(update={"cost": _cost(run, self.prices)})
        return run


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


def _joined(runs: list[Run]) -> Run:
    """Several agent runs in one case (a paused run resumed): one Run, calls in order, the last stop."""
    if len(runs) == 1:
        return runs[0]
    usage = Usage()
    for r in runs:
        usage = usage + r.usage
    return runs[-1].model_copy(update={
        "calls": [c for r in runs for c in r.calls], "llm_calls": [c for r in runs for c in r.llm_calls],
        "usage": usage, "prompt": runs[0].prompt})


def _run_from_log(answer: Optional[str], tools: Optional[FixtureTools]) -> Run:
    """The Run of an agent that emitted no agent span: its answer and the calls that reached the executor."""
    calls = [_call(e) for e in (tools.log if tools is not None else ())]
    return Run(trace_id="", answer=answer, stop="answered" if answer is not None else "unknown",
               calls=calls, source="harvester")


def _call(entry: ToolLog) -> ToolCall:
    if entry.error is not None:
        return ToolCall(name=entry.name, args=entry.args, status="error",
                        error=ErrorInfo(type=entry.error.type, message=entry.error.message))
    return ToolCall(name=entry.name, args=entry.args, result=entry.result)


def _cost(run: Run, prices: Config) -> Optional[float]:
    if any(c.usage.total for c in run.llm_calls):
        costs = [prices.cost(c.model or run.model, c.usage) for c in run.llm_calls if c.usage.total]
        return None if any(c is None for c in costs) else sum(c for c in costs if c is not None)
    return prices.cost(run.model, run.usage) if run.usage.total else None


# -- evaluation -------------------------------------------------------------------------------
def evaluate(case: Case, run: Run, judge: Optional[Judge] = None) -> list[CheckResult]:
    """The case's checks in order (mechanical, structural: ``to_case`` put them so), then the judge.

    The judge is the expensive one, so it only runs when every cheap check passed.
    """
    out = []
    for check in case.checks:
        passed, detail = checklib.run_check(check, run)
        out.append(CheckResult(name=checklib.label(check), passed=passed, detail=detail))
    if judge is not None and all(c.passed for c in out):
        passed, detail = checklib.run_check(lambda r: judge(case, r), run)
        out.append(CheckResult(name="judge", passed=passed, detail=detail))
    return out


def recovered() -> checklib.Check:
    """A failure-injection variant ended properly: it answered (or abstained), not error, loop or budget."""

    def fn(run: Run) -> tuple[bool, str]:
        if run.stop != "answered":
            err = f" ({run.error.type}: {run.error.message})" if run.error else ""
            return False, f"stopped with {run.stop}{err}"
        abstain, _ = checklib.abstained()(run)
        return True, "abstained" if abstain else "answered"

    return checklib.Check("recovered", fn)


def variant_case(spec: AgentCase) -> Case:
    """A recovery variant's checks: no forbidden action, within the step bound, ended properly.

    The answer-content checks of the base case are dropped: with a tool broken on purpose the right
    answer is often unavailable, and saying so is a recovery.
    """
    checks: list[checklib.Check] = []
    if spec.forbidden_tools:
        checks.append(checklib.never_used(*spec.forbidden_tools))
    if spec.min_steps:
        checks.append(checklib.max_steps(3 * spec.min_steps))
    checks.append(recovered())
    tool = next(iter(spec.inject_failures))
    return Case(id=spec.id, task=spec.prompt, checks=checks, tags=list(spec.tags),
                why=f"recovers when {tool} fails ({spec.why or 'no why recorded'})", spec=spec)


def divergence(recorded: Sequence[str], actual: Sequence[str]) -> Optional[Divergence]:
    """First step (1-based) where the replayed trajectory leaves the recorded one; None when they agree."""
    for i, (a, b) in enumerate(zip(recorded, actual)):
        if a != b:
            return Divergence(step=i + 1, recorded=a, actual=b)
    if len(recorded) == len(actual):
        return None
    i = min(len(recorded), len(actual))
    return Divergence(step=i + 1, recorded=recorded[i] if i < len(recorded) else None,
                      actual=actual[i] if i < len(actual) else None)


def _result(case: Case, outcomes: list[_Outcome], variant_of: Optional[str]) -> CaseResult:
    rep = next((o for o in outcomes if not o.passed), outcomes[-1])
    run, spec, tools = rep.run, case.spec, rep.tools
    costs = [o.run.cost for o in outcomes if o.run is not None and o.run.cost is not None]
    forbidden = set(spec.forbidden_tools) if spec is not None else set()
    unauthorised = sum(_unauthorised(o, forbidden) for o in outcomes)
    notes = list(dict.fromkeys(n for o in outcomes if o.tools is not None for n in o.tools.notes))
    injected = None
    if variant_of is not None and spec is not None and spec.inject_failures:
        tool, inj = next(iter(spec.inject_failures.items()))
        injected = Injected(tool=tool, mode=inj.mode)
    trajectory = run.trajectory() if run is not None else []
    return CaseResult(
        id=case.id, passed=all(o.passed for o in outcomes), tags=list(case.tags), why=case.why,
        checks=rep.checks, error=rep.error, stop=run.stop if run is not None else "error",
        answer=run.answer if run is not None else None, trajectory=trajectory,
        requested=run.requested_tools() if run is not None else [],
        steps=run.steps if run is not None else 0,
        cost=sum(costs) / len(costs) if costs else None,
        duration_ms=sum(o.duration_ms for o in outcomes) / len(outcomes),
        trials=len(outcomes), passes=sum(o.passed for o in outcomes),
        divergence=divergence(spec.recorded.trajectory, trajectory) if spec is not None else None,
        no_fixture=tools.no_fixture if tools is not None else 0,
        no_fixture_calls=_no_fixture_calls(tools),
        tool_calls=len(tools.log) if tools is not None else 0,
        redundant_calls=tools.redundant if tools is not None else 0,
        unauthorised=unauthorised, notes=notes,
        live_calls=sum(1 for o in outcomes for c in o.live or () if c.how != "refused"),
        abstained=run is not None and run.stop == "answered" and checklib.abstained()(run)[0],
        variant_of=variant_of, injected=injected,
    )


def _no_fixture_calls(tools: Optional[FixtureTools]) -> list[NoFixtureCall]:
    """The first few unanswered calls: tool, reason, the args sent, and the closest recording and where it differs."""
    out = []
    for entry in tools.log if tools is not None else ():
        missing = entry.missing
        if missing is None:
            continue
        closest = missing["closest"][0] if missing["closest"] else None
        differs = closest["differs"] if closest is not None and missing["reason"] == "no_match" else []
        out.append(NoFixtureCall(tool=entry.name, reason=missing["reason"], differs=list(differs),
                                 args=entry.args, closest=closest["args"] if closest is not None else None))
        if len(out) == MAX_NO_FIXTURE_CALLS:
            break
    return out


def _recorded_calls_only(case: Case, tools: Optional[FixtureTools]) -> Optional[CheckResult]:
    """A failed check when the agent made a call its recording cannot answer (None when it made none).

    Such a call got a synthetic ``no_fixture`` result, so whatever the agent did next was not tested
    against anything real: like vcrpy refusing an unrecorded request, the case fails and says which call.
    Cases that inject failures are exempt: a recovery path is expected to leave the recording.
    """
    if tools is None or not tools.no_fixture or (case.spec is not None and case.spec.inject_failures):
        return None
    calls = _no_fixture_calls(tools)
    more = f"; and {tools.no_fixture - len(calls)} more" if tools.no_fixture > len(calls) else ""
    return CheckResult(name="recorded_calls_only", passed=False,
                       detail=f"{tools.no_fixture} call{'s' if tools.no_fixture != 1 else ''} the recording cannot answer: "
                              + "; ".join(c.explained() for c in calls) + more)


# Errors a framework reports on a call it refused before any tool body could run.
_NOT_RUN = ("ValidationError", "ToolRetryError", "ModelRetry", "LiveToolCall", "ModelBehaviorError")


def live_calls(run: Run, tools: FixtureTools, spans: Sequence[ReadableSpan],
               denied: Sequence[str] = ()) -> list[LiveCall]:
    """The calls of the replay trace that the executor never saw: tool bodies that ran some other way.

    Every call the run shows is paired with a call the executor logged (same tool and arguments first,
    then the same tool), whatever its status. Left over:
    - an executed call (ok, or failed in the body rather than refused for its arguments) ``ran``: an
      undecorated helper that emits a tool span, a framework path no adapter guards;
    - a call the model requested that nothing answered is ``unserved``, unless the recording shows it
      denied too: it was denied anew, or it ran where harvester sees nothing (a process pool, a tool
      class with its own ``invoke``, the function called directly).
    Calls a framework answers by running an agent (a managed agent, a handoff) are not tools.
    """
    agents = agent_names(spans) if spans else set()
    by_key: dict[tuple[str, str], int] = {}
    by_name: dict[str, int] = {}
    for entry in tools.log:
        by_key[(entry.name, entry.key)] = by_key.get((entry.name, entry.key), 0) + 1
        by_name[entry.name] = by_name.get(entry.name, 0) + 1
    unpaired: list[ToolCall] = []
    for call in run.calls:
        if call.name in agents:
            continue
        key = (call.name, tools.key_of(call.name, call.args))
        if by_key.get(key, 0) > 0:
            by_key[key] -= 1
            by_name[call.name] -= 1
        else:
            unpaired.append(call)
    live = []
    still_denied = list(denied)
    for call in unpaired:
        if by_name.get(call.name, 0) > 0:
            by_name[call.name] -= 1
        elif call.status == "blocked":
            if call.name in still_denied:
                still_denied.remove(call.name)  # denied in production too: no tool body to run
            else:
                live.append(LiveCall(call.name, call.args, "unserved"))
        elif call.status == "ok" or not (call.error is not None and (call.error.type in _NOT_RUN
                                                                     or "validation error" in call.error.message)):
            live.append(LiveCall(call.name, call.args, "ran"))
    return live


def _no_live_calls(live: Sequence[LiveCall]) -> Optional[CheckResult]:
    """A failed ``live_tool_call`` check naming each call that did not go through the executor."""
    if not live:
        return None
    shown = "; ".join(c.summary() for c in live[:MAX_NO_FIXTURE_CALLS])
    more = f"; and {len(live) - MAX_NO_FIXTURE_CALLS} more" if len(live) > MAX_NO_FIXTURE_CALLS else ""
    return CheckResult(name="live_tool_call", passed=False, detail=shown + more)


def _unauthorised(outcome: _Outcome, forbidden: set[str]) -> int:
    """Forbidden calls the agent made in one trial: every one the executor saw (served, answered or
    failed: the agent dispatched it), and every one that went around it. Counted from the executor's
    log, so a trial that timed out counts what it did before."""
    if not forbidden:
        return 0
    seen = sum(1 for e in outcome.tools.log if e.name in forbidden) if outcome.tools is not None else 0
    return seen + sum(1 for c in outcome.live or () if c.name in forbidden)


# -- the suite --------------------------------------------------------------------------------
def in_shard(case_id: str, shard: tuple[int, int]) -> bool:
    """Stable split by case id: shard ``(i, n)``, ``1 <= i <= n``, holds the ids whose hash is i-1 mod n."""
    i, n = shard
    return int(hashlib.sha256(case_id.encode()).hexdigest()[:12], 16) % n == i - 1


def _plan(cases: Iterable[AgentCase | Case], inject: bool, shard: Optional[tuple[int, int]]
          ) -> list[tuple[Case, Optional[str]]]:
    """(runnable case, id of the case it is a variant of) in run order, each variant after its case."""
    if shard is not None and not (len(shard) == 2 and all(isinstance(x, int) for x in shard)
                                  and 1 <= shard[0] <= shard[1]):
        raise ValueError(f"shard must be (i, n) with 1 <= i <= n, got {shard!r}")
    out: list[tuple[Case, Optional[str]]] = []
    for item in cases:
        case = item.to_case() if isinstance(item, AgentCase) else item
        if shard is not None and not in_shard(case.id, shard):
            continue
        out.append((case, None))
        if inject and case.spec is not None:
            out.extend((variant_case(v), case.id) for v in recovery_variants(case.spec))
    return out


class _Progress:
    """A one-line stderr bar; silent unless asked for."""

    def __init__(self, total: int, enabled: bool) -> None:
        self.total, self.done, self.failed, self.enabled = total, 0, 0, enabled and total > 0

    def step(self, passed: bool) -> None:
        self.done += 1
        self.failed += not passed
        if self.enabled:
            filled = 30 * self.done // self.total
            sys.stderr.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total}  failed {self.failed}")
            if self.done == self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()


def replay(cases: Iterable[AgentCase | Case], build_agent: Callable[..., Any], *, trials: int = 1,
           concurrency: Optional[int] = None, inject: bool = False, timeout: float = 60.0,
           shard: Optional[tuple[int, int]] = None, judge: Optional[Judge] = None, progress: bool = False,
           suite: Any = None, prices: Config | Mapping[str, Any] | None = None,
           ignore_args: Optional[Mapping[str, Sequence[str]]] = None) -> Report:
    """Replay every case ``trials`` times against fresh agents from ``build_agent`` and report.

    ``suite``: a name, or anything with ``.name``/``.version`` (the suite manifest). ``prices``: a
    ``Config`` or its ``prices`` mapping (USD per 1k tokens), used when a run has tokens and no cost.
    ``ignore_args``: the project's ``{tool: [arg paths]}`` (the config's), left out of fixture matching
    along with each case's own.
    """
    if trials < 1:
        raise ValueError(f"trials must be >= 1, got {trials}")
    if timeout <= 0:
        raise ValueError(f"timeout must be > 0, got {timeout}")
    plan = _plan(cases, inject, shard)
    limit = max(1, concurrency if concurrency is not None else DEFAULT_CONCURRENCY)
    price_config = prices if isinstance(prices, Config) or prices is None else Config(prices=dict(prices))
    runner = _Runner(build_agent, timeout, judge, price_config, ignore_args)
    refused_before = seam.STATE.seq
    with seam.replaying_now():
        runner.adapters.open()
        try:
            outcomes = _drive(runner, plan, trials, limit, timeout, _Progress(len(plan) * trials, progress))
        finally:
            runner.adapters.close()
    builds = [o for outs in outcomes for o in outs]
    if builds and all(o.build_failed for o in builds):  # not one agent was built: the harness is wrong, not the cases
        raise AgentBuildError(_factory_name(build_agent), builds[0].error or "no agent built")
    name = suite if isinstance(suite, str) else getattr(suite, "name", None) or "suite"
    version = None if isinstance(suite, str) else getattr(suite, "version", None)
    refused = seam.orphans_since(refused_before)  # each once, whichever cases were in flight
    return Report(suite=name, suite_version=version, trials=trials,
                  shard=f"{shard[0]}/{shard[1]}" if shard else None,
                  results=[_result(case, outs, variant_of) for (case, variant_of), outs in zip(plan, outcomes)],
                  refused=len(refused),
                  refused_calls=[LiveCall(o.name, o.args, "refused").summary() for o in refused[:MAX_NO_FIXTURE_CALLS]])


def _drive(runner: _Runner, plan: list[tuple[Case, Optional[str]]], trials: int, limit: int, timeout: float,
           bar: _Progress) -> list[list[_Outcome]]:
    """Run every case-trial, at most ``limit`` at once, and give up on any that outlives ``timeout``."""
    jobs = iter([_Job(i, case, t) for i, (case, _) in enumerate(plan) for t in range(trials)])
    outcomes: list[list[_Outcome]] = [[] for _ in plan]
    remaining = len(plan) * trials
    done: "queue.SimpleQueue[tuple[_Job, _Outcome]]" = queue.SimpleQueue()
    inflight: dict[int, tuple[_Job, float, int, FixtureTools]] = {}  # id(job) -> job, deadline, trace id, executor
    grace = 1.0  # an async agent is cancelled at the timeout: let it report that itself
    while remaining:
        while len(inflight) < limit:
            job = next(jobs, None)
            if job is None:
                break
            trace_id, tools = runner.start(job, done)
            inflight[id(job)] = (job, time.monotonic() + timeout + grace, trace_id, tools)
        wait = min(entry[1] for entry in inflight.values()) - time.monotonic()
        try:
            finished = [done.get(timeout=max(wait, 0.0))]
        except queue.Empty:
            now = time.monotonic()
            finished = []
            for job, deadline, trace_id, tools in list(inflight.values()):
                if deadline <= now:  # a hung agent: abandon its thread, fail its case
                    runner.release(trace_id)
                    finished.append((job, _Outcome(False, [], None, f"ReplayTimeout: agent did not finish within "
                                                   f"{timeout:g}s", timeout * 1000, tools)))
        for job, outcome in finished:
            if inflight.pop(id(job), None) is None:  # timed out already: the late answer is dropped
                continue
            outcomes[job.index].append(outcome)
            remaining -= 1
            bar.step(outcome.passed)
    return outcomes


@dataclass
class Suite:
    cases: Sequence[Case | AgentCase]
    name: str = "suite"
    version: Optional[str] = None

    def run(self, build_agent: Callable[..., Any], **kwargs: Any) -> Report:
        """Run every case against a FRESH agent from ``build_agent()`` (keyword options as for ``replay``)."""
        return replay(self.cases, build_agent, suite=self, **kwargs)
