"""The recorded model: a case's model fixtures answering the agent's model calls, in order.

One ``RecordedModel`` per case-trial, in the trial's context under ``seam.MODELS``: every model guard
asks it first (``seam.model_server()``). Step N is answered with the recording's answer N only while
the agent's request for that step matches the recorded one (``_drift``); the first step that does not
(or one more call than the recording holds) is the drift. Calls the agent makes at once (a fan-out,
parallel sub-agents) may come in another order than their spans: a request that does not match the
next waiting step is served by a later waiting one it matches (``WINDOW`` of them). ``recorded`` raises
``ModelInputChanged`` into the agent there (and at every later call), and the case fails naming what
changed; ``recorded-then-live`` lets the live model answer from that step on, and the case says so.

A case without model fixtures (recorded before harvester kept them, or with content capture off), or
with a truncated one (the span held a cut payload), cannot be served: ``recorded`` does not run it (it is
errored, not failed: the agent was never judged), ``recorded-then-live`` runs it on the live model.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from ..config import ModelMode
from ..errors import ModelInputChanged
from ..model import ModelAnswerData, ModelRequestData
from ..report import CheckResult, ModelDrift, ModelServed
from ._drift import MORE_CALLS, Change, answer_changes, request_changes

__all__ = ["RecordedModel", "recorded_model"]

WINDOW = 8  # the waiting steps a request may match: calls the agent makes at once, in any order


class RecordedModel:
    """A ``seam.ModelServer`` over one case's model fixtures; safe to ask from several threads at once."""

    def __init__(self, turns: list[dict[str, Any]], mode: ModelMode, unservable: str | None = None) -> None:
        self.turns = turns
        self.mode = mode
        self.unservable = unservable
        self.served = 0  # steps served so far, each once
        self._done: set[int] = set()  # which (0-based)
        self.drift: ModelDrift | None = None
        # 1-based; a recording that cannot serve leaves recorded-then-live to the live model from the start
        self.live_from: int | None = 1 if unservable is not None and mode == "recorded-then-live" else None
        self._lock = threading.Lock()

    def answer(self, request: ModelRequestData) -> ModelAnswerData | None:
        with self._lock:
            if self.live_from is not None:
                return None
            if self.drift is not None:  # recorded: nothing after a drift is served either
                raise ModelInputChanged(self.drift.step - 1, self.drift.changes)
            waiting = [i for i in range(len(self.turns)) if i not in self._done][:WINDOW]
            if not waiting:
                step = len(self.turns)
                changes = [
                    (
                        MORE_CALLS,
                        f"the agent made more model calls than the recording: step {step + 1} "
                        f"(the recording has {len(self.turns)})",
                    )
                ]
            else:
                step, changes = waiting[0], self._changes(waiting[0], request)
                # calls made at once (a fan-out, parallel sub-agents) may come in another order than
                # their spans: a later waiting step the request matches is the one it makes
                matched = step if not changes else next((i for i in waiting[1:] if not self._changes(i, request)), None)
                if matched is not None:
                    self._done.add(matched)
                    self.served += 1
                    return self.turns[matched]["answer"]
            self.drift = ModelDrift(
                step=step + 1, what=list(dict.fromkeys(w for w, _ in changes)), changes=[c for _, c in changes]
            )
            if self.mode == "recorded-then-live":
                self.live_from = step + 1
                return None
            raise ModelInputChanged(step, self.drift.changes)

    def _changes(self, step: int, request: ModelRequestData) -> list[Change]:
        turn = self.turns[step]
        return request_changes(turn.get("request"), request) or answer_changes(turn["answer"], request)

    def result(self) -> ModelServed:
        """What the report says of how this trial's model was served."""
        with self._lock:
            return ModelServed(
                mode=self.mode,
                served=self.served,
                recorded=len(self.turns),
                drift=self.drift,
                live_from=self.live_from,
                unservable=self.unservable,
            )

    def check(self) -> CheckResult | None:
        """``model_input_changed`` failed, when a ``recorded`` replay drifted; else nothing to say."""
        if self.drift is None or self.mode != "recorded":
            return None
        return CheckResult(name="model_input_changed", passed=False, detail=self.drift.summary())

    def refusal(self) -> CheckResult | None:
        """``recorded_model`` failed, when ``recorded`` cannot serve this case at all: it is not run."""
        if self.unservable is None or self.mode != "recorded":
            return None
        return CheckResult(
            name="recorded_model",
            passed=False,
            detail=f"cannot be replayed with the recorded model: {self.unservable} "
            "(rerecord the case with content capture on, or replay it with --model live)",
        )


def recorded_model(spec: Any, mode: ModelMode) -> RecordedModel | None:
    """The case's model server for ``mode`` (None: ``live``, every model call goes to the model)."""
    if mode == "live":
        return None
    turns = [_plain(t) for t in getattr(spec, "model_fixtures", None) or ()]
    if not turns:
        return RecordedModel(
            [], mode, "the case has no model fixtures (recorded before harvester kept them, or content capture off)"
        )
    cut = next((i for i, t in enumerate(turns, 1) if t.get("truncated")), None)
    if cut is not None:
        return RecordedModel(turns, mode, f"model fixture {cut} is truncated (the span held a cut payload)")
    return RecordedModel(turns, mode)


def _plain(turn: Any) -> dict[str, Any]:
    """A turn as plain data (the case file's turn may be a pydantic model or already a dict)."""
    if isinstance(turn, Mapping):
        data = dict(turn)
    else:
        dump = getattr(turn, "model_dump", None)
        data = dump(mode="json") if callable(dump) else dict(vars(turn))
    for key in ("request", "answer"):
        value = data.get(key)
        dump = getattr(value, "model_dump", None)
        if callable(dump):
            data[key] = dump(mode="json")
    return data
