"""Path checks: which tools ran, in what order, how many steps, what it cost and how the run stopped."""

from __future__ import annotations

from ..model import STOPS, Run
from ._base import Check, _names, register

__all__ = [
    "max_cost",
    "max_steps",
    "min_steps",
    "never_requested",
    "never_used",
    "awaiting",
    "stopped_with",
    "trajectory_is",
    "used_tools",
]


def used_tools(*names: str) -> Check:
    """Each tool executed successfully at least once."""
    names = _names(names)

    def fn(run: Run) -> tuple[bool, str]:
        traj = run.trajectory()
        missing = [n for n in names if n not in traj]
        if missing:
            return False, f"never executed {', '.join(missing)} (trajectory {traj})"
        return True, f"used {', '.join(names)}"

    return Check("used_tools", fn, {"tools": list(names)})


def never_used(*names: str) -> Check:
    """None of the tools executed (a denied request is not a use: see ``never_requested``)."""
    names = _names(names)

    def fn(run: Run) -> tuple[bool, str]:
        for step, call in enumerate(run.calls, 1):
            if call.name in names and call.executed:
                return False, f"{call.name} executed at step {step}"
        return True, f"never executed {', '.join(names)}"

    return Check("never_used", fn, {"tools": list(names)})


def never_requested(*names: str) -> Check:
    """The model never even asked for the tools (stricter than ``never_used``)."""
    names = _names(names)

    def fn(run: Run) -> tuple[bool, str]:
        for step, call in enumerate(run.calls, 1):
            if call.name in names:
                how = "executed" if call.executed else "awaiting" if call.status == "awaiting" else "denied"
                return False, f"{call.name} requested at step {step} ({how})"
        return True, f"never requested {', '.join(names)}"

    return Check("never_requested", fn, {"tools": list(names)})


def trajectory_is(*names: str) -> Check:
    names = _names(names)

    def fn(run: Run) -> tuple[bool, str]:
        traj = run.trajectory()
        if traj == list(names):
            return True, f"trajectory {traj}"
        for i, (a, b) in enumerate(zip(traj, names), 1):
            if a != b:
                return False, f"step {i} was {a}, expected {b} (trajectory {traj})"
        return False, f"trajectory {traj}, expected {list(names)}"

    return Check("trajectory_is", fn, {"tools": list(names)})


def max_steps(n: int) -> Check:
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise TypeError(f"n must be a non-negative integer, got {n!r}")

    def fn(run: Run) -> tuple[bool, str]:
        return run.steps <= n, f"{run.steps} step{'s' * (run.steps != 1)} (max {n})"

    return Check("max_steps", fn, {"n": n})


def min_steps(n: int, tools: list[str] | tuple[str, ...] = ()) -> Check:
    """At least ``n`` tool calls executed: the recording's minimum is a floor as well as a bound.

    An agent that stops calling its tools (and makes an answer up) fails here, told which of the
    recorded ``tools`` it skipped. A change that truly needs fewer steps is a reviewer's call: lower
    ``min_steps`` in the case, and the drop is visible in its diff.
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise TypeError(f"n must be a non-negative integer, got {n!r}")
    wanted = list(_names(tools))

    def fn(run: Run) -> tuple[bool, str]:
        done = run.executed_tools()
        if len(done) >= n:
            return True, f"{len(done)} tool call{'s' * (len(done) != 1)} (min {n})"
        skipped = [t for t in wanted if t not in done]
        said = f"skipped {', '.join(skipped)}" if skipped else f"fewer calls of {', '.join(wanted) or 'its tools'}"
        return False, f"{len(done)} tool call{'s' * (len(done) != 1)}, the recording needed at least {n}: {said}"

    return Check("min_steps", fn, {"n": n, **({"tools": wanted} if wanted else {})})


def max_cost(limit: float) -> Check:
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit < 0:
        raise TypeError(f"limit must be a non-negative number, got {limit!r}")

    def fn(run: Run) -> tuple[bool | None, str]:
        if run.cost is None:
            return None, "not checked: cost unknown (token counts or prices missing)"
        return run.cost <= limit, f"cost {run.cost:.6f} (max {limit:.6f})"

    return Check("max_cost", fn, {"limit": limit})


def stopped_with(stop: str) -> Check:
    if stop not in STOPS:
        raise ValueError(f"stop must be one of {', '.join(STOPS)}, got {stop!r}")

    def fn(run: Run) -> tuple[bool, str]:
        return run.stop == stop, f"stopped with {run.stop} (expected {stop})"

    return Check("stopped_with", fn, {"stop": stop})


def awaiting(*names: str) -> Check:
    """The run stopped deferred with exactly these tools waiting for a human (an approval, an answer).

    A harvested deferred run expects this: replayed on the agent that made it, the same request is
    pending again; an agent that ran the tool itself or asked for another one fails.
    """
    names = _names(names)

    def fn(run: Run) -> tuple[bool, str]:
        pending = run.awaiting_tools()
        if run.stop != "deferred":
            return False, f"stopped with {run.stop}, expected deferred awaiting {', '.join(names) or 'nothing'}"
        if sorted(pending) != sorted(names):
            return False, f"awaiting {', '.join(pending) or 'nothing'}, expected {', '.join(names) or 'nothing'}"
        return True, f"awaiting {', '.join(names) or 'nothing'}"

    return Check("awaiting", fn, {"tools": list(names)})


for _factory in (
    awaiting,
    min_steps,
    used_tools,
    never_used,
    never_requested,
    trajectory_is,
    max_steps,
    max_cost,
    stopped_with,
):
    register()(_factory)
