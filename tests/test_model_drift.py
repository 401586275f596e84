"""What the recorded model counts as the same request: forms that differ only in how one side's spans
keep them are no drift (an Anthropic tool result as text blocks, an empty text, calls made at once in
another order); a real change still is."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from harvester.errors import ModelInputChanged
from harvester.replay._drift import request_changes
from harvester.replay._models import RecordedModel


def request(*messages: tuple[str, Any], system: str | None = "Be brief.") -> dict[str, Any]:
    return {
        "system": system,
        "messages": [{"role": r, "content": c, "tool_calls": [], "tool_call_id": None} for r, c in messages],
        "tools": None,
        "settings": {},
    }


def answer(text: str) -> dict[str, Any]:
    usage = {"input_tokens": 1, "output_tokens": 1}
    return {"text": text, "tool_calls": [], "finish_reason": "stop", "usage": usage, "model": "m"}


def test_an_anthropic_tool_result_kept_as_text_blocks_is_the_text_the_live_side_reads() -> None:
    recorded = request(("user", "hi"), ("tool", '[{"type": "text", "text": "result A"}]'))
    assert request_changes(recorded, request(("user", "hi"), ("tool", "result A"))) == []
    assert request_changes(recorded, request(("user", "hi"), ("tool", "result B")))  # a real change
    recorded = request(("user", "hi"), ("tool", '[{"type": "text", "text": "{\\"status\\": \\"ok\\"}"}]'))
    assert request_changes(recorded, request(("user", "hi"), ("tool", '{"status": "ok"}'))) == []  # JSON text


def test_an_empty_text_is_none_and_an_empty_prompt_part_is_no_message() -> None:
    assert request_changes(request(("user", "hi"), ("tool", "")), request(("user", "hi"), ("tool", None))) == []
    assert request_changes(request(("user", ""), ("user", "hi")), request(("user", "hi"))) == []


@pytest.mark.parametrize("mode", ["recorded", "recorded-then-live"])
def test_calls_made_at_once_are_served_in_whatever_order_they_come(mode: str) -> None:
    turns = [{"request": request(("user", f"part {i}")), "answer": answer(f"answer {i}")} for i in range(4)]
    model = RecordedModel(turns, mode)  # type: ignore[arg-type]
    got: dict[int, str | None] = {}

    def ask(i: int) -> None:
        served = model.answer(request(("user", f"part {i}")))  # type: ignore[arg-type]
        got[i] = served["text"] if served else None

    threads = [threading.Thread(target=ask, args=(i,)) for i in (3, 1, 0, 2)]
    for t in threads:
        t.start()
        t.join()  # one after another, in an order the recording did not have
    assert got == {i: f"answer {i}" for i in range(4)} and model.result().served == 4
    assert model.drift is None


def test_a_request_no_waiting_step_matches_is_the_drift_of_the_next_step() -> None:
    turns = [{"request": request(("user", f"part {i}")), "answer": answer(f"answer {i}")} for i in range(2)]
    model = RecordedModel(turns, "recorded")
    with pytest.raises(ModelInputChanged) as raised:
        model.answer(request(("user", "part 9")))  # type: ignore[arg-type]
    assert raised.value.step == 0 and model.result().drift is not None
    assert model.result().drift.changes == ['message 1 (user): -"part 0" +"part 9"']  # type: ignore[union-attr]
