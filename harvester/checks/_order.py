"""``call_order``: a call only after the calls it needs, and the order a harvested case keeps with it.

A harvested case's ``trajectory_match`` is ``superset``, which ignores order: an agent that issues the
refund before looking the order up passes it. So for each mutating call the recording made (a
``mutating_tools`` tool of the config, or a tool the case forbids), harvest proposes a rule in the
case's ``order``: the calls recorded successfully before it come before it in the replay too, one
``call_order`` check per rule. A reviewer relaxes a rule in the case file, visible in its diff: names
taken out of ``after`` (an empty ``after`` keeps the rule, relaxed), or the rule deleted (a rerecord
then proposes it again).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..model import Run
from ._base import Check, register
from ._life import Ask, Recording, Spec

if TYPE_CHECKING:
    from ..config import Config

__all__ = ["HarvestedCallOrder", "call_order", "order_text"]


def order_text(call: str, after: Sequence[str]) -> str:
    """``issue_refund after kb_search, get_order`` (``-`` for an empty ``after``): a rule as a case
    shows it and ``review`` takes it."""
    return f"{call} after {', '.join(after) or '-'}"


def call_order(call: str, after: Sequence[str] = ()) -> Check:
    """``call`` executed only once each of ``after`` had executed successfully: the order looked up
    before the refund. Only what comes before ``call`` is checked, so other calls may move freely; a
    run that never executed ``call`` passes (whether it must is ``trajectory_match``'s question, whether
    it may is ``never_used``'s)."""
    if not isinstance(call, str) or not call:
        raise TypeError(f"call must be a tool name, got {call!r}")
    if isinstance(after, str) or not all(isinstance(a, str) and a for a in after):
        raise TypeError(f"after must be a list of tool names, got {after!r}")
    before = list(dict.fromkeys(after))

    def fn(run: Run) -> tuple[bool, str]:
        done: set[str] = set()
        for step, c in enumerate(run.calls, 1):
            if c.name == call and c.executed:
                early = [a for a in before if a not in done]
                if early:
                    return False, f"{_too_early(run, call, step, early)} (trajectory {run.trajectory()})"
                return True, f"{call} at step {step}, after {', '.join(before) or 'nothing required'}"
            if c.status == "ok":
                done.add(c.name)
        return True, f"{call} never executed: nothing to order"

    return Check("call_order", fn, {"call": call, "after": before}, title=f"call_order({order_text(call, before)})")


register()(call_order)


def _too_early(run: Run, call: str, step: int, early: list[str]) -> str:
    """Why ``call`` at ``step`` broke its order: the calls it needs that succeeded only later, and those
    that never did (saying they came later would send the reader looking for a call that is not there)."""
    ran = {c.name for c in run.calls if c.status == "ok"}
    later = [a for a in early if a in ran]
    never = [a for a in early if a not in ran]
    said = [f"{call} came too early: executed at step {step}, before {', '.join(later)}"] if later else []
    if never:
        said.append(f"{call} ran, but {', '.join(never)}, which must come before it, never ran successfully")
    return "; ".join(said)


class HarvestedCallOrder:
    """``call_order``'s life cycle: kept as the rules of the case's ``order``, one check per rule."""

    name = "call_order"
    field = "order"
    slot = "order"

    def propose(self, recording: Recording, config: Config) -> list[Spec]:
        """One rule per mutating tool, at its first execution: the distinct tools that ran successfully
        before it, except the forbidden ones (the case cannot demand them). A mutating call with
        nothing before it has no rule."""
        banned = set(recording.forbidden)
        rules: list[Spec] = []
        seen: set[str] = set()
        done: dict[str, None] = {}
        for f in recording.fixtures:
            if f.tool not in seen and (f.tool in banned or config.is_mutating(f.tool)):
                seen.add(f.tool)
                after = [name for name in done if name != f.tool]
                if after:
                    rules.append({"call": f.tool, "after": after})
            if f.error is None and f.tool not in banned:
                done[f.tool] = None
        return rules

    def refresh(self, reviewed: list[Spec], fresh: list[Spec], recording: Recording) -> list[Spec]:
        """The reviewer's rules, less the calls the new recording no longer makes (a rule about one would
        fail the case file's check), then the new recording's rules for mutating calls they do not name."""
        recorded = recording.records()
        kept = [
            {"call": rule["call"], "after": [a for a in rule["after"] if a in recorded]}
            for rule in reviewed
            if rule["call"] in recorded
        ]
        named = {rule["call"] for rule in kept}
        return kept + [rule for rule in fresh if rule["call"] not in named]

    def edit(self, value: list[Spec], recording: Recording, ask: Ask) -> list[Spec]:
        """The rules as they are shown: ``issue_refund after kb_search, get_order; send_email after -``
        (``-``, or no ``after``, is a rule with nothing required before its call; ``-`` alone drops them)."""
        hint = "'CALL after A, B; ...', an empty after as '-'; '-' drops every rule"
        answer = ask(f"order ({hint})", self.render(value))
        rules = []
        for text in filter(None, (part.strip() for part in answer.split(";"))):
            if text == "-":
                continue
            call, _, after = text.partition(" after ")
            rules.append(
                {"call": call.strip(), "after": [a.strip() for a in after.split(",") if a.strip() not in ("", "-")]}
            )
        if not rules and answer.strip() != "-":  # " ; " is no rule: only "-" drops them all, on purpose
            raise ValueError(f"{answer!r} names no rule ({hint})")
        return rules

    def compiled(self, spec: Spec, recording: Recording) -> Spec:
        return spec

    def render(self, value: list[Spec]) -> str:
        return "; ".join(order_text(rule["call"], rule["after"]) for rule in value) or "-"

    def changes(self, before: list[Spec], after: list[Spec]) -> list[str]:
        if before == after:
            return []
        was, now = (self.render(rules) if rules else "(none)" for rules in (before, after))
        return [f"{self.field}: {was}  =>  {now}"]
