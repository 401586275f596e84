"""The adapters' session: during a replay, each framework's tool dispatch goes to the case's executor.

Each framework's module (``conventions.FRAMEWORKS``, one module per framework, which also holds what it
records its own way) is an ``Adapter``: ``NAME``, ``ROOTS`` (the modules whose import means the
framework is in use), ``install()`` (guard its dispatch, once, on the classes), ``accepts(agent)``,
``prepare(agent, case)`` (what to call with the prompt; it hands the framework the case's earlier
messages) and ``instrument()`` (turn its tracing on when nothing traces it; returns the undo).
``conventions.CLIENTS`` holds the model SDK clients a raw loop calls (OpenAI, Anthropic): nothing to
guard, their tracing turned on as the recording had it (``recorded.instrumentation``). A session runs
them for one replay, and guards a framework the agent imports while it runs.
Nothing here imports a framework the app did not import itself.

The guards are the hermetic part and need nothing from the app: no decorator, no change to its
tools. They stay installed once a replay has run, and outside a replay they call the original.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from types import ModuleType
from typing import Any

from ..conventions import CLIENTS, FRAMEWORKS, Adapter, Loadable, with_history
from ..conventions import untraced as _untraced

ADAPTERS: tuple[Adapter, ...] = FRAMEWORKS

__all__ = ["ADAPTERS", "Adapter", "Session", "entry", "with_history"]


def _loaded(adapter: Loadable, ready: frozenset[str] = frozenset()) -> bool:
    """The framework is imported, and done importing: one another thread is still loading is guarded
    by that thread once it is done (``ready`` names the module that thread has just executed)."""
    for root in adapter.ROOTS:
        module = sys.modules.get(root)
        if module is not None and (
            root in ready or not getattr(getattr(module, "__spec__", None), "_initializing", False)
        ):
            return True
    return False


_sessions: list[Session] = []  # the sessions of the replays running now
_ROOTS = frozenset(
    [root for adapter in ADAPTERS for root in adapter.ROOTS] + [root for c in CLIENTS for root in c.ROOTS]
)


class _GuardOnLoad(importlib.abc.Loader):
    """A framework's loader, which guards its dispatch the moment the framework has loaded."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        for session in list(_sessions):
            session.refresh(ready=frozenset({module.__name__}))

    def __getattr__(self, name: str) -> Any:  # resources, get_source, is_package: the real loader's
        return getattr(self._loader, name)


class _Importing(importlib.abc.MetaPathFinder):
    """While a replay runs, a framework first imported by the agent itself (a lazy import inside its
    run) is guarded before any of its code can dispatch a tool."""

    def find_spec(self, name: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if name not in _ROOTS or not _sessions:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _GuardOnLoad(spec.loader)
                return spec
        return None


_FINDER = _Importing()


class Session:
    """The adapters of one replay: guards for every framework loaded, tracing turned on where it was off.

    ``open()`` starts it when the replay starts; ``refresh()`` runs again after each agent is built and
    whenever a framework is first imported meanwhile (a factory or an agent may import its framework
    lazily). ``failed`` names a framework whose dispatch could not be guarded (a
    version whose internals moved): its tools could run for real, so the replay trusts no case.
    ``close()`` undoes the tracing it turned on; the guards stay. ``instrumentation``: the scopes that
    traced the recordings' model calls, whose SDK clients' tracing it turns on too.
    """

    def __init__(self) -> None:
        self.failed: dict[str, str] = {}
        self.instrumentation: frozenset[str] = frozenset()
        self._seen: set[str] = set()
        self._undo: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def open(self, instrumentation: Iterable[str] = ()) -> None:
        """Start guarding: every framework loaded now, and any the agent imports later."""
        with self._lock:
            self.instrumentation = frozenset(instrumentation)
            if self not in _sessions:
                _sessions.append(self)
            if _FINDER not in sys.meta_path:
                sys.meta_path.insert(0, _FINDER)
        self.refresh()

    def refresh(self, ready: frozenset[str] = frozenset()) -> None:
        """Guard every framework loaded (again: a tool class the factory just defined is guarded too),
        and turn its tracing on the first time."""
        with self._lock:
            # Clients first: the environment an instrumentor of theirs is turned on with (the semantic
            # conventions' opt-in, read once per process) is set before a framework's instrumentor reads it.
            for client in CLIENTS:
                if client.NAME in self._seen or not _loaded(client, ready):
                    continue
                self._seen.add(client.NAME)
                try:
                    undo = client.instrument(self.instrumentation)
                except Exception:
                    undo = None
                if undo is not None:
                    self._undo.append(undo)
            for adapter in ADAPTERS:
                if adapter.NAME in self.failed or not _loaded(adapter, ready):
                    continue
                try:
                    adapter.install()
                except Exception as exc:
                    self.failed[adapter.NAME] = f"{type(exc).__name__}: {exc}"
                    continue
                if adapter.NAME in self._seen:
                    continue
                self._seen.add(adapter.NAME)
                try:
                    undo = adapter.instrument()
                except Exception:
                    undo = None
                if undo is not None:
                    self._undo.append(undo)

    def untraced(self, instrumentation: Iterable[str]) -> list[str]:
        """Of a recording's ``instrumentation``, the SDK instrumentors whose client is in use and not
        traced now (not installed, or it failed): that client's model calls leave no span to read."""
        return _untraced(frozenset(instrumentation), _loaded)

    def close(self) -> None:
        with self._lock:
            undo, self._undo = self._undo, []
            if self in _sessions:
                _sessions.remove(self)
        for fn in reversed(undo):
            try:
                fn()
            except Exception:
                pass


def entry(agent: Any, case: Any) -> Callable[[str], Any] | None:
    """What to call with the prompt for an agent a framework adapter knows; None for anything else."""
    for adapter in ADAPTERS:
        if _loaded(adapter) and adapter.accepts(agent):
            return adapter.prepare(agent, case)
    return None
