"""Review actions: what a reviewer decides on cases, one library for every way of reviewing (``review``,
``accept``, ``reject`` on the terminal; a review page later), so a case decided anywhere is the same bytes.

Each decision goes through ``CaseFolder`` and keeps its refusals (a case whose notes say it is broken,
one a redaction rule still matches). Taken in bulk, a case refused, unreadable or unknown is named and
the others are decided all the same: one bad case never blocks a reviewer's other verdicts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..checks import HARVESTED, Ask, placed
from ..errors import CaseFileError, InputError, NotFoundError, pydantic_field
from ._file import check_order, load_case
from ._folder import CaseFolder, case_files
from ._format import AgentCase, Label

__all__ = [
    "EDITABLE",
    "Decisions",
    "accept_cases",
    "edit_case",
    "field_update",
    "label_answer",
    "labelled",
    "pending_ids",
    "reject_cases",
]

# The fields a reviewer edits, in the order they are offered.
EDITABLE = (
    "why",
    "expected",
    "judges",
    "required_elements",
    "forbidden_tools",
    "appropriate_tools",
    "min_steps",
    "max_cost",
    "tags",
    "prompt",
    "review_notes",  # '-' clears them, once the case is fixed
    *(check.field for check in HARVESTED),  # each asks its own questions (trajectory: its mode; order: its rules)
)


@dataclass
class Decisions:
    """What a bulk decision did, case by case."""

    verdict: str  # "accepted" or "rejected"
    done: dict[str, Path] = field(default_factory=dict)  # case id -> its file now
    refused: dict[str, str] = field(default_factory=dict)  # case id -> why (one line)
    unknown: list[str] = field(default_factory=list)  # ids no case has

    @property
    def ok(self) -> bool:
        return not self.refused and not self.unknown

    def summary(self) -> str:
        """``accepted 9 of 10 cases; refused 1: c7; unknown: nope`` (the reasons are ``lines()``)."""
        total = len(self.done) + len(self.refused) + len(self.unknown)
        out = f"{self.verdict} {len(self.done)} of {total} case{'s' * (total != 1)}"
        if self.refused:
            out += f"; refused {len(self.refused)}: {', '.join(self.refused)}"
        if self.unknown:
            out += f"; unknown: {', '.join(self.unknown)}"
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "done": {cid: str(path) for cid, path in self.done.items()},
            "refused": self.refused,
            "unknown": self.unknown,
        }


def _decide(ids: Iterable[str], verdict: str, act: Callable[[str], Path]) -> Decisions:
    out = Decisions(verdict)
    for case_id in dict.fromkeys(ids):
        try:
            out.done[case_id] = act(case_id)
        except NotFoundError:
            out.unknown.append(case_id)
        except InputError as exc:  # broken notes, a secret, an unreadable file, an id that is not one
            out.refused[case_id] = str(exc)
    return out


def accept_cases(
    folder: CaseFolder,
    ids: Iterable[str],
    *,
    expected: str | None = None,
    required: Iterable[str] = (),
    force: bool = False,
    judge: str | None = None,
) -> Decisions:
    """``CaseFolder.accept`` each case (its refusals kept, one case at a time)."""
    required = list(required)
    return _decide(
        ids, "accepted", lambda cid: folder.accept(cid, expected=expected, required=required, force=force, judge=judge)
    )


def reject_cases(folder: CaseFolder, ids: Iterable[str], why: str) -> Decisions:
    """``CaseFolder.reject`` each case, with the same reason."""
    return _decide(ids, "rejected", lambda cid: folder.reject(cid, why))


def pending_ids(folder: CaseFolder, *, tag: str | None = None, cluster: str | None = None) -> list[str]:
    """Ids of the pending cases with ``tag`` and proposed for ``cluster`` (``harvest --by-cluster``).

    A pending file that does not read is selected when no filter asks what it holds, so that accepting
    refuses it by name rather than skipping it unseen. A ``cluster`` no case of any status was proposed
    for is an ``InputError`` naming the pending clusters.
    """
    selected: list[str] = []
    clusters: dict[str, str] = {}  # cluster -> status of a case proposed for it
    for path in case_files(folder.root):
        try:
            case = load_case(path, max_bytes=folder.max_bytes)
        except CaseFileError:
            if path.parent == folder.folder_for("pending") and tag is None and cluster is None:
                selected.append(path.stem)
            continue
        if case.source.cluster:
            clusters.setdefault(case.source.cluster, case.status)
        if case.status == "pending" and (tag is None or tag in case.tags):
            if cluster is None or case.source.cluster == cluster:
                selected.append(case.id)
    if cluster is not None and cluster not in clusters:
        pending = sorted(c for c, status in clusters.items() if status == "pending")
        known = (
            f" (pending clusters: {', '.join(pending)})" if pending else " (harvest some with: harvest --by-cluster)"
        )
        raise InputError(f"no case was proposed for cluster {cluster!r}{known}", field="cluster")
    return selected


def field_update(case: AgentCase, name: str, ask: Ask, *, default_judge: str | None = None) -> dict[str, Any]:
    """The update of field ``name`` (one of ``EDITABLE``) a reviewer's answers to ``ask`` make: a list
    comma-separated, ``-`` clearing; a harvested check asks its own questions; what a case expects is a
    judge's question, so setting it gives a case naming no judge ``default_judge``. ``ValueError`` (a
    reason) when the check refuses; ``edit_case`` then validates and saves the update."""
    if name not in EDITABLE:
        raise InputError(f"{name!r} is not a field review edits (one of: {', '.join(EDITABLE)})")
    harvested = next((check for check in HARVESTED if check.field == name), None)
    if harvested is not None:
        return placed(
            harvested, case.model_dump(by_alias=True), harvested.edit(case.held(harvested), case.recording(), ask)
        )
    listed = isinstance(getattr(case, name), list)
    raw = ask(f"{name} ({'comma-separated, ' if listed else ''}'-' to clear)", current_text(case, name))
    if listed:
        return {name: [] if raw.strip() == "-" else [v.strip() for v in raw.split(",") if v.strip()]}
    update: dict[str, Any] = {name: None if raw.strip() == "-" else raw}
    if name == "expected" and update["expected"] is not None and not case.judges and default_judge:
        update["judges"] = [default_judge]
    return update


def current_text(case: AgentCase, name: str) -> str:
    """A plain field's value as its answer would set it again, the default a reviewer keeps by pressing
    Enter (a list comma-separated; none: '-'); the review notes as '-', which clears them once the case is
    fixed."""
    value = getattr(case, name, None)
    if name == "review_notes" or value is None or value == []:
        return "-"
    return ", ".join(value) if isinstance(value, list) else str(value)


def labelled(case: AgentCase, label: Label) -> AgentCase:
    """``case`` with ``label``, replacing a label of the same answer (a reviewer who changes their mind)."""
    kept = [lb for lb in case.labels if lb.answer != label.answer]
    return case.model_copy(update={"labels": [*kept, label]})


def label_answer(folder: CaseFolder, case: AgentCase, verdict: str, reason: str, *, at: str | None) -> AgentCase:
    """``case`` with a reviewer's ``verdict`` (good or bad) on its recorded answer, ``labelled`` and saved;
    an ``InputError``, nothing saved, when it has no answer or the verdict is neither."""
    if not case.recorded.answer:
        raise InputError(f"case {case.id!r} has no recorded answer to label", field="recorded.answer")
    if verdict not in ("good", "bad"):
        raise InputError(f"an answer is labelled good or bad, not {verdict!r}", field="verdict")
    entry = Label(answer=case.recorded.answer, verdict=verdict, reason=reason, at=at)
    case = labelled(case, entry)
    folder.save(case)
    return case


def edit_case(folder: CaseFolder, case: AgentCase, update: dict[str, Any]) -> AgentCase:
    """``case`` with ``update``'s fields (file names, by alias), validated as a case file is and saved;
    a ``CaseFileError`` naming the field, nothing saved, when the result would not load."""
    try:
        edited = AgentCase.model_validate({**case.model_dump(by_alias=True), **update})
        check_order(edited)
    except ValidationError as exc:
        where, msg = pydantic_field(exc)
        raise CaseFileError(msg, field=where) from None
    folder.save(edited)
    return edited
