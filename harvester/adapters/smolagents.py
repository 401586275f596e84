"""smolagents: every ``Tool``, called by a ``ToolCallingAgent`` or from a ``CodeAgent``'s code.

Both agents call a tool object (``tool(**arguments)``), and ``Tool.__call__`` calls the class's
``forward`` after sorting out the inputs; the tracing instrumentor wraps ``__call__``, so its span
stays. The guard is on ``forward`` of every ``Tool`` class (``@tool`` makes one class per function,
with ``forward`` a staticmethod): inside a replay it answers from the case's executor with the
arguments bound to ``forward``'s parameters, the names the model used. ``FinalAnswerTool`` is how a
smolagents agent answers, not a tool call: it runs. A managed agent is an agent, not a tool: it runs,
and its own tools are served.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from .. import seam
from ._patch import guard, subclasses
from ._tracing import turn_on

__all__ = ["NAME", "ROOTS", "accepts", "install", "instrument", "prepare"]

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
