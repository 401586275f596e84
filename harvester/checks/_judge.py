"""Judges: the checks that need judgement, a function or a model asked one question about an answer.

Assertions and structure decide most of what a case checks; what they cannot ("is this answer the
same as the expected one, in other words?") goes to a judge. A judge reads a ``Subject`` (the case, the
run, what the case expects, the tool results the answer may rest on) and returns a ``Verdict``.
``build_judge`` makes one from its ``JudgeConfig`` and checks it right away (the function imports and
takes two arguments, pydantic-ai knows the model, the rubric file exists), so a typo costs a second, not
a nightly run. pydantic-ai is imported only when a model judge is built: it is not a core dependency.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..canonical import canonical_json
from ..config import JudgeConfig
from ..errors import ConfigError
from ..model import Run

__all__ = ["BuiltJudge", "Subject", "Verdict", "build_judge"]

_URL_PREFIXES = ("http://", "https://")
_ASK = {
    "equivalent": "Does the agent's answer say the same as the expected answer? Wording may differ; facts, "
    "numbers, names and the decision (yes/no, done/refused) must agree.",
    "grounded": "Is every claim in the agent's answer supported by the tool results below? An answer that "
    "adds facts the tool results do not hold fails.",
    "follows": "Does the agent's answer follow the rubric below?",
}


@dataclass(frozen=True)
class Subject:
    """What a judge reads: ``case`` is the case file (what a function judge receives with the run)."""

    case: Any
    run: Run
    expected: str | None = None
    sources: tuple[str, ...] = ()  # the recorded tool results, for ``grounded``

    @classmethod
    def of(cls, case: Any, run: Run) -> Subject:
        """The subject of a case file's answer: its ``expected``, its fixtures' results as text."""
        results = (fx.result for fx in case.fixtures)
        return cls(case, run, case.expected, tuple(r if isinstance(r, str) else canonical_json(r) for r in results))


@dataclass(frozen=True)
class Verdict:
    passed: bool
    reason: str
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True)
class BuiltJudge:
    """A judge ready to decide: ``fingerprint`` changes when its config or rubric does (the cache's key and
    what a calibration is valid for); ``model`` is the model's name (as pydantic-ai names it), which
    the config's ``prices`` price its tokens by."""

    name: str
    kind: str
    fingerprint: str
    decide: Callable[[Subject], Verdict]
    model: str | None = None
    question: str | None = None  # a model judge's; a function judge reads what it likes

    def key(self, subject: Subject) -> str:
        """The verdict cache's key: (judge, rubric, prompt, answer, expected, and the sources it grounds on)."""
        sources = list(subject.sources) if self.question == "grounded" else []
        data = [self.fingerprint, subject.run.prompt, subject.run.answer, subject.expected, sources]
        return hashlib.sha256(canonical_json(data).encode()).hexdigest()[:32]


def build_judge(name: str, config: JudgeConfig, *, source: str | None = None, model: Any = None) -> BuiltJudge:
    """The judge ``name`` as configured; ``ConfigError`` naming the file and the field when it cannot be.

    ``model``: a pydantic-ai ``Model`` to use instead of the configured one (tests, a custom client).
    """
    field = f"judges.{name}"
    if config.function is not None:
        fn = _function(config.function, source, field)
        print_ = canonical_json(config.model_dump(exclude={"timeout"}))
        return BuiltJudge(name, "function", _hash(print_), lambda s: _call(fn, s))
    rubric = _rubric(config, source, field)
    if config.question == "follows" and not rubric:
        raise ConfigError("question 'follows' needs a rubric (rubric or rubric_file)", file=source, field=field)
    chosen = model if model is not None else _model(config, source, f"{field}.model")
    print_ = canonical_json([config.model_dump(exclude={"timeout", "rubric", "rubric_file"}), rubric])
    instructions = _instructions(config.question, rubric)
    return BuiltJudge(
        name,
        "model",
        _hash(print_),
        lambda s: _ask_model(chosen, instructions, config.question, s),
        getattr(chosen, "model_name", None) or config.model_name or config.model,
        config.question,
    )


def _hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _function(spec: str, source: str | None, field: str) -> Callable[..., Any]:
    module, _, attr = spec.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        fn = getattr(importlib.import_module(module), attr)
    except Exception as exc:
        raise ConfigError(
            f"{spec!r} does not import ({type(exc).__name__}: {exc})", file=source, field=f"{field}.function"
        ) from None
    try:
        inspect.signature(fn).bind(None, None)
    except (TypeError, ValueError):
        raise ConfigError(
            f"{spec!r} must take (case, run) and return (passed, reason)", file=source, field=f"{field}.function"
        ) from None
    return fn


def _call(fn: Callable[..., Any], subject: Subject) -> Verdict:
    result = fn(subject.case, subject.run)
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], bool):
        return Verdict(result[0], str(result[1]))
    if isinstance(result, bool):
        return Verdict(result, "passed" if result else "failed")
    raise TypeError(f"returned {type(result).__name__}, expected (bool, str)")


def _rubric(config: JudgeConfig, source: str | None, field: str) -> str:
    if config.rubric_file is None:
        return config.rubric or ""
    try:
        return Path(config.rubric_file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = "no such file" if isinstance(exc, FileNotFoundError) else str(exc)
        raise ConfigError(f"{config.rubric_file}: {why}", file=source, field=f"{field}.rubric_file") from None


def _model(config: JudgeConfig, source: str | None, field: str) -> Any:
    """The pydantic-ai model: from its model string, or an OpenAI-compatible server at a base URL."""
    try:
        from pydantic_ai import models
    except ImportError:
        raise ConfigError(
            "a model judge needs pydantic-ai: pip install pydantic-ai-slim[openai] (or the provider you use)",
            file=source,
            field=field,
        ) from None
    spec = str(config.model)
    try:
        if not spec.startswith(_URL_PREFIXES):
            return models.infer_model(spec)
        if not config.model_name:
            raise ValueError("a base URL needs model_name, the model's name at that server")
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        key = os.environ.get(config.api_key_env) if config.api_key_env else None
        return OpenAIChatModel(config.model_name, provider=OpenAIProvider(base_url=spec, api_key=key or "unused"))
    except Exception as exc:
        raise ConfigError(f"{spec!r}: {exc}", file=source, field=field) from None


def _instructions(question: str, rubric: str) -> str:
    text = (
        "You grade one answer an AI agent gave. " + _ASK[question] + " Reply with passed (true or false) and a "
        "reason of one sentence that names what decided it."
    )
    return text + (f"\n\nRubric:\n{rubric}" if rubric else "")


def _ask_model(model: Any, instructions: str, question: str, subject: Subject) -> Verdict:
    from pydantic import BaseModel
    from pydantic_ai import Agent

    class Graded(BaseModel):
        passed: bool
        reason: str

    parts = [f"The user asked:\n{subject.run.prompt or '(no prompt)'}", f"The agent answered:\n{subject.run.answer}"]
    if question == "equivalent":
        if subject.expected is None:
            return Verdict(False, "the case has no expected answer to compare with (set expected)")
        parts.append(f"The expected answer:\n{subject.expected}")
    if question == "grounded":
        parts.append("The tool results:\n" + ("\n---\n".join(subject.sources) or "(none)"))
    agent = Agent(model, output_type=Graded, instructions=instructions)
    result = agent.run_sync("\n\n".join(parts))
    usage = result.usage
    return Verdict(result.output.passed, result.output.reason, usage.input_tokens or 0, usage.output_tokens or 0)
