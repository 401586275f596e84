"""A harvested check's life cycle: what a check declares to be proposed, kept, edited and shown.

Some checks are not written by hand but proposed: harvest reads them off the run it freezes
(``trajectory_match`` against the recorded calls, ``call_order`` around mutating ones), ``rerecord``
takes a newer recording and must keep what the reviewer changed, ``harvester review`` edits them and
``cases show`` prints them. A ``HarvestedCheck`` declares each step in its own module; the harvest,
the refresh, the review and the case format only walk the table (``checks.HARVESTED``), so none of
them names a check.

What a harvested check keeps in a case is its *value*: a list of JSON objects in the case file, in
one of two places (its ``slot``): its specs among the case's ``checks`` (``CHECKS``), or the entries
of a case field of its own (``order``: one rule each, compiled into one check each). Every hook reads
and returns that value, so the file's bytes are the check's business alone.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

if TYPE_CHECKING:
    from ..config import Config

__all__ = ["CHECKS", "Ask", "HarvestedCheck", "RecordedCall", "Recording", "Spec", "held", "placed"]

Spec = dict[str, Any]  # one JSON object of a case file: a check spec, or one entry of a check's own field
CHECKS = "checks"  # the slot of a check kept as specs among the case's checks


class RecordedCall(Protocol):
    """One call a case records and a replay is served (a case file's fixture)."""

    @property
    def tool(self) -> str: ...

    @property
    def args(self) -> Any: ...

    @property
    def error(self) -> object | None: ...  # None: it succeeded


class Recording(NamedTuple):
    """What a case recorded and what it forbids: all a harvested check is proposed from, refreshed
    against and edited with. Harvest builds it from the run it freezes, a case from its own fields."""

    fixtures: Sequence[RecordedCall]  # the calls a replay is served, in recorded order
    trajectory: Sequence[str]  # every call that succeeded, a handoff harvest left unserved included
    forbidden: Collection[str]  # tools the case forbids: never what it expects
    ignore_args: Mapping[str, Sequence[str]]  # arg paths left out of a comparison, per tool

    def records(self) -> set[str]:
        """The calls the case records: a rule about any other would pass forever, checking nothing."""
        return {f.tool for f in self.fixtures} | set(self.trajectory)


class Ask(Protocol):
    """One question of a review edit; the answer typed (``default`` on Enter, one of ``choices`` if any)."""

    def __call__(self, question: str, default: str, choices: Sequence[str] = ()) -> str: ...


@runtime_checkable
class HarvestedCheck(Protocol):
    """The life cycle of a check harvest proposes: one instance per check, one line in ``HARVESTED``."""

    @property
    def name(self) -> str:
        """The check it makes: its name in ``REGISTRY``, a spec's ``check``."""
        ...

    @property
    def field(self) -> str:
        """The field ``harvester review`` offers to edit it (``trajectory``)."""
        ...

    @property
    def slot(self) -> str:
        """Where a case keeps its value: ``CHECKS``, or the name of a case field of its own (``order``)."""
        ...

    def propose(self, recording: Recording, config: Config) -> list[Spec]:
        """The value harvest proposes for a case of ``recording`` (empty: nothing to check)."""
        ...

    def refresh(self, reviewed: list[Spec], fresh: list[Spec], recording: Recording) -> list[Spec]:
        """The value a rerecorded case keeps: the reviewer's ``reviewed`` against the new ``recording``
        (``fresh``: what harvest proposes for it)."""
        ...

    def edit(self, value: list[Spec], recording: Recording, ask: Ask) -> list[Spec]:
        """The value after a reviewer's answers to ``ask``; ``ValueError`` (a reason) leaves it unchanged."""
        ...

    def compiled(self, spec: Spec, recording: Recording) -> Spec:
        """One of its specs as a case runs it (a check may read the case's fields: ``ignore_args``)."""
        ...

    def render(self, value: list[Spec]) -> str | None:
        """The line ``cases show`` and ``review`` print for it (None: its specs' labels say it)."""
        ...

    def changes(self, before: list[Spec], after: list[Spec]) -> list[str]:
        """What a rerecord changed in it, one line each."""
        ...


def held(check: HarvestedCheck, fields: Mapping[str, Any]) -> list[Spec]:
    """The value ``check`` keeps in a case's ``fields`` (``model_dump`` form)."""
    if check.slot == CHECKS:
        return [spec for spec in fields.get(CHECKS) or () if spec.get("check") == check.name]
    return list(fields.get(check.slot) or ())


def placed(check: HarvestedCheck, fields: Mapping[str, Any], value: list[Spec]) -> dict[str, Any]:
    """The update that puts ``value`` in ``check``'s slot of ``fields``: its specs among the checks
    replaced where they stand (one fewer: the last goes; more: appended), or its own field set."""
    if check.slot != CHECKS:
        return {check.slot: value}
    new = iter(value)
    out = []
    for spec in fields.get(CHECKS) or ():
        if spec.get("check") != check.name:
            out.append(spec)
        elif (replaced := next(new, None)) is not None:
            out.append(replaced)
    return {CHECKS: [*out, *new]}
