"""What went wrong in a run: its failure kind, read once with the fixture keys the case will need.

Failure kinds, by precedence (the first that applies wins; the order goes from what did damage, to
how the run ended, to what merely contributed, to a flag with nothing mechanical behind it):

1. ``unintended_action``  an incident run executed a mutating or ``--forbid`` tool
2. ``blocked_action``     the model requested a call that was denied (status ``blocked``)
3. ``loop``               stop ``loop_detected``, or one call (same fixture key) made 3+ times
4. ``budget_exceeded``    stop ``budget_exceeded``
5. ``max_steps``          stop ``max_steps``
6. ``exception``          stop ``error`` or a run-level error
7. ``tool_error``         a tool call failed
8. ``abstained``          a flagged run (incident or negative feedback) whose answer abstains
9. ``negative_feedback``  flagged negative (feedback or the incident command), nothing else visible

An unflagged run that abstains is not a failure: its abstention is the behaviour to keep, so its
case checks ``abstained`` instead of ``answered``. Neither is a run that stopped ``deferred`` (handed
to a human, or waiting for an approval of a call, status ``awaiting``): its case checks that the
replay stops the same way, on the same pending request, and is tagged ``deferred``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from .. import checks as checklib
from ..canonical import fixture_key
from ..config import Config
from ..model import Run

__all__ = ["ABSTAINED", "FAILURE_KINDS", "LOOP_REPEATS", "Reading", "failure_kind", "read_run"]

FAILURE_KINDS: tuple[str, ...] = (
    "unintended_action",
    "blocked_action",
    "loop",
    "budget_exceeded",
    "max_steps",
    "exception",
    "tool_error",
    "abstained",
    "negative_feedback",
)
LOOP_REPEATS = 3  # the same call this many times is a loop
ABSTAINED = checklib.abstained()
_STOP_STOPS = {"loop_detected": "loop", "budget_exceeded": "budget_exceeded", "max_steps": "max_steps"}


@dataclass(slots=True)
class Reading:
    """What the harvest needs to know about one run, computed once (keys hash every argument)."""

    keys: list[str]
    kind: str | None
    detail: str
    unintended: list[str]  # tools that should not have run (incident only)
    abstains: bool
    incident: bool = False  # someone reported the run (``harvester incident``)


def read_run(run: Run, config: Config, *, incident: bool, forbid: Iterable[str]) -> Reading:
    ignore = config.ignore_args
    keys = [fixture_key(c.name, c.args, ignore.get(c.name, ())) for c in run.calls]
    abstains = bool(run.answer) and ABSTAINED(run)[0] is True
    forbid = set(forbid)
    unintended: list[str] = []
    if incident:
        unintended = list(
            dict.fromkeys(c.name for c in run.calls if c.executed and (c.name in forbid or config.is_mutating(c.name)))
        )
    kind, detail = _failure(run, keys, unintended, abstains, flagged=incident or run.feedback == "negative")
    return Reading(keys, kind, detail, unintended, abstains, incident)


def _failure(run: Run, keys: list[str], unintended: list[str], abstains: bool, flagged: bool) -> tuple[str | None, str]:
    """(kind, what was seen) in the module docstring's precedence; (None, "") for a run that went fine."""
    calls = run.calls
    if unintended:
        step = next(i for i, c in enumerate(calls, 1) if c.name in unintended and c.executed)
        return "unintended_action", f"{', '.join(unintended)} executed (first at step {step})"
    for step, call in enumerate(calls, 1):
        if call.status == "blocked":
            return "blocked_action", f"{call.name} was requested and denied at step {step}"
    counts: dict[str, int] = {}
    for key in keys:
        counts[key] = counts.get(key, 0) + 1
    repeated = max(counts, key=counts.__getitem__) if counts else None
    if run.stop == "loop_detected" or (repeated is not None and counts[repeated] >= LOOP_REPEATS):
        if repeated is not None and counts[repeated] >= LOOP_REPEATS:
            return "loop", f"{repeated.split(':', 1)[0]} called {counts[repeated]} times with the same arguments"
        return "loop", "stopped with loop_detected"
    if run.stop in ("budget_exceeded", "max_steps"):
        return _STOP_STOPS[run.stop], f"stopped with {run.stop} after {run.steps} steps"
    if run.stop == "error" or run.error is not None:
        err = run.error
        return "exception", f"{err.type}: {err.message}" if err else "stopped with error"
    for step, call in enumerate(calls, 1):
        if call.status == "error":
            err = call.error
            what = f"{err.type}: {err.message}" if err else "error"
            return "tool_error", f"{call.name} failed at step {step} ({what})"
    if flagged and abstains:
        return "abstained", f"abstained: {(run.answer or '')[:80]!r}"
    if flagged:
        return "negative_feedback", "flagged negative"
    return None, ""


def failure_kind(
    run: Run, *, config: Config | None = None, incident: bool = False, forbid: Iterable[str] = ()
) -> str | None:
    """The failure kind of ``run`` (see the module docstring for the precedence), or None."""
    return read_run(run, config or Config(), incident=incident, forbid=forbid).kind
