"""Threads start in the OpenTelemetry context of the code that started them.

Python gives a new thread an empty context, so a span or a replay's executor set where a thread was
started is not there when it runs. This does what ``opentelemetry-instrumentation-threading`` does
(that package pins exact versions of the OpenTelemetry API, which would pin every user's SDK): the
context current at ``Thread.start()`` is attached around ``Thread.run()`` and ``Timer.run()``,
and ``ThreadPoolExecutor.submit()`` runs its function in the context current at submission, which
also covers ``loop.run_in_executor``. ``asyncio.to_thread`` copies the context by itself. Only the
OpenTelemetry context travels; the app's own context variables stay as Python keeps them.

A thread subclass that overrides ``run()`` without calling ``Thread.run`` keeps its empty context;
inside a replay, a tool call from it is refused (``seam.route`` returns ``BLOCKED``), never run.

A replay runs each case on a daemon thread of its own (``case_thread``: a hung agent is abandoned, and
must not keep the process alive), where production runs the agent on a thread that is not one (the
main thread, a server's worker). A thread takes its daemon flag from the thread that made it, so a
plain ``threading.Thread(...)`` the agent makes would be a daemon only in the replay, and cut off at
exit where production waits for it. Such a thread (made without a ``daemon`` argument by a case's
thread, or by such a thread) reads ``daemon`` False until it starts, as in production, so code that
sets it (``t.daemon = True``) decides; one still not a daemon at ``start()`` starts as a daemon, marked
as one production would wait for (``kept``): the ``harvester`` program waits for it, for as long as it
waits for the threads that keep the process alive, and no hung thread can hold the program's exit.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from concurrent import futures
from typing import Any

from opentelemetry import context as otel_context

__all__ = ["case_thread", "kept", "propagate"]

_MARK = "__harvester_propagates__"
_lock = threading.Lock()
_CASE = "_harvester_case"  # a replay's thread for one case: stands for the thread production runs the agent on
_INHERITED = "_harvester_inherited"  # made by such a thread without a daemon argument
_KEPT = "_harvester_kept"  # started as a daemon where production would have started it as none


def case_thread(target: Callable[..., Any], args: tuple[Any, ...], name: str) -> threading.Thread:
    """A daemon thread to run one case on (a hung agent must not keep the process alive): the threads
    the agent makes on it without a daemon argument are not daemons to the agent, as in production."""
    thread = threading.Thread(target=target, args=args, name=name, daemon=True)
    setattr(thread, _CASE, True)
    return thread


def kept() -> list[threading.Thread]:
    """The threads still running that production would not have made daemons (see the module's doc):
    what the ``harvester`` program waits for beside the threads that keep the process alive. Executor
    workers are left out, as they are of those: an idle one waits for its executor's shutdown, which
    exit brings."""
    return [
        t
        for t in threading.enumerate()
        if getattr(t, _KEPT, False)
        and t.is_alive()
        and getattr(getattr(t, "_target", None), "__module__", "") != "concurrent.futures.thread"
    ]


def _init(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def init(self: threading.Thread, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        if kwargs.get("daemon") is None:  # the flag of the thread making it, which may be a case's
            parent = threading.current_thread()
            if getattr(parent, _CASE, False) or getattr(parent, _KEPT, False):
                self.daemon = False  # what production's thread would have given it
                setattr(self, _INHERITED, True)

    return init


def _start(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def start(self: threading.Thread, *args: Any, **kwargs: Any) -> Any:
        self._harvester_context = otel_context.get_current()  # type: ignore[attr-defined]
        if getattr(self, _INHERITED, False) and not self.daemon:
            self.daemon = True  # the program waits for it as for a thread that is not one, for a bounded time
            setattr(self, _KEPT, True)
        return original(self, *args, **kwargs)

    return start


def _run(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def run(self: threading.Thread, *args: Any, **kwargs: Any) -> Any:
        ctx = getattr(self, "_harvester_context", None)
        token = otel_context.attach(ctx) if ctx is not None else None
        try:
            return original(self, *args, **kwargs)
        finally:
            if token is not None:
                otel_context.detach(token)

    return run


def _submit(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def submit(self: futures.ThreadPoolExecutor, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        ctx = otel_context.get_current()

        def in_context(*a: Any, **kw: Any) -> Any:
            token = otel_context.attach(ctx)
            try:
                return fn(*a, **kw)
            finally:
                otel_context.detach(token)

        return original(self, in_context, *args, **kwargs)

    return submit


def propagate() -> None:
    """Install the wrappers, once per process (idempotent, thread-safe)."""
    with _lock:
        for owner, name, make in (
            (threading.Thread, "__init__", _init),
            (threading.Thread, "start", _start),
            (threading.Thread, "run", _run),
            (threading.Timer, "run", _run),
            (futures.ThreadPoolExecutor, "submit", _submit),
        ):
            current = owner.__dict__[name]
            if not getattr(current, _MARK, False):
                wrapped = make(current)
                setattr(wrapped, _MARK, True)
                setattr(owner, name, wrapped)
