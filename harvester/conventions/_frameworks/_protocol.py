"""What a framework's module is: the ``Adapter`` protocol every module in ``FRAMEWORKS`` implements.

A framework's module holds all harvester knows of it: what it records its own way (``FRAMEWORK``,
read at capture) and how a replay serves its tools (the rest). The modules are checked against the
protocol by mypy through the registry's type (``FRAMEWORKS: tuple[Adapter, ...]``), and at test time by
``tests/test_plugins.py``, which runs every registered framework through the same contract: a module
missing a member fails both, not a replay.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ._framework import Framework

__all__ = ["Adapter", "Loadable"]


class Loadable(Protocol):
    """Something a replay guards or traces once its modules are imported (an adapter, an SDK client)."""

    @property
    def NAME(self) -> str:  # a module constant, as the adapters spell it
        """The framework's name in reports (``Session.failed``) and the docs."""

    @property
    def ROOTS(self) -> tuple[str, ...]:
        """The modules whose import means the framework is in use."""


class Adapter(Loadable, Protocol):
    """One framework: its capture quirks, and its replay support (its tool dispatch guarded, its agents
    run, its tracing turned on)."""

    @property
    def FRAMEWORK(self) -> Framework:  # a module constant
        """What it records its own way (``_framework``), which the readers and the assembly ask."""

    def install(self) -> None:
        """Guard the framework's tool dispatch, on its classes; called again after each agent is built."""

    def accepts(self, agent: Any) -> bool:
        """The agent is one of this framework's (called only once the framework is imported)."""

    def prepare(self, agent: Any, case: Any) -> Callable[[str], Any]:
        """What to call with the prompt: the agent run with the case's earlier messages (``_history``)."""

    def instrument(self) -> Callable[[], None] | None:
        """Turn the framework's tracing on when nothing traces it; returns the undo (None: nothing done)."""
