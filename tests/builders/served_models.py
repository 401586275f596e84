"""A hand-built ``seam.ModelServer`` for the model guards' tests: it answers from a list and keeps the
requests it got, put in context the way a recorded-model replay puts the case's server."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry import context

from harvester import seam
from harvester.model import ModelAnswerData, ModelRequestData

USAGE = {"input_tokens": 120, "output_tokens": 7}
PROMPT = "Can I still return order A1001?"
SYSTEM = "You are the support agent of a shop."
FINAL = "Yes: refunds are accepted within 30 days."


def answers() -> list[ModelAnswerData]:
    """Turn 1 asks for ``kb_search`` (recorded id ``call_kb``), turn 2 answers from its result."""
    return [
        {
            "text": None,
            "tool_calls": [{"name": "kb_search", "call_id": "call_kb", "args": {"query": "refund policy"}}],
            "finish_reason": "tool_calls",
            "usage": USAGE,  # type: ignore[typeddict-item]
            "model": "gpt-recorded",
        },
        {"text": FINAL, "tool_calls": [], "finish_reason": "stop", "usage": USAGE, "model": "gpt-recorded"},  # type: ignore[typeddict-item]
    ]


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


def kb_search(query: str) -> str:
    """Search the knowledge base."""
    return f"KB: {query}: refunds within 30 days"


class ListServer:
    """Answers each model call with the next answer; None once they run out (the live model answers)."""

    def __init__(self, given: list[ModelAnswerData] | None = None) -> None:
        self.answers = list(answers() if given is None else given)
        self.requests: list[ModelRequestData] = []

    def answer(self, request: ModelRequestData) -> ModelAnswerData | None:
        self.requests.append(request)
        return self.answers.pop(0) if self.answers else None


@contextmanager
def serving(server: Any) -> Iterator[Any]:
    token = context.attach(context.set_value(seam.MODELS, server))
    try:
        yield server
    finally:
        context.detach(token)


def assert_requests(server: ListServer, parameters: dict[str, Any]) -> None:
    """The two requests of the ``answers()`` run: the system prompt, the user prompt and the tool offered
    (``parameters``: its JSON schema as the framework writes it), then the tool call and its result."""
    first, second = server.requests
    assert first["system"] == SYSTEM
    assert [(m["role"], m["content"]) for m in first["messages"]] == [("user", PROMPT)]
    assert first["tools"] == [
        {"name": "kb_search", "description": "Search the knowledge base.", "parameters": parameters}
    ]
    user, called, result = second["messages"]
    assert user["content"] == PROMPT
    assert called["role"] == "assistant"
    assert called["tool_calls"] == [{"name": "kb_search", "call_id": None, "args": {"query": "refund policy"}}]
    assert result == {
        "role": "tool",
        "content": "KB: refund policy: refunds within 30 days",
        "tool_calls": [],
        "tool_call_id": None,
    }
