"""The order a harvested case keeps around its mutating calls (the case's ``order``).

A harvested case's ``trajectory_match`` is ``superset``, which ignores order: an agent that issues the
refund before looking the order up passes it. So for each mutating call the recording made (a
``mutating_tools`` tool of the config, or a tool the case forbids), the case requires the calls
recorded successfully before it to come before it in the replay too (the ``call_order`` check). A
reviewer relaxes a rule in the case file, visible in its diff: names taken out of ``after`` (an empty
``after`` keeps the rule, relaxed), or the rule deleted (a rerecord then proposes it again).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence

from ..case import OrderRule
from ..model import ToolCall

__all__ = ["kept_order", "order_rules"]


def order_rules(
    calls: Iterable[ToolCall], mutating: Callable[[str], bool], left_out: Collection[str] = ()
) -> list[OrderRule]:
    """One rule per mutating tool, at its first execution: the distinct tools that ran successfully
    before it, except the ones in ``left_out`` (forbidden: the case cannot demand them). A mutating
    call with nothing before it has no rule."""
    rules: list[OrderRule] = []
    seen: set[str] = set()
    done: dict[str, None] = {}
    for call in calls:
        if not call.executed:
            continue
        if call.name not in seen and mutating(call.name):
            seen.add(call.name)
            after = [name for name in done if name != call.name]
            if after:
                rules.append(OrderRule(call=call.name, after=after))
        if call.status == "ok" and call.name not in left_out:
            done[call.name] = None
    return rules


def kept_order(old: Sequence[OrderRule], fresh: Sequence[OrderRule], recorded: Collection[str]) -> list[OrderRule]:
    """A rerecorded case's order: the reviewer's rules, less the calls the new recording no longer
    makes (a rule about one would fail the case file's check), then the new recording's rules for
    mutating calls the reviewer's do not name."""
    kept = [
        OrderRule(call=rule.call, after=[a for a in rule.after if a in recorded])
        for rule in old
        if rule.call in recorded
    ]
    named = {rule.call for rule in kept}
    return kept + [rule for rule in fresh if rule.call not in named]
