"""``--propose``: a run whose behaviour changed for the worse becomes a pending case, to review like a
harvested one. Its case is the one the shadow replayed (its recording production's), renamed by its
prompt, tagged ``shadow``, with a review note saying what the candidate did differently."""

from __future__ import annotations

from ..case import NOTE_PREFIX, AgentCase, CaseFolder, CaseIds, save_case
from ..harvest import slug
from ._change import RunChange

__all__ = ["WORSE", "Proposer"]

WORSE = ("new_mutating", "newly_failed")  # the flags a proposed case is tagged with


class Proposer:
    """Writes into ``folder``'s pending cases, ids unique across the folder and this shadow run."""

    def __init__(self, folder: CaseFolder, candidate: str) -> None:
        self.folder, self.candidate = folder, candidate
        self.ids = CaseIds(folder.ids())

    def propose(self, case: AgentCase, change: RunChange) -> str:
        """The id of the pending case written for ``change``'s run."""
        proposed = case.model_copy(deep=True)
        proposed.id = self.ids.claim(slug(case.prompt, fallback=f"run-{change.trace_id[:8]}"))
        proposed.status = "pending"
        proposed.why = f"shadow of {self.candidate or 'the candidate'}: {change.why()}"
        proposed.tags = list(dict.fromkeys([*proposed.tags, "shadow", *(f for f in change.flags() if f in WORSE)]))
        proposed.review_notes = [
            f"{NOTE_PREFIX}proposed by harvester shadow: on this production run the candidate "
            f"{self.candidate or ''} {change.why()}; accept it to keep production's behaviour, reject it if "
            "the candidate's is the one you want",
            *proposed.review_notes,
        ]
        save_case(proposed, self.folder.folder_for("pending"))
        return proposed.id
