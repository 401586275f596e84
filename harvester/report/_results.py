"""What a replay saw of one case: its checks, divergence, unanswered calls and counts, as a report stores it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..canonical import canonical_json

__all__ = [
    "ANSWER_CHARS",
    "ARGS_CHARS",
    "Call",
    "CaseResult",
    "CheckResult",
    "Divergence",
    "Injected",
    "MAX_CALLS",
    "MAX_NO_FIXTURE_CALLS",
    "ModelDrift",
    "ModelServed",
    "NoFixtureCall",
    "SandboxCall",
    "args_text",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class CheckResult(_Strict):
    """One check's verdict: ``passed`` is None when it was not checked (the run lacks what it reads)."""

    name: str
    passed: bool | None
    detail: str


class Divergence(_Strict):
    """Where the replayed trajectory first left the recorded one (``step`` is 1-based; None = ran out)."""

    step: int
    recorded: str | None = None
    actual: str | None = None

    def summary(self) -> str:
        return f"diverged at step {self.step}: recorded {self.recorded or '(end)'}, actual {self.actual or '(end)'}"


class ModelDrift(_Strict):
    """Where a recorded-model replay met a request unlike the recorded one: ``step`` (1-based), what
    changed (``what``: "system prompt", "tools", "message", "settings", "more calls") and how, a line each."""

    step: int
    what: list[str] = Field(default_factory=list)
    changes: list[str] = Field(default_factory=list)

    def summary(self) -> str:
        return f"model_input_changed at step {self.step}: " + "; ".join(self.changes)


class ModelServed(_Strict):
    """How a case's model was served: ``mode`` (recorded, recorded-then-live), the steps the recording
    answered (their usage and cost are the recorded ones) of the ``recorded`` steps it holds, the drift,
    and the step from which the live model answered (``recorded-then-live``). ``unservable``: why the
    recording could not serve this case at all (no model fixtures, a truncated one)."""

    mode: str
    served: int = 0
    recorded: int = 0
    drift: ModelDrift | None = None
    live_from: int | None = None
    unservable: str | None = None

    def summary(self) -> str | None:
        """One line when the case was not served entirely from the recording; None when it was."""
        if self.unservable is not None:
            live = "; answered by the live model" if self.live_from is not None else ""
            return f"not served from the recording: {self.unservable}{live}"
        if self.drift is None:
            return None
        live = f"; continued on the live model from step {self.live_from}" if self.live_from is not None else ""
        return self.drift.summary() + live


class Injected(_Strict):
    tool: str
    mode: str


class NoFixtureCall(_Strict):
    """A call the recording could not answer: the tool, the reason code, and (``no_match``) the argument
    paths where the closest recorded call differs."""

    tool: str
    reason: str
    differs: list[str] = Field(default_factory=list)
    args: Any = None  # what the agent sent
    closest: Any = None  # the args of the closest recorded call of that tool, if it has any

    def summary(self, *, detailed: bool = False) -> str:
        """One line: the tool, why nothing answered it, where the closest recording differs; ``detailed``
        adds the arguments sent and the closest recorded ones (for a person reading a failed check)."""
        differs = f", differs at {', '.join(self.differs)}" if self.differs else ""
        if not detailed:
            return f"{self.tool}: {self.reason}{differs}"
        sent = f"{self.tool}({canonical_json(self.args)})" if self.args is not None else self.tool
        recorded = f"; recorded: {self.tool}({canonical_json(self.closest)})" if self.closest is not None else ""
        return f"{sent}: {self.reason}{differs}{recorded}"


class SandboxCall(_Strict):
    """A call that ran for real against the sandbox (``replay --sandbox``): its args (``args_text``),
    whether a recording stood for it and its tool span was found, and the paths where what it returned
    differs from what production returned (``.status``; ``(error)``: one failed, the other did not)."""

    tool: str
    args: str | None = None
    recorded: bool = True
    traced: bool = True
    differs: list[str] = Field(default_factory=list)

    def summary(self) -> str:
        call = f"{self.tool}({self.args or ''})"
        if not self.recorded:
            return f"{call}: ran in the sandbox, no recording to compare"
        if not self.traced:
            return f"{call}: ran in the sandbox, no tool span to compare"
        if not self.differs:
            return f"{call}: the sandbox answered as production did"
        return f"{call}: the sandbox differs from production at {', '.join(self.differs)}"


MAX_NO_FIXTURE_CALLS = 5  # per case, in the report; ``no_fixture`` counts them all
ARGS_CHARS = 300  # a call's args in the report, as canonical JSON cut to this many characters
MAX_CALLS = 50  # recorded and replayed calls per case the report keeps (for the HTML step alignment)
ANSWER_CHARS = 2000  # the recorded answer, as the report keeps it


def args_text(args: Any) -> str | None:
    """A call's args as the report keeps them: canonical JSON, cut to ``ARGS_CHARS`` (ending in "...")."""
    if args is None:
        return None
    text = canonical_json(args)
    return text if len(text) <= ARGS_CHARS else text[: ARGS_CHARS - 3] + "..."


class Call(_Strict):
    """One tool call of a trajectory as a report shows it: the tool, its args (``args_text``) and, for a
    replayed call, its status (ok, error, blocked, ...)."""

    tool: str
    args: str | None = None
    status: str = "ok"


class CaseResult(_Strict):
    """One case. With trials, the run fields describe the representative trial (the first failing one,
    else the last); ``passes``/``trials`` and ``unauthorised`` cover every trial."""

    id: str
    passed: bool  # every trial passed (pass^k), or a --confirm rerun did (confirmation "flaky")
    # With --confirm: "confirmed" (every rerun failed too) or "flaky" (a rerun passed; reruns are trials).
    confirmation: Literal["confirmed", "flaky"] | None = None
    # The harness could not evaluate it (the factory raised, a framework could not be guarded): neither
    # passed nor failed, left out of pass rates and comparisons, counted by the ``errored`` metric.
    errored: bool = False
    tags: list[str] = Field(default_factory=list)
    why: str = ""
    checks: list[CheckResult] = Field(default_factory=list)
    error: str | None = None  # the agent raised or hung: "<Type>: <message>"
    stop: str = "unknown"
    answer: str | None = None
    trajectory: list[str] = Field(default_factory=list)
    requested: list[str] = Field(default_factory=list)
    steps: int = 0
    cost: float | None = None  # mean over the trials whose cost is known
    tokens: int | None = None  # the representative trial's input + output tokens, when its spans said
    duration_ms: float = 0.0
    trials: int = 1
    passes: int | None = None
    divergence: Divergence | None = None
    no_fixture: int = 0
    tool_calls: int = 0  # calls that reached the executor
    redundant_calls: int = 0
    unauthorised: int = 0  # forbidden tool calls that executed, summed over trials
    live_calls: int = 0  # tool calls that ran (or tried to) outside the executor, summed over trials
    notes: list[str] = Field(default_factory=list)  # what the replay could not do as recorded (hosted tools)
    abstained: bool = False
    variant_of: str | None = None
    injected: Injected | None = None
    no_fixture_calls: list[NoFixtureCall] = Field(default_factory=list)  # the first MAX_NO_FIXTURE_CALLS
    # Recorded calls the replay never made ("tool(args)"), the first MAX_NO_FIXTURE_CALLS; ``unused`` counts all.
    unused: int = 0
    unused_calls: list[str] = Field(default_factory=list)
    # For the HTML report's step alignment (empty in reports written before them): the recorded calls
    # and the replayed ones (the representative trial's, every status), the first MAX_CALLS each.
    recorded_calls: list[Call] = Field(default_factory=list)
    calls: list[Call] = Field(default_factory=list)
    recorded_answer: str | None = None  # cut to ANSWER_CHARS
    model: ModelServed | None = None  # how its model was served (None: the live model, as before --model)
    # Calls that ran for real against the sandbox (replay --sandbox), the first MAX_CALLS, each compared
    # with its recording; empty without --sandbox.
    sandboxed: list[SandboxCall] = Field(default_factory=list)

    @model_validator(mode="after")
    def _default_passes(self) -> CaseResult:
        if self.passes is None:  # reports written before trials existed
            self.passes = self.trials if self.passed else 0
        return self

    @property
    def pass_rate(self) -> float:
        return (self.passes or 0) / self.trials if self.trials else 0.0

    @property
    def flaky(self) -> bool:
        """Passed some trials, not all; never a case whose failing trial the seal refused something in
        (trying to leave the process is no flakiness)."""
        return 0 < (self.passes or 0) < self.trials and not any(
            c.name == "sealed" and c.passed is False for c in self.checks
        )

    def failed_checks(self) -> list[CheckResult]:
        return [c for c in self.checks if c.passed is False]

    def differences(self) -> str | None:
        """How the replay left its recording, on one line (None when it did not): no_fixture calls, the
        divergence, then recorded calls it never made. A variant's divergence (and what it left unused)
        is its injected failure at work, so only its calls count."""
        parts = []
        served = self.model.summary() if self.model is not None else None
        if served:
            parts.append(served)
        if self.no_fixture:
            shown = self.no_fixture_calls[:3]
            more = "; ..." if self.no_fixture > len(shown) else ""
            detail = f" ({'; '.join(c.summary() for c in shown)}{more})" if shown else ""
            parts.append(f"{self.no_fixture} no_fixture call{'s' if self.no_fixture != 1 else ''}{detail}")
        if self.divergence is not None and self.variant_of is None:
            parts.append(self.divergence.summary())
        differ = [c for c in self.sandboxed if c.differs]
        if differ:
            said = (f"sandbox {c.tool} differs from production at {', '.join(c.differs)}" for c in differ[:3])
            parts.append("; ".join(said))
        if self.unused and self.variant_of is None:
            calls = ", ".join(self.unused_calls[:3]) + (", ..." if self.unused > 3 else "")
            parts.append(f"{self.unused} recorded call{'s' * (self.unused != 1)} never made ({calls})")
        return "; ".join(parts) or None

    def reasons(self) -> list[str]:
        """Why it failed, one line each: the agent error, then the failed checks."""
        out = [f"agent error: {self.error}"] if self.error else []
        out.extend(f"{c.name}: {c.detail}" for c in self.failed_checks())
        return out
