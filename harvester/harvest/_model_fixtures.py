"""A run's model calls frozen into model fixtures: one turn per call, in order, with the review notes
that say when the recording cannot stand in for the model.

A turn holds what the call was asked (its request, None when the spans do not say) and what it
answered. The run was redacted when it was captured (its model calls with it), so the turns hold
what the store holds, like the tool fixtures. A run whose model calls' content was not captured
gets no turns: a replay with the recorded model would have nothing true to serve.
"""

from __future__ import annotations

from ..case import NOTE_PREFIX, ModelTurn
from ..model import LlmCall, Run

__all__ = ["NO_MODEL_CONTENT_NOTE", "NO_REQUESTS_NOTE", "model_fixtures"]

NO_MODEL_CONTENT_NOTE = (
    NOTE_PREFIX + "the model calls' content was not captured (content capture off): this case cannot be "
    "replayed with the recorded model (`--model recorded`), only with the live one"
)
NO_REQUESTS_NOTE = (
    NOTE_PREFIX + "the spans do not hold what the model was asked: a replay with the recorded model serves "
    "its answers without checking the agent's requests against them"
)


def _unknown(llm: LlmCall) -> bool:
    """Neither what it was asked nor what it said was captured (tool call args hidden count as unsaid)."""
    return llm.request is None and llm.text is None and all(r.args is None for r in llm.requests)


def model_fixtures(run: Run) -> tuple[list[ModelTurn], list[str]]:
    """The run's model turns and the review notes they need (content not captured, a turn cut short)."""
    if not run.llm_calls:
        return [], []
    if any(_unknown(llm) for llm in run.llm_calls):
        return [], [NO_MODEL_CONTENT_NOTE]
    turns = [
        ModelTurn(request=llm.request, answer=llm.answer(), streamed=llm.streamed, truncated=llm.truncated)
        for llm in run.llm_calls
    ]
    notes = [
        f"{NOTE_PREFIX}model turn {i} was truncated by the OTel attribute length limit: a replay with the "
        f"recorded model cannot serve it (nor the turns after it); raise the limit and re-capture to serve it"
        for i, turn in enumerate(turns, 1)
        if turn.truncated
    ]
    if all(t.request is None for t in turns):
        notes.append(NO_REQUESTS_NOTE)
    return turns, notes
