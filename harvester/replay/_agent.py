"""Loading the agent factory named by ``--agent module:attr``, and what it asks to be given."""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .._threads import kept
from ..errors import AgentLoadError, Sealed
from ._policy import Policy
from ._seal import current, sealing

__all__ = ["also_allowing", "factory_name", "importing_sealed", "load_agent", "refused_after_replay", "wants"]


def load_agent(
    spec: str,
    *,
    seal: bool = False,
    allow_hosts: Iterable[str] = (),
    allow_commands: Iterable[str] = (),
    warn: Callable[[str], None] | None = None,
    until_exit: bool = False,
) -> Callable[..., Any]:
    """``"pkg.module:attr"`` -> the agent factory, or an ``AgentLoadError`` that says what is wrong.

    ``seal``: import it sealed, allowing only ``allow_hosts`` and ``allow_commands`` (what every case
    of the replay may reach): a client the module connects at import (a database, a cache, a metrics
    socket) would otherwise be open before the replay's seal, and what it later sends never checked. An
    import that fails on a refusal is an ``AgentLoadError``; one that caught it and carried on (a probe
    with a fallback) is told to ``warn``: nothing left, and later tries meet the replay's seal.
    ``until_exit``: the process stays sealed until it exits (``harvester replay``): a thread or a pool
    the import started finds no moment unsealed before, between or after the replay, and what the
    pool's workers refuse comes back to the replay, which takes over from this seal while it runs."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise AgentLoadError(f"--agent {spec!r}: expected module:attr (e.g. myapp.agent:build)")
    # As with ``python -m``: the app's own modules in the working directory import without installing it
    # (the console script's sys.path starts at its bin folder, not the cwd).
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
    try:
        with importing_sealed(
            module_name,
            seal=seal,
            allow_hosts=allow_hosts,
            allow_commands=allow_commands,
            warn=warn,
            until_exit=until_exit,
        ):
            module = importlib.import_module(module_name)
    except Exception as exc:
        said = " ".join(str(exc).split())  # one line, whatever the library's message holds
        seal_note = next((f"; {n}" for n in getattr(exc, "__notes__", ()) if str(n).startswith("the seal refused")), "")
        raise AgentLoadError(
            f"--agent {spec!r}: cannot import {module_name} ({type(exc).__name__}: {said}){seal_note}"
        ) from None
    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise AgentLoadError(f"--agent {spec!r}: {module_name} has no attribute {attr!r}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise AgentLoadError(f"--agent {spec!r}: {attr} is a {type(obj).__name__}, not a callable that builds an agent")
    return obj


@contextlib.contextmanager
def importing_sealed(
    what: str,
    *,
    seal: bool,
    allow_hosts: Iterable[str] = (),
    allow_commands: Iterable[str] = (),
    warn: Callable[[str], None] | None = None,
    until_exit: bool = False,
) -> Iterator[None]:
    """The block's imports (of ``what``) sealed, when ``seal``: as ``load_agent`` says. A refusal that
    fails an import raises out of the block; those an import caught are told to ``warn``. The config's
    plugins are imported so too: one in the app's package imports the app, which the agent's sealed
    import would then find imported already."""
    refused: list[str] = []
    policy = Policy(allow_hosts, allow_commands)
    with sealing(policy, until_exit=until_exit) if seal else contextlib.nullcontext() as suite:
        try:
            yield
        except Exception as exc:  # C code's refusal reads as its library's error ("Permission denied")
            if suite is not None:
                suite.collect()
                if suite.refusals and not isinstance(exc, Sealed):
                    exc.add_note(f"the seal refused {suite.refusals[0].summary()}")
                suite.handed = len(suite.refusals)  # said by the import's error: not again at the exit
            raise
        if suite is not None:
            suite.collect()  # what a process it started refused, while the log is there
            refused = [r.summary() for r in suite.refusals]
            suite.handed = len(suite.refusals)
    if refused and warn is not None:
        more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
        warn(f"importing {what}, the seal refused {refused[0]}{more}; the import carried on")


@contextlib.contextmanager
def also_allowing(hosts: Iterable[str]) -> Iterator[None]:
    """The process's seal, if it is sealed, with ``hosts`` allowed too: where the ``harvester`` program
    sends its report after the replay (an OTLP endpoint), while what the agent left running (a thread, a
    signal handler) stays held to the seal."""
    suite = current()
    if suite is None:
        yield
        return
    with sealing(Policy((*suite.policy.hosts, *hosts), suite.policy.commands)):
        yield


def refused_after_replay(wait_s: float = 10.0) -> list[str]:
    """What the program's seal refused after its replay ended (a thread the agent left running), once the
    threads that keep the process alive have ended, or ``wait_s`` passed: those that are not daemons
    (Python waits for them at exit anyway), and those the agent made on a case's thread that production
    would not have made daemons (``_threads.kept``: daemons here, so a hung one cannot hold the exit).
    The verdict was printed before them and would say nothing of them."""
    deadline, here = time.monotonic() + wait_s, threading.current_thread()
    while (left := kept()) and time.monotonic() < deadline:  # one may start another before it ends
        for thread in left:
            thread.join(max(0.0, deadline - time.monotonic()))
    suite = current()
    if suite is None:
        return []
    for thread in threading.enumerate():  # an executor's idle workers wait for its shutdown at exit: not them
        idle = getattr(getattr(thread, "_target", None), "__module__", "") == "concurrent.futures.thread"
        if thread is not here and not thread.daemon and not idle:
            thread.join(max(0.0, deadline - time.monotonic()))
    suite.collect()
    return [r.summary() for r in suite.refusals[suite.handed :]]


def factory_name(factory: Callable[..., Any]) -> str:
    """``module:qualname`` as ``--agent`` spells it, else the repr."""
    module, name = getattr(factory, "__module__", None), getattr(factory, "__qualname__", None)
    return f"{module}:{name}" if module and name else repr(factory)


def wants(factory: Callable[..., Any]) -> set[str]:
    """Which of ``tools`` (the case's executor) and ``case`` (the case replayed) the factory takes."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return set()
    return {name for name in ("tools", "case") if name in params}
