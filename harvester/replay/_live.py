"""The hermetic cross-check: tool calls of a replay that did not go through the case's executor.

The seam refuses a call it cannot route; this is the second line. The run read from the replay's
spans is paired call by call with the executor's log: whatever is left over ran for real, or was
requested and answered by nothing harvester can see, and fails the case by name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from ..canonical import canonical_json
from ..conventions import agent_names
from ..fixtures import FixtureTools
from ..model import Run, ToolCall
from ..report import MAX_NO_FIXTURE_CALLS, CheckResult

__all__ = ["LiveCall", "live_calls", "models_traced", "no_live_calls"]


@dataclass
class LiveCall:
    """A tool call that did not go through the case's executor: ``ran`` (its tool span says it executed),
    ``unserved`` (requested, and nothing the executor saw answered it), ``refused`` (it had lost the
    case's context, so the seam refused it) or ``sealed`` (it tried to reach outside the process and
    the seal refused it; ``detail`` says what)."""

    name: str
    args: Any
    how: str
    detail: str | None = None

    def summary(self) -> str:
        if self.how == "sealed":
            return f"sealed {self.detail}"
        args = canonical_json(self.args) if self.args is not None else "(args not captured)"
        if self.how == "ran":
            return f"{self.name}({args}) ran for real: a tool span the executor never served"
        if self.how == "unserved":
            return (
                f"{self.name}({args}) was requested and never reached the executor: denied where the "
                "recording ran it, or run where harvester cannot see (a process pool, a tool class with its "
                "own invoke, the function called directly)"
            )
        return f"{self.name}({args}) was called outside its case (a thread that lost or outlived it); refused"


# Errors a framework reports on a call it refused before any tool body could run.
_NOT_RUN = ("ValidationError", "ToolRetryError", "ModelRetry", "LiveToolCall", "ModelBehaviorError")


def live_calls(
    run: Run, tools: FixtureTools, spans: Sequence[ReadableSpan], denied: Sequence[str] = ()
) -> list[LiveCall]:
    """The calls of the replay trace that the executor never saw: tool bodies that ran some other way.

    Every call the run shows is paired with a call the executor logged (same tool and arguments first,
    then the same tool), whatever its status. Left over:
    - an executed call (ok, or failed in the body rather than refused for its arguments) ``ran``: an
      undecorated helper that emits a tool span, a framework path no adapter guards;
    - a call the model requested that nothing answered is ``unserved``, unless the recording shows it
      denied too: it was denied anew, or it ran where harvester sees nothing (a process pool, a tool
      class with its own ``invoke``, the function called directly).
    Calls a framework answers by running an agent (a managed agent, a handoff) are not tools, and a call
    the run stopped on awaiting a human (an approval) never ran.
    """
    agents = agent_names(spans) if spans else set()
    by_key: dict[tuple[str, str], int] = {}
    by_name: dict[str, int] = {}
    for entry in tools.log:
        by_key[(entry.name, entry.key)] = by_key.get((entry.name, entry.key), 0) + 1
        by_name[entry.name] = by_name.get(entry.name, 0) + 1
    unpaired: list[ToolCall] = []
    for call in run.calls:
        if call.name in agents:
            continue
        key = (call.name, tools.key_of(call.name, call.args))
        if by_key.get(key, 0) > 0:
            by_key[key] -= 1
            by_name[call.name] -= 1
        else:
            unpaired.append(call)
    live = []
    still_denied = list(denied)
    for call in unpaired:
        if by_name.get(call.name, 0) > 0:
            by_name[call.name] -= 1
        elif call.status == "awaiting":
            continue  # the run stopped on it, waiting for a human: the framework never ran a body
        elif call.status == "blocked":
            if call.name in still_denied:
                still_denied.remove(call.name)  # denied in production too: no tool body to run
            else:
                live.append(LiveCall(call.name, call.args, "unserved"))
        elif call.status == "ok" or not (
            call.error is not None and (call.error.type in _NOT_RUN or "validation error" in call.error.message)
        ):
            live.append(LiveCall(call.name, call.args, "ran"))
    return live


def no_live_calls(live: Sequence[LiveCall]) -> CheckResult | None:
    """A failed ``live_tool_call`` check naming each call that did not go through the executor."""
    if not live:
        return None
    shown = "; ".join(c.summary() for c in live[:MAX_NO_FIXTURE_CALLS])
    more = f"; and {len(live) - MAX_NO_FIXTURE_CALLS} more" if len(live) > MAX_NO_FIXTURE_CALLS else ""
    return CheckResult(name="live_tool_call", passed=False, detail=shown + more)


def models_traced(run: Run, untraced: Sequence[str]) -> CheckResult | None:
    """A failed ``hermetic`` check when the recording's model calls were traced by an SDK instrumentor
    (``untraced``) that this replay could not turn on, and the run shows no model call: what the model
    asked for is invisible, so a tool it requested may have run for real where nothing traced it."""
    if not untraced or run.llm_calls:
        return None
    return CheckResult(
        name="hermetic",
        passed=False,
        detail=f"the recording's model calls were traced by {', '.join(untraced)}, which this replay could not "
        "turn on (install it where replay runs, or instrument the client in the factory): harvester cannot see "
        "which tools the model asked for, and the app's own loop may have run them for real",
    )
