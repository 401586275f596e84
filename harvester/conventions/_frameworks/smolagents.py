"""smolagents: in replay, every ``Tool``, called by a ``ToolCallingAgent`` or from a ``CodeAgent``'s code.

Both agents call a tool object (``tool(**arguments)``), and ``Tool.__call__`` calls the class's
``forward`` after sorting out the inputs; the tracing instrumentor wraps ``__call__``, so its span
stays. The guard is on ``forward`` of every ``Tool`` class (``@tool`` makes one class per function,
with ``forward`` a staticmethod): inside a replay it answers from the case's executor with the
arguments bound to ``forward``'s parameters, the names the model used. ``FinalAnswerTool`` is how a
smolagents agent answers, not a tool call: it runs. A managed agent is an agent, not a tool: it runs,
and its own tools are served.

In capture, what it records its own way (``FRAMEWORK``): smolagents under OpenInference: its answer
tool, its managed agents, its agent spans' names, its step limit.

A tool span's input is ``{"args", "kwargs"}``, an agent span's ``{"task"}``. It answers through its
``FinalAnswerTool`` (the run's answer, not a call); a managed agent is called by the model by its name
and runs as an agent span; agent spans are named ``<agent>.run``; out of steps, it has the model answer
from the agent itself (``provide_final_answer``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ... import seam
from ...spans import SpanData
from .._values import MISSING, text
from ._framework import Framework
from ._patch import guard, subclasses
from ._tracing import turn_on

if TYPE_CHECKING:
    from .._readings import LlmReading, ToolReading

__all__ = ["FRAMEWORK", "NAME", "ROOTS", "accepts", "install", "instrument", "prepare"]


def _agent_calls(agent: str) -> tuple[str, ...]:
    return (agent,)  # a managed agent: the model calls it by its name


def _read_tool(span: SpanData, reading: ToolReading, result: Any) -> None:
    reading.answer_tool = span.name == "FinalAnswerTool" and reading.name == "final_answer"


def _agent_span_name(span: SpanData, name: str) -> str:
    if name.endswith(".run") and "smolagents.tools_names" in span.attributes:  # "<agent name>.run"
        return name[: -len(".run")]
    return name


def _forced_answer(agents: list[tuple[SpanData, str]], llms: list[LlmReading], tools: list[ToolReading]) -> bool:
    """Out of steps: no final_answer call, and the answer came from a model call made by the agent
    itself (``provide_final_answer``), not from one of its numbered steps."""
    if not agents or not llms or any(t.answer_tool for t in tools):
        return False
    limited = {sp.span_id for sp, _ in agents if "smolagents.max_steps" in sp.attributes}
    return bool(limited) and llms[-1].span.parent_id in limited


def _tool_input(payload: dict[str, Any], call_id: str | None) -> tuple[Any, str | None] | None:
    """``{"args": [], "kwargs": {...}}``: the kwargs."""
    if (
        set(payload) <= {"args", "kwargs", "sanitize_inputs_outputs"}
        and isinstance(payload.get("kwargs"), dict)
        and not payload.get("args")
    ):
        return payload["kwargs"], call_id
    return None


def _agent_prompt(payload: dict[str, Any]) -> Any:
    """``{"task": ...}``: the task."""
    return text(payload["task"]) if isinstance(payload.get("task"), str) else MISSING


FRAMEWORK = Framework(
    "smolagents",
    limit_stops={"AgentMaxStepsError": "max_steps"},
    agent_calls=_agent_calls,
    read_tool=_read_tool,
    agent_span_name=_agent_span_name,
    forced_answer=_forced_answer,
    tool_input=_tool_input,
    agent_prompt=_agent_prompt,
)

ROOTS = ("smolagents",)
NAME = "smolagents"


def _args(tool: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The call's arguments by ``forward``'s parameter names (what the model named them)."""
    try:
        sig = inspect.signature(tool.forward)
        bound = sig.bind(*args, **kwargs)
    except (TypeError, ValueError):
        return dict(kwargs) if kwargs or not args else {"args": list(args)}
    out: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        kind = sig.parameters[name].kind
        if kind is inspect.Parameter.VAR_KEYWORD:
            out.update(value)
        else:
            out[name] = list(value) if kind is inspect.Parameter.VAR_POSITIONAL else value
    return out


def _make_forward(original: Callable[..., Any]) -> Callable[..., Any]:
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        ex = seam.route()
        if ex is None or _is_answer(self):
            return original(self, *args, **kwargs)
        return ex.execute(self.name, _args(self, args, kwargs))

    return forward


def _is_answer(tool: Any) -> bool:
    from smolagents.default_tools import FinalAnswerTool

    return isinstance(tool, FinalAnswerTool)


def _guard_class(cls: type) -> None:
    if "forward" in cls.__dict__:
        guard(cls, "forward", _make_forward)


def _make_call(original: Callable[..., Any]) -> Callable[..., Any]:
    def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
        if seam.route() is not None:
            for cls in type(self).__mro__:  # a tool class made after the replay began
                _guard_class(cls)
        return original(self, *args, **kwargs)

    return __call__


def install() -> None:
    from smolagents import Tool

    for cls in subclasses(Tool):
        _guard_class(cls)
    guard(Tool, "__call__", _make_call)


def accepts(agent: Any) -> bool:
    from smolagents import MultiStepAgent

    return isinstance(agent, MultiStepAgent)


def prepare(agent: Any, case: Any) -> Callable[[str], Any]:
    def run(prompt: str) -> str | None:
        out = agent.run(prompt)
        return out if out is None or isinstance(out, str) else str(out)

    return run


def instrument() -> Callable[[], None] | None:
    """OpenInference's instrumentor, when it is off."""
    return turn_on("openinference.instrumentation.smolagents", "SmolagentsInstrumentor")
