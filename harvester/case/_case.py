"""The runnable case: what the replay runner runs, written in code or compiled from a case file."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..model import Run
    from ._format import AgentCase

__all__ = ["Case"]


@dataclass
class Case:
    """A runnable case. ``task`` is the prompt; ``checks`` are callables ``Run -> (bool, str)``.

    ``spec`` links back to the case file it was compiled from (fixtures, injected failures). An
    in-code case has none: nothing is recorded for it, so a replay answers each of its tool calls
    with a ``no_fixture`` result (and the case says so), never with the live tool.
    """

    id: str
    task: str
    checks: Sequence[Callable[[Run], Any]] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    why: str = ""
    spec: AgentCase | None = None

    def __post_init__(self) -> None:
        if not self.why.strip():
            warnings.warn(f"case {self.id!r} has no 'why': say what it protects against", stacklevel=3)
