"""Routing that only led to harm: the handoffs an incident case must not demand back.

An incident reached through a handoff (a triage agent hands over to a refunds agent, which issues the
refund nobody asked for) records the handoff as an executed call. Required like any other call, it
would fail the fixed agent forever: one that no longer hands over, or hands over and refuses, makes
no such call, or makes it for nothing. So a routing call (one a framework answers by running an agent:
an openai-agents handoff ``transfer_to_<agent>``, a smolagents managed agent, named from
``Run.agents``) whose calls up to the next routing call were only harmful ones is left out of what
the case requires: no fixture (the framework never asks the executor for it), no place in
``min_steps``, ``appropriate_tools``, the ``trajectory_match`` reference or an order rule. A review
note says so. A handoff that also led to work the task needed (the order looked up) stays required.
"""

from __future__ import annotations

from collections.abc import Collection

from ..case import NOTE_PREFIX
from ..conventions import agent_calls
from ..model import Run

__all__ = ["routes_to_harm", "routes_note"]


def routes_to_harm(run: Run, harmful: Collection[str]) -> set[int]:
    """Indices into ``run.calls`` of the routing calls that led only to ``harmful`` calls.

    Read backwards: a routing call's calls run until the next routing call (a handoff hands the run
    over for good). It led only to harm when that stretch holds a harmful call and no other work, or
    is empty and ends at a routing call that itself led only to harm (a chain of handoffs).
    """
    routing = agent_calls(run.agents)
    if not harmful or not routing:
        return set()
    out: set[int] = set()
    harm = work = False  # what the stretch after the current position did
    for i in range(len(run.calls) - 1, -1, -1):
        call = run.calls[i]
        if not call.executed:
            continue
        if call.name in routing:
            led_to_harm = harm and not work
            if led_to_harm:
                out.add(i)
            harm, work = led_to_harm, not led_to_harm
        elif call.name in harmful:
            harm = True
        else:
            work = True
    return out


def routes_note(run: Run, left_out: Collection[int], harmful: Collection[str]) -> str:
    """The review note that says which routing calls the case leaves out, and why."""
    first = min(left_out)
    names = ", ".join(dict.fromkeys(run.calls[i].name for i in sorted(left_out)))
    harm = ", ".join(dict.fromkeys(c.name for c in run.calls[first:] if c.executed and c.name in harmful))
    return (
        f"{NOTE_PREFIX}{names} left out of the required calls (fixtures, min_steps, appropriate_tools, "
        f"trajectory_match, order): a handoff that only led to {harm}, which this case forbids, so a fixed "
        "agent need not make it; add it to the trajectory_match reference if the handoff itself must happen"
    )
