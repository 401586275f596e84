"""Cases: the in-code ``Case`` and the reviewable case file ``AgentCase`` (``cases/<id>.json``).

A case file is plain JSON, never executed; loading validates it and names the file and field in
every error. ``AgentCase.to_case()`` compiles it into the runnable form the replay runner uses,
with the automatic checks first (mechanical, then structural) and the case's own checks after.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from . import checks as checklib
from .model import ErrorInfo, Run

SCHEMA = "harvester.case/1"
Status = Literal["pending", "accepted", "rejected"]


@dataclass
class Case:
    """A runnable case. ``task`` is the prompt; ``checks`` are callables ``Run -> (bool, str)``.

    ``spec`` links back to the case file it was compiled from (fixtures, injected failures); an
    in-code case has none, so its tools run live unless the agent supplies its own.
    """

    id: str
    task: str
    checks: list[Callable[[Run], Any]] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    why: str = ""
    spec: Optional["AgentCase"] = None

    def __post_init__(self) -> None:
        if not self.why.strip():
            warnings.warn(f"case {self.id!r} has no 'why': say what it protects against", stacklevel=3)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Fixture(_Strict):
    """One recorded tool call. ``key`` is ``tool:args_hash`` after the case's ``ignore_args``."""

    key: str
    tool: str
    args: Any = None
    result: Any = None
    error: Optional[ErrorInfo] = None
    truncated: bool = False


class Recorded(_Strict):
    trajectory: list[str] = Field(default_factory=list)
    stop: str = "unknown"
    answer: Optional[str] = None
    steps: int = 0
    cost: Optional[float] = None


class Source(_Strict):
    trace_id: Optional[str] = None
    captured_at: Optional[str] = None
    agent: Optional[str] = None
    failure_kind: Optional[str] = None
    seen: int = 1


class InjectSpec(_Strict):
    """A failure to inject into one tool: on every call, or on the first ``times`` calls."""

    mode: Literal["timeout", "not_found", "rate_limit", "permission", "empty", "malformed", "huge"]
    times: Optional[int] = None


class AgentCase(_Strict):
    schema_: Literal["harvester.case/1"] = Field(SCHEMA, alias="schema")
    id: str
    status: Status = "pending"
    why: str = ""
    prompt: str
    expected: Optional[str] = None
    required_elements: list[str] = Field(default_factory=list)
    checks: list[dict[str, Any]] = Field(default_factory=list)
    min_steps: Optional[int] = None
    appropriate_tools: list[str] = Field(default_factory=list)
    forbidden_tools: list[str] = Field(default_factory=list)
    max_cost: Optional[float] = None
    tags: list[str] = Field(default_factory=list)
    inject_failures: dict[str, InjectSpec] = Field(default_factory=dict)
    ignore_args: dict[str, list[str]] = Field(default_factory=dict)
    strict_repeats: bool = False
    fixtures: list[Fixture] = Field(default_factory=list)
    # Reasons a reviewer must look before accepting (truncated results, hidden payloads, ...).
    review_notes: list[str] = Field(default_factory=list)
    recorded: Recorded = Field(default_factory=Recorded)
    source: Source = Field(default_factory=Source)

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    def auto_checks(self) -> list[checklib.Check]:
        """The checks a case's fields imply, cheapest first: forbidden tools, cost, required elements, steps."""
        out: list[checklib.Check] = []
        if self.forbidden_tools:
            out.append(checklib.never_used(*self.forbidden_tools))
        if self.max_cost is not None:
            out.append(checklib.max_cost(self.max_cost))
        if self.required_elements:
            out.append(checklib.contains(*self.required_elements))
        if self.min_steps:
            out.append(checklib.max_steps(3 * self.min_steps))
        return out

    def compiled_checks(self, file: str | None = None) -> list[checklib.Check]:
        declared = [checklib.from_spec(spec, where=_where(file, f"checks[{i}]")) for i, spec in enumerate(self.checks)]
        auto = self.auto_checks()
        seen = {c.label() for c in auto}
        return auto + [c for c in declared if c.label() not in seen]

    def to_case(self, file: str | None = None) -> Case:
        return Case(id=self.id, task=self.prompt, checks=self.compiled_checks(file), tags=list(self.tags),
                    why=self.why or "(no why recorded)", spec=self)


def _where(file: str | None, field: str) -> str:
    return f"{file}: {field}" if file else field
