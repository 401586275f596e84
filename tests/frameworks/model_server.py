"""A hand-built ``seam.ModelServer`` for tests of a framework's model guard: it answers from a list, in
order, and keeps the requests it was asked; ``serving(server)`` puts it in context as a recorded-model
replay does."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import context

from harvester import seam
from harvester.model import ModelAnswerData, ModelRequestData


class Server:
    """The answers in order (None once they run out: the live model answers), and the requests asked."""

    def __init__(self, answers: list[ModelAnswerData]) -> None:
        self.answers = list(answers)
        self.requests: list[ModelRequestData] = []

    def answer(self, request: ModelRequestData) -> ModelAnswerData | None:
        self.requests.append(request)
        return self.answers.pop(0) if self.answers else None


def answer(
    text: str | None = None, calls: list[tuple[str, dict[str, Any], str | None]] | None = None
) -> ModelAnswerData:
    """A recorded answer: its text, its tool calls as (name, args, call id), 100 tokens in and 10 out."""
    return ModelAnswerData(
        text=text,
        tool_calls=[{"name": n, "call_id": c, "args": a} for n, a, c in calls or []],
        finish_reason="tool_calls" if calls else "stop",
        usage={"input_tokens": 100, "output_tokens": 10},
        model="recorded-model",
    )


@contextmanager
def serving(server: Server) -> Iterator[Server]:
    token = context.attach(context.set_value(seam.MODELS, server))
    try:
        yield server
    finally:
        context.detach(token)
