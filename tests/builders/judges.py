"""Judges for the judge tests: function judges a config names (``tests.builders.judges:NAME``) and a
pydantic-ai ``FunctionModel`` scripted to agree or disagree with a reviewer, counting its calls."""

from __future__ import annotations

import time
from typing import Any

from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

CALLS: list[str] = []  # the answers the function judges were asked about, in order


def says_30_days(case: Any, run: Any) -> tuple[bool, str]:
    """Passes an answer that states the 30-day window, however it words the rest."""
    CALLS.append(run.answer)
    ok = "30 days" in (run.answer or "") or "thirty days" in (run.answer or "")
    return ok, "states the 30-day window" if ok else "does not state the 30-day window"


def broken(case: Any, run: Any) -> tuple[bool, str]:
    raise RuntimeError("grader backend down")


def slow(case: Any, run: Any) -> tuple[bool, str]:
    time.sleep(2)
    return True, "too late"


def one_argument(run: Any) -> tuple[bool, str]:
    return True, "never called"


def scripted_model(passes: Any, reason: str = "compared with the expected answer") -> tuple[FunctionModel, list[str]]:
    """A model judge answering ``passes(prompt_text)`` for each question; returns it and its prompts."""
    asked: list[str] = []

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        text = str(messages[-1].parts[-1].content)  # type: ignore[union-attr]
        asked.append(text)
        verdict = {"passed": bool(passes(text)), "reason": reason}
        return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, verdict)])

    return FunctionModel(respond, model_name="judge-model"), asked
