"""The replay seam: what a replay puts into the process so that no tool body runs for real.

A replay serves every tool call from the case's executor. The executor travels in the OpenTelemetry
context, not in a module global, so concurrent cases never see each other's fixtures, and it follows
the agent wherever the context goes: asyncio tasks, ``asyncio.to_thread``, and, once
``propagate_into_threads()`` has run (``threads``), every ``threading.Thread``, ``ThreadPoolExecutor``
and ``loop.run_in_executor``. (The same propagation
gives a production tool span in a thread pool its parent, so the call reads as executed.)

Every place a model is called (the framework modules' model guards, the raw SDK clients, ``AgentRun.model``)
asks ``model_server()``: in a recorded-model replay, the case's ``ModelServer`` answers each call from
the recording in order (or raises ``ModelInputChanged`` when the request drifted from the recorded one);
None (a live replay, or no replay): the model is called. The model SDK clients' requests are marked
(``model_call``): the seal tells the agent's model from everything else by it, where the recording
cannot say where the model is.

Every place a tool can be dispatched (the framework adapters, ``@harvester.tool``) asks ``route()``
(and, given an executor, ``sandboxed()``: a sandbox tool runs its body for real):

- the case's executor, inside a case;
- ``BLOCKED`` while a replay runs but the caller has lost the case's context (a thread started in a
  way no propagation reaches): the call is refused with ``LiveToolCall`` and remembered, and every
  case in flight fails naming it; a tool body never runs because a context was lost;
- ``None`` outside any replay: the tool runs as in production.

Replay traces are marked twice, so no copy of them is ever taken for production traffic:
``replay_trace`` tells this process's ``HarvestingSpanProcessor`` to store nothing while a replay
runs, nor any span of a replay's traces that ends later (a background task the agent left behind),
and every span under a replay root carries the W3C ``tracestate`` entry ``harvester=replay``, which
``harvester serve`` and ``harvester ingest`` read in spans that left the process.

``harness()`` marks a process that exists to replay (``harvester replay``): until it exits, a tool
call without a case's context is refused, even after the replay returned (work the agent queued for
a worker thread that outlives it), and nothing it traces is production traffic.

This module is imported by the production hook: it must stay light (no pydantic, no framework).
"""

from __future__ import annotations

import collections
import contextlib
import os
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceState

from .errors import LiveToolCall

if TYPE_CHECKING:
    from .model import ModelAnswerData, ModelRequestData

__all__ = [
    "BLOCKED",
    "CASE_ATTRIBUTE",
    "ENV",
    "EXECUTOR",
    "MARK",
    "MAX_ORPHANS",
    "MAX_TRACES",
    "MODELS",
    "MODEL_CALL",
    "OWN",
    "ROOT_PREFIX",
    "STATE",
    "Executor",
    "ModelServer",
    "Orphan",
    "case_context",
    "executor",
    "harness",
    "marked",
    "model_call",
    "model_endpoint",
    "model_server",
    "orphans_since",
    "own_work",
    "own_work_now",
    "propagate_into_threads",
    "remember",
    "replay_span",
    "replay_span_ended",
    "replay_trace",
    "replaying",
    "replaying_now",
    "route",
    "running_tool",
    "running_tool_now",
    "sandboxed",
    "serving",
]

EXECUTOR = otel_context.create_key("harvester.executor")
MODELS = otel_context.create_key("harvester.models")  # the case's ModelServer, in a recorded-model replay
OWN = otel_context.create_key("harvester.own")  # harvester's own work in a replay (a judge, a callback)
MODEL_CALL = otel_context.create_key("harvester.model_call")  # a model SDK client's request in flight
TOOL = otel_context.create_key("harvester.tool")  # a sandbox tool's body an adapter runs for real
MARK_KEY, MARK_VALUE = "harvester", "replay"
MARK = f"{MARK_KEY}={MARK_VALUE}"  # as it reads in OTLP's traceState
CASE_ATTRIBUTE = "harvester.case"  # on the replay root span of every case-trial
ROOT_PREFIX = "harvester.replay "  # that root span's name: "harvester.replay <case id>"
MAX_ORPHANS = 1000
MAX_TRACES = 100_000  # replay trace ids remembered after their case ended
# Set while a replay runs (and in a harness): a child process (a process pool the agent starts) inherits
# it and refuses every tool call, having no case's executor to serve it.
ENV = "HARVESTER_REPLAYING"


class Executor(Protocol):
    """What a replay puts in place of live tools: returns the result or raises the recorded failure."""

    def execute(self, name: str, args: Any) -> Any: ...

    async def aexecute(self, name: str, args: Any) -> Any: ...


class ModelServer(Protocol):
    """What a recorded-model replay puts in place of the live model: the case's model fixtures, in order.

    ``answer(request)``: the recorded answer to the agent's next model call; None when the live model
    answers from here on (``recorded-then-live`` after a drift). Raises ``ModelInputChanged`` when the
    request differs from the recorded one (``recorded``), or when the recording has no step left.
    """

    def answer(self, request: ModelRequestData) -> ModelAnswerData | None: ...


class Orphan(NamedTuple):
    """A tool call refused because it ran in a replay without any case's context."""

    seq: int
    name: str
    args: Any
    thread: str


class _State:
    """Process-wide replay state. ``active`` is read on the production hot path: a plain int."""

    def __init__(self) -> None:
        self.active = 0  # replays running in this process
        self.harness = False  # a process that exists to replay: nothing runs live until it exits
        self.traces: set[int] = set()  # trace ids of case-trials (their background work may end later)
        self._order: collections.deque[int] = collections.deque()
        self.orphans: list[Orphan] = []
        self.seq = 0  # orphans ever seen (the list keeps the last MAX_ORPHANS)
        self.lock = threading.Lock()


STATE = _State()
STATE.harness = os.environ.get(ENV) == "1"  # a child of a replay: nothing it runs is served, so none runs


def executor() -> Executor | None:
    """The executor of the case this code runs in, if any."""
    return otel_context.get_value(EXECUTOR)  # type: ignore[return-value]


def replaying() -> bool:
    return STATE.active > 0 or STATE.harness


def replay_trace(trace_id: int) -> bool:
    """A span of this trace belongs to a replay: one is running (or this is a harness), or it is of a
    replay's trace."""
    return STATE.active > 0 or STATE.harness or trace_id in STATE.traces


def replay_span_ended(span: Any) -> bool:
    """``replay_trace`` of an ended span's trace; something that is not a span is none of a replay's
    (the processor's queue then counts it as it counts any other)."""
    try:
        trace_id = span.context.trace_id
    except Exception:
        trace_id = 0
    return replay_trace(trace_id)


def harness() -> None:
    """This process exists to replay: from now until it exits, nothing it does is production."""
    STATE.harness = True
    os.environ[ENV] = "1"


def remember(trace_id: int) -> None:
    """A case-trial's trace: spans of it that end after the replay are still not production runs."""
    with STATE.lock:
        STATE.traces.add(trace_id)
        STATE._order.append(trace_id)
        while len(STATE._order) > MAX_TRACES:
            STATE.traces.discard(STATE._order.popleft())


class _Blocked:
    """The executor of a call that lost its case's context during a replay: refuses, remembers."""

    def execute(self, name: str, args: Any) -> Any:
        with STATE.lock:
            STATE.seq += 1
            STATE.orphans.append(Orphan(STATE.seq, name, args, threading.current_thread().name))
            del STATE.orphans[:-MAX_ORPHANS]
        raise LiveToolCall(
            name,
            "called during a replay outside its case (a thread the case's context did not "
            "reach, or one that outlived its case); refused, never run",
        )

    async def aexecute(self, name: str, args: Any) -> Any:
        return self.execute(name, args)


BLOCKED = _Blocked()


def route() -> Executor | None:
    """Where a tool call goes: the case's executor, ``BLOCKED``, or None (no replay: run for real)."""
    ex = otel_context.get_value(EXECUTOR)
    if ex is not None:
        return ex  # type: ignore[return-value]
    return BLOCKED if STATE.active > 0 or STATE.harness else None


def sandboxed(ex: Executor, name: str, args: Any) -> bool:
    """The case's executor lets this call run its tool body for real: a sandbox tool of ``replay
    --sandbox`` (the executor logs it as one). The adapter then calls the original, as outside a replay;
    an executor without sandbox tools (``BLOCKED``, one a user wrote) never does."""
    real = getattr(ex, "sandboxed", None)
    return bool(callable(real) and real(name, args))


def model_server() -> ModelServer | None:
    """The model server of the case this code runs in, in a recorded-model replay; else None (call the model)."""
    return otel_context.get_value(MODELS)  # type: ignore[return-value]


def orphans_since(seq: int) -> list[Orphan]:
    with STATE.lock:
        return [o for o in STATE.orphans if o.seq > seq]


@contextlib.contextmanager
def replaying_now() -> Iterator[None]:
    """Mark this process as replaying for the duration (nests; threads counted, not owned)."""
    propagate_into_threads()
    with STATE.lock:
        STATE.active += 1
        outer = os.environ.get(ENV)
        os.environ[ENV] = "1"
    try:
        yield
    finally:
        with STATE.lock:
            STATE.active -= 1
            if STATE.active == 0 and not STATE.harness:
                if outer is None:
                    os.environ.pop(ENV, None)
                else:
                    os.environ[ENV] = outer


def case_context(root: trace.Span, ex: Executor | None, models: ModelServer | None = None) -> otel_context.Context:
    """The context a case-trial runs in: under its root span, marked ``harvester=replay``, with its executor
    (and, in a recorded-model replay, its model server).

    The marker rides in the parent's ``tracestate``, which the SDK's samplers hand to every child span
    (and propagators to every downstream service), so each span of the replay carries it.
    """
    sc = root.get_span_context()
    state = sc.trace_state.add(MARK_KEY, MARK_VALUE) if MARK_KEY not in sc.trace_state else sc.trace_state
    parent = NonRecordingSpan(
        SpanContext(sc.trace_id, sc.span_id, is_remote=False, trace_flags=sc.trace_flags, trace_state=state)
    )
    ctx = trace.set_span_in_context(parent, otel_context.Context())
    return otel_context.set_value(MODELS, models, otel_context.set_value(EXECUTOR, ex, ctx))


def replay_span(trace_state: Any, name: Any, attributes: Any) -> bool:
    """A span that left a replay's process (read by ``harvester serve`` and ``ingest``): it carries the
    replay marker, or it is a case-trial's root (which carries the case instead). ``attributes``: a
    dict, or OTLP protobuf ``KeyValue``s."""
    if marked(trace_state):
        return True
    if not (isinstance(name, str) and name.startswith(ROOT_PREFIX)):
        return False
    if isinstance(attributes, dict):
        return CASE_ATTRIBUTE in attributes
    return any(getattr(kv, "key", None) == CASE_ATTRIBUTE for kv in attributes or ())


def marked(trace_state: Any) -> bool:
    """An SDK ``TraceState`` or an OTLP ``traceState`` string that carries the replay marker."""
    if not trace_state:
        return False
    if isinstance(trace_state, TraceState):
        return trace_state.get(MARK_KEY) == MARK_VALUE
    if isinstance(trace_state, str):
        return any(part.strip() == MARK for part in trace_state.split(","))
    return False


@contextlib.contextmanager
def serving(ex: Executor | None, models: ModelServer | None = None) -> Iterator[None]:
    """Route every tool call in this context (and the tasks and threads it reaches) to ``ex``, and every
    model call to ``models`` (None: the model is called)."""
    ctx = otel_context.set_value(MODELS, models, otel_context.set_value(EXECUTOR, ex))
    token = otel_context.attach(ctx)
    try:
        yield
    finally:
        otel_context.detach(token)


class _Open:
    """A mark open while the work it marks runs: a thread started inside copies the mark with the
    context, and finds it closed once the work is done; a process forked inside finds it closed at
    once (its copy would never close). ``said``: what the work says of itself."""

    __slots__ = ("open", "pid", "said")

    def __init__(self, said: str | None = None) -> None:
        self.open = True
        self.pid = os.getpid()
        self.said = said


@contextlib.contextmanager
def _marking(key: str, said: str | None = None) -> Iterator[None]:
    mark = _Open(said)
    token = otel_context.attach(otel_context.set_value(key, mark))
    try:
        yield
    finally:
        mark.open = False
        otel_context.detach(token)


def _open(ctx: otel_context.Context, key: str) -> _Open | None:
    mark = ctx.get(key)
    return mark if isinstance(mark, _Open) and mark.open and mark.pid == os.getpid() else None


def own_work() -> contextlib.AbstractContextManager[None]:
    """harvester's or its caller's own work in a replay (a judge, a progress or case callback), not the
    agent's: the seal does not hold it to a case's hosts while it runs (a thread it leaves is held again)."""
    return _marking(OWN)


def own_work_now(ctx: otel_context.Context) -> bool:
    """``ctx`` is inside harvester's own work that is still running."""
    return _open(ctx, OWN) is not None


def model_call(endpoint: str | None) -> contextlib.AbstractContextManager[None]:
    """A model SDK client's request to a model API, at ``endpoint`` (``host:port``, its ``base_url``'s;
    None when it has none), marked by ``conventions``' client guards: where the recording cannot say
    where the agent's model is, the seal lets this request reach that endpoint (a gateway, a local
    server) and nothing else."""
    return _marking(MODEL_CALL, endpoint)


def model_endpoint(ctx: otel_context.Context) -> str | None:
    """The endpoint of the model SDK client's request ``ctx`` is inside, while it runs."""
    mark = _open(ctx, MODEL_CALL)
    return mark.said if mark is not None else None


def running_tool(name: str) -> contextlib.AbstractContextManager[None]:
    """A sandbox tool's body an adapter runs for real: what the seal names a refusal in it by, where no
    current span says (LangChain's OpenInference tracer never makes its tool span current)."""
    return _marking(TOOL, name)


def running_tool_now(ctx: otel_context.Context) -> str | None:
    mark = _open(ctx, TOOL)
    return mark.said if mark is not None else None


_propagating = False


def propagate_into_threads() -> None:
    """Threads, thread pools and timers start in the context of the code that started them (``threads``).

    Once per process; never raises (production code calls it): without it, a lost context still
    cannot run a tool in a replay, ``route()`` refuses the call.
    """
    global _propagating
    if _propagating:
        return
    try:
        from . import _threads

        _threads.propagate()
        _propagating = True
    except Exception:
        pass
