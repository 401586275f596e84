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
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from concurrent import futures
from typing import Any

from opentelemetry import context as otel_context

__all__ = ["propagate"]

_MARK = "__harvester_propagates__"
_lock = threading.Lock()


def _start(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def start(self: threading.Thread, *args: Any, **kwargs: Any) -> Any:
        self._harvester_context = otel_context.get_current()  # type: ignore[attr-defined]
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
    """Install the three wrappers, once per process (idempotent, thread-safe)."""
    with _lock:
        for owner, name, make in (
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
