"""pydantic-ai: every tool call an agent dispatches, whatever toolset holds the tool.

Tools given as ``tools=[...]``, ``@agent.tool``, ``@agent.tool_plain``, function toolsets, MCP servers
and wrapper toolsets all reach the model's call through ``ToolManager._raw_execute``, the one place
that calls ``toolset.call_tool`` after validation, hooks and the instrumentation's span. The guard
there hands the toolset a stand-in whose ``call_tool`` asks the case's executor, keyed by the name
the model called and the arguments it sent (``RunContext`` is never among them), so retries
(``ModelRetry``), approvals and the span all behave as in production. Output tools (the structured
answer) are not tools: they pass through.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Callable, Optional

from .. import seam
from ._patch import guard

ROOTS = ("pydantic_ai",)
NAME = "pydantic-ai"


class _Served:
    """The toolset ``_raw_execute`` calls for one tool call inside a replay."""

    def __init__(self, ex: seam.Executor, call: Any) -> None:
        self.ex, self.call = ex, call

    async def call_tool(self, name: str, tool_args: Any, ctx: Any, tool: Any) -> Any:
        return await self.ex.aexecute(self.call.tool_name, self.call.args_as_dict())


def install() -> None:
    from pydantic_ai.tool_manager import ToolManager

    def make(original: Callable[..., Any]) -> Callable[..., Any]:
        async def _raw_execute(self: Any, validated: Any, *args: Any, **kwargs: Any) -> Any:
            ex = seam.route()
            tool = validated.tool
            if ex is None or tool is None or tool.tool_def.kind == "output":
                return await original(self, validated, *args, **kwargs)
            served = copy.copy(self)  # shares the retry and failure state; only the toolset differs
            served.toolset = _Served(ex, validated.call)
            return await original(served, validated, *args, **kwargs)

        return _raw_execute

    guard(ToolManager, "_raw_execute", make)


def accepts(agent: Any) -> bool:
    from pydantic_ai.agent import AbstractAgent

    return isinstance(agent, AbstractAgent)


def prepare(agent: Any, case: Any) -> Callable[[str], Any]:
    """``agent.run(prompt)``, traced onto the global provider the replay reads spans from."""
    _instrument(agent)

    async def run(prompt: str) -> Optional[str]:
        return answer_of((await agent.run(prompt)).output)

    return run


def _instrument(agent: Any) -> None:
    from pydantic_ai.models.instrumented import InstrumentationSettings

    if not getattr(agent, "instrument", None):  # unset, or off: a replay is read from its spans
        agent.instrument = InstrumentationSettings()


def answer_of(output: Any) -> Optional[str]:
    """The answer text of a run's output: a string, a structured output as JSON, a deferral as none."""
    if output is None or type(output).__name__ == "DeferredToolRequests":
        return None
    if isinstance(output, str):
        return output
    dump = getattr(output, "model_dump_json", None)
    if callable(dump):
        return str(dump())
    try:
        return json.dumps(output, default=str)
    except (TypeError, ValueError):
        return str(output)


def instrument() -> Optional[Callable[[], None]]:
    """Trace every agent the replay meets (``Agent.instrument_all``), as it was afterwards."""
    from pydantic_ai import Agent
    from pydantic_ai.models.instrumented import InstrumentationSettings

    before = Agent._instrument_default
    if before:
        return None
    Agent.instrument_all(InstrumentationSettings())
    return lambda: Agent.instrument_all(before)
