"""Framework adapters: during a replay, each framework's tool dispatch goes to the case's executor.

One module per framework (``pydantic_ai``, ``langchain``, ``openai_agents``, ``smolagents``), each with
the same five names: ``ROOTS`` (the modules whose import means the framework is in use), ``install()``
(guard its dispatch, once, on the classes), ``accepts(agent)``, ``prepare(agent, case)`` (what to call
with the prompt) and ``instrument()`` (turn its tracing on when nothing traces it; returns the undo).
Nothing here imports a framework the app did not import itself.

The guards are the hermetic part and need nothing from the app: no decorator, no change to its
tools. They stay installed once a replay has run, and outside a replay they call the original.
"""

from __future__ import annotations

import sys
import threading
from types import ModuleType
from typing import Any, Callable, Optional

from . import langchain, openai_agents, pydantic_ai, smolagents

ADAPTERS: tuple[ModuleType, ...] = (pydantic_ai, langchain, openai_agents, smolagents)

__all__ = ["ADAPTERS", "Session", "entry"]


def _loaded(adapter: ModuleType) -> bool:
    return any(root in sys.modules for root in adapter.ROOTS)


class Session:
    """The adapters of one replay: guards for every framework loaded, tracing turned on where it was off.

    ``refresh()`` is called when the replay starts and again after each agent is built (a factory may
    import its framework lazily). ``failed`` names a framework whose dispatch could not be guarded (a
    version whose internals moved): its tools could run for real, so the replay trusts no case.
    ``close()`` undoes the tracing it turned on; the guards stay.
    """

    def __init__(self) -> None:
        self.failed: dict[str, str] = {}
        self._seen: set[str] = set()
        self._undo: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def refresh(self) -> None:
        if all(a.NAME in self._seen for a in ADAPTERS if _loaded(a)):
            return
        with self._lock:
            for adapter in ADAPTERS:
                if adapter.NAME in self._seen or not _loaded(adapter):
                    continue
                self._seen.add(adapter.NAME)
                try:
                    adapter.install()
                except Exception as exc:  # noqa: BLE001 - reported on every case, never a crash
                    self.failed[adapter.NAME] = f"{type(exc).__name__}: {exc}"
                    continue
                try:
                    undo = adapter.instrument()
                except Exception:  # noqa: BLE001 - no tracing: the run is read from the executor's log
                    undo = None
                if undo is not None:
                    self._undo.append(undo)

    def close(self) -> None:
        with self._lock:
            undo, self._undo = self._undo, []
        for fn in reversed(undo):
            try:
                fn()
            except Exception:  # noqa: BLE001 - an instrumentor that cannot uninstrument stays on
                pass


def entry(agent: Any, case: Any) -> Optional[Callable[[str], Any]]:
    """What to call with the prompt for an agent a framework adapter knows; None for anything else."""
    for adapter in ADAPTERS:
        if _loaded(adapter) and adapter.accepts(agent):
            return adapter.prepare(agent, case)
    return None
