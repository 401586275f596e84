"""The secret scan before a case is accepted: which of its fields a redaction rule still matches.

Capture redacts, but a case can still hold a secret: captured with redaction off or with rules that
have grown since, or pasted in by a reviewer. An accepted case is committed and shared, so
``accept`` asks the redaction engine's public API whether redacting a field would change it, and
names each field that would. Only detection: the case is never rewritten here (a pseudonym in a
fixture would change what replays; the reviewer decides what to replace).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..redact import Redactor
    from ._format import AgentCase

__all__ = ["secret_fields"]


def secret_fields(case: AgentCase, redactor: Redactor) -> list[str]:
    """The fields of ``case`` a rule of ``redactor`` matches, e.g. ``["prompt", "fixtures[0].result"]``."""
    return [
        name
        for name, tool, value in _scanned(case)
        if value is not None
        and (redactor.redact_tool_value(tool[0], tool[1], value) if tool else redactor.redact_value(value)) != value
    ]


def _scanned(case: AgentCase) -> Iterator[tuple[str, tuple[str, str] | None, Any]]:
    """What a replay feeds the agent or judges it by, in file order: prompt, history, expected, fixtures,
    model fixtures, answer; a fixture's args and result with their tool, whose field rules (``result.ssn``)
    apply to them."""
    yield "prompt", None, case.prompt
    for i, message in enumerate(case.history):
        yield f"history[{i}]", None, message.model_dump(mode="json", exclude_defaults=True)
    yield "expected", None, case.expected
    for i, fx in enumerate(case.fixtures):
        yield f"fixtures[{i}].args", (fx.tool, "args"), fx.args
        yield f"fixtures[{i}].result", (fx.tool, "result"), fx.result
        yield f"fixtures[{i}].error", None, fx.error.message if fx.error else None
    for i, turn in enumerate(case.model_fixtures):  # what a recorded-model replay feeds the agent and compares
        yield f"model_fixtures[{i}].request", None, turn.request and turn.request.model_dump(mode="json")
        yield f"model_fixtures[{i}].answer", None, turn.answer.model_dump(mode="json")
    yield "recorded.answer", None, case.recorded.answer
