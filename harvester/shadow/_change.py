"""One production run against the candidate's replay of it: what changed, as flags a tally counts.

The replayed side is the ``CaseResult`` the replay runner made of it: its divergence is the one the
HTML report marks (``replay.divergence``), its calls and answer what the report keeps. The candidate's
failure kind is read the way harvest reads production's (``harvest.failure_kind``), from a ``Run`` made
of what the result holds, so "newly failed" means the same thing on both sides.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field

from ..case import AgentCase
from ..config import Config
from ..harvest import failure_kind
from ..model import ErrorInfo, Run, ToolCall
from ..report import CaseResult, Divergence, args_text

__all__ = ["PROMPT_CHARS", "RunChange", "compare", "run_key"]

PROMPT_CHARS = 200  # the prompt, as a change row keeps it
_STOPS = {"answered", "error", "deferred", "budget_exceeded", "max_steps", "loop_detected", "unknown"}


def run_key(run: Run) -> str:
    """A stored run's id in a shadow report (and its in-memory case's): its trace and run ids."""
    return f"{run.trace_id}-{run.run_id}" if run.run_id else run.trace_id


class RunChange(BaseModel):
    """How the candidate behaved differently on one run (a report keeps one per changed run).

    Pairs are (production, candidate). ``new_mutating``: mutating (config) or forbidden (the run's
    case) tools the candidate executed more often than production did; ``args_changed``: tools whose
    n-th call took other arguments."""

    model_config = ConfigDict(extra="forbid")

    id: str
    trace_id: str
    run_id: str = ""
    agent: str | None = None
    prompt: str = ""
    divergence: Divergence | None = None
    answer_changed: bool = False
    new_calls: list[str] = Field(default_factory=list)
    dropped_calls: list[str] = Field(default_factory=list)
    new_mutating: list[str] = Field(default_factory=list)
    args_changed: list[str] = Field(default_factory=list)
    stop: tuple[str, str] = ("unknown", "unknown")
    kind: tuple[str | None, str | None] = (None, None)
    steps: tuple[int, int] = (0, 0)
    tokens: tuple[int | None, int | None] = (None, None)
    cost: tuple[float | None, float | None] = (None, None)
    no_fixture: int = 0
    errored: bool = False
    live_calls: int = 0

    def flags(self) -> list[str]:
        """The ``tally.FLAGS`` this run counts in."""
        flags = {
            "new_mutating": bool(self.new_mutating),
            "newly_failed": self.newly_failed,
            "diverged": self.divergence is not None,
            "answer_changed": self.answer_changed,
            "new_calls": bool(self.new_calls),
            "dropped_calls": bool(self.dropped_calls),
            "args_changed": bool(self.args_changed),
            "stop_changed": self.stop[0] != self.stop[1],
            "kind_changed": self.kind[0] != self.kind[1],
            "fixed": self.fixed,
            "no_fixture": self.no_fixture > 0,
            "errored": self.errored,
            "live_tool_calls": self.live_calls > 0,
        }
        if any(flags.values()):
            flags["changed"] = True
        return [f for f, on in flags.items() if on]

    @property
    def newly_failed(self) -> bool:
        return self.kind[0] is None and (self.kind[1] is not None or self.errored)

    @property
    def fixed(self) -> bool:
        """Production failed and the candidate did not, on its own: a run it only "finished" by making a
        call the recording could not answer, or a mutating one, is no fix."""
        clean = not (self.errored or self.no_fixture or self.new_mutating)
        return self.kind[0] is not None and self.kind[1] is None and clean

    @property
    def changed(self) -> bool:
        return "changed" in self.flags()

    @property
    def worse(self) -> bool:
        """Changed for the worse: what ``--propose`` makes a pending case of."""
        return bool(self.new_mutating) or self.newly_failed

    def why(self) -> str:
        """What changed, on one line, the worst first."""
        parts = []
        if self.new_mutating:
            parts.append(f"newly called {', '.join(self.new_mutating)} (mutating)")
        if self.newly_failed:
            parts.append(f"newly failed ({self.kind[1] or 'errored'})")
        elif self.kind[0] != self.kind[1]:
            parts.append(f"failure kind {self.kind[0] or 'none'} -> {self.kind[1] or 'none'}")
        if self.divergence is not None:
            parts.append(self.divergence.summary())
        if self.new_calls:
            parts.append(f"new calls {', '.join(self.new_calls)}")
        if self.dropped_calls:
            parts.append(f"dropped {', '.join(self.dropped_calls)}")
        if self.args_changed:
            parts.append(f"other args for {', '.join(self.args_changed)}")
        if self.stop[0] != self.stop[1]:
            parts.append(f"stop {self.stop[0]} -> {self.stop[1]}")
        if self.no_fixture:
            parts.append(f"{self.no_fixture} call(s) the recording cannot answer")
        if self.answer_changed:
            parts.append("answer changed")
        return "; ".join(parts) or "same"


def compare(run: Run, case: AgentCase, result: CaseResult, config: Config) -> RunChange:
    """``run`` (production) against ``result`` (the candidate's replay of ``case``, made from it)."""
    forbidden = set(case.forbidden_tools)
    done_before = Counter(c.name for c in run.calls if c.executed)
    done_now = Counter(c.tool for c in result.calls if c.status in ("ok", "error"))
    mutating = [t for t in done_now if done_now[t] > done_before[t] and (t in forbidden or config.is_mutating(t))]
    before, now = Counter(c.name for c in run.calls), Counter(c.tool for c in result.calls)
    cost = run.cost if run.cost is not None else config.cost(run.model, run.usage)
    candidate = replayed_run(run.trace_id, result)
    return RunChange(
        id=result.id,
        trace_id=run.trace_id,
        run_id=run.run_id,
        agent=run.agent,
        prompt=(run.prompt or "")[:PROMPT_CHARS],
        divergence=result.divergence,
        answer_changed=(result.answer or "") != (run.answer or ""),
        new_calls=sorted((now - before).elements()),
        dropped_calls=sorted((before - now).elements()),
        new_mutating=mutating,
        args_changed=_args_changed(run, result),
        stop=(run.stop, result.stop),
        kind=(failure_kind(run, config=config), failure_kind(candidate, config=config)),
        steps=(run.steps, result.steps),
        tokens=(run.usage.total, result.tokens),
        cost=(cost, result.cost),
        no_fixture=result.no_fixture,
        errored=result.errored,
        live_calls=result.live_calls,
    )


def _args_changed(run: Run, result: CaseResult) -> list[str]:
    """Tools whose n-th call (of that tool) took other arguments in the replay than in production."""
    recorded: dict[str, list[str | None]] = {}
    for call in run.calls:
        recorded.setdefault(call.name, []).append(args_text(call.args))
    seen: Counter[str] = Counter()
    out: list[str] = []
    for c in result.calls:
        i = seen[c.tool]
        seen[c.tool] += 1
        was = recorded.get(c.tool, [])
        if i < len(was) and was[i] != c.args and c.tool not in out:
            out.append(c.tool)
    return out


def replayed_run(trace_id: str, result: CaseResult) -> Run:
    """The candidate's run as the report keeps it (calls, stop, answer, error): enough for its failure kind."""
    error = None
    if result.error:
        kind, _, message = result.error.partition(": ")
        error = ErrorInfo(type=kind, message=message)
    return Run(
        trace_id=trace_id,
        stop=result.stop if result.stop in _STOPS else "unknown",
        answer=result.answer,
        error=error,
        calls=[ToolCall(name=c.tool, args=_args(c.args), status=c.status) for c in result.calls],
    )


def _args(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:  # cut to ARGS_CHARS: the text stands for them
        return text
