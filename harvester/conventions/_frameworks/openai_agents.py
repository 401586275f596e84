"""OpenAI Agents SDK: in replay, every ``FunctionTool`` call; every other tool left out of the replay.

The runner invokes a function tool through ``_invoke_function_tool_with_metadata`` (the SDK's one
call of ``on_invoke_tool``, which every module that runs tools imports by name: both bindings are
replaced). Inside a replay it gets a copy of the tool whose invoker asks the case's executor, wrapped
in the SDK's own failure handling, so a recorded error reaches the model through the tool's
``failure_error_function`` exactly as in production (or fails the run when it has none), and the
tool's timeout still applies. An agent used as a tool (``agent.as_tool()``) is not a tool body: it
runs, as it did in production, and its own tool calls are served. In a recorded-model replay, every
``Model``'s ``get_response`` and ``stream_response`` answer from the recording (``_agents_model``).

Hosted tools (web and file search, code interpreter, hosted MCP, image generation) run at the model
provider, and local ones (computer, shell, apply-patch, custom tools) would run here with nothing to
serve them from. Neither can be replayed: while a replay runs, ``Agent.get_all_tools`` leaves them
out of what the model is offered, and the case says so.

In capture, what it records its own way (``FRAMEWORK``): the OpenAI Agents SDK under OpenInference:
handoffs, approvals, guardrails and its error messages.

A handoff is a span named "handoff to <agent>" for the ``transfer_to_<agent>`` call the model made; a
call waiting for an approval (``needs_approval``) is a TOOL span with input and no output that never
ran; a guardrail or the turn limit fails a run with a message and no exception event; a failed tool's
message holds a dict repr of the error.
"""

from __future__ import annotations

import ast
import copy
import json
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ... import seam
from ...spans import SpanData
from .._values import MISSING
from ._agents_model import make_get_response, make_stream_response
from ._framework import Framework
from ._history import history_of, takes_history
from ._patch import GUARD, defining, guard, subclasses
from ._tracing import turn_on

if TYPE_CHECKING:
    from .._readings import ToolReading

__all__ = [
    "FRAMEWORK",
    "HANDOFF_PREFIX",
    "NAME",
    "ROOTS",
    "accepts",
    "answer_of",
    "handoff_tool_name",
    "install",
    "instrument",
    "prepare",
]

HANDOFF_PREFIX = "handoff to "


def handoff_tool_name(agent: str) -> str:
    """The SDK's default tool name for a handoff to ``agent`` (``Handoff.default_tool_name``)."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", re.sub(r"\s", "_", f"transfer_to_{agent}")).lower()


def _agent_calls(agent: str) -> tuple[str, ...]:
    return (handoff_tool_name(agent),)


def _error_message(message: str) -> dict[str, str] | None:
    # "Error running tool: {'tool_name': 'get_order', 'error': "'no order B2002'"}" (a dict repr)
    cut = message.find(": {")
    if cut > 0 and message.endswith("}") and len(message) < 20_000:
        try:
            data = ast.literal_eval(message[cut + 2 :])
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            data = None
        if isinstance(data, dict) and isinstance(data.get("error"), str):
            return {"type": "Error", "message": data["error"]}
    return None


def _tool_span(span: SpanData, name: str, args: Any, result: Any) -> tuple[str, Any, Any] | None:
    if "tool.name" in span.attributes or not name.startswith(HANDOFF_PREFIX):
        return None
    # the model called transfer_to_<agent>; the span says "handoff to <agent>", with the agents handed
    # from and to as its input and output.
    target = name[len(HANDOFF_PREFIX) :]
    return handoff_tool_name(target), "{}", target


def _read_tool(span: SpanData, reading: ToolReading, result: Any) -> None:
    # a call waiting for approval is a TOOL span with input and no output that never ran
    reading.awaiting = reading.status == "ok" and result is MISSING and not reading.hidden


FRAMEWORK = Framework(
    "openai-agents",
    limit_stops={"MaxTurnsExceeded": "max_steps"},
    stop_messages=(  # recorded without an exception event
        ("Max turns exceeded", "MaxTurnsExceeded"),
        ("Guardrail tripwire triggered", "GuardrailTripwireTriggered"),
    ),
    hidden_answers=frozenset({"GuardrailTripwireTriggered"}),  # an output guardrail blocked it: nobody saw it
    agent_calls=_agent_calls,
    error_message=_error_message,
    tool_span=_tool_span,
    read_tool=_read_tool,
)

ROOTS = ("agents",)
NAME = FRAMEWORK.name  # one name in capture and in replay
_BINDINGS = ("agents.tool", "agents.run_internal.tool_execution")
_FUNCTION = "_invoke_function_tool_with_metadata"


def _args(arguments: str) -> Any:
    try:
        return json.loads(arguments) if arguments else {}
    except ValueError:
        return {"input": arguments}


def _served_tool(function_tool: Any, ex: seam.Executor) -> Any:
    """A copy of ``function_tool`` whose body is the executor, behind the SDK's own error handling."""
    from agents import tool as sdk

    name = function_tool.name

    async def impl(ctx: Any, input_json: str) -> Any:
        parse = getattr(sdk, "_parse_function_tool_json_input", None)
        args = parse(tool_name=name, input_json=input_json) if parse else json.loads(input_json or "{}")
        if seam.sandboxed(ex, name, args):
            with seam.running_tool(name):
                return await invoker(ctx, input_json)
        return await ex.aexecute(name, args)

    served = copy.copy(function_tool)
    invoker = function_tool.on_invoke_tool
    handling = getattr(sdk, "_FailureHandlingFunctionToolInvoker", None)
    if handling is not None and isinstance(invoker, handling):
        served.on_invoke_tool = handling(impl, invoker._on_handled_error, function_tool=served)
    else:  # a FunctionTool built by hand: its invoker's own exceptions reached the runner raw
        served.on_invoke_tool = impl
    return served


def _make_invoke(original: Callable[..., Any]) -> Callable[..., Any]:
    async def invoke(*, function_tool: Any, context: Any, arguments: str) -> Any:
        ex = seam.route()
        if ex is not None and getattr(function_tool, "_is_agent_tool", False):
            delegated = getattr(ex, "delegated", None)  # agent.as_tool(): the agent runs, its tools are served
            if callable(delegated):
                delegated(function_tool.name, _args(arguments))
        elif ex is not None:
            function_tool = _served_tool(function_tool, ex)
        return await original(function_tool=function_tool, context=context, arguments=arguments)

    setattr(invoke, GUARD, True)
    return invoke


def _make_get_all_tools(original: Callable[..., Any]) -> Callable[..., Any]:
    async def get_all_tools(self: Any, run_context: Any) -> Any:
        tools = await original(self, run_context)
        ex = seam.route()
        if ex is None:
            return tools
        from agents import FunctionTool

        left_out = [t for t in tools if not isinstance(t, FunctionTool)]
        if left_out:
            note = getattr(ex, "note", None)
            if callable(note):
                names = ", ".join(
                    f"{getattr(t, 'name', None) or type(t).__name__} ({type(t).__name__})" for t in left_out
                )
                note(f"not replayable, not offered to the model: {names}")
        return [t for t in tools if isinstance(t, FunctionTool)]

    return get_all_tools


def _make_connect(original: Callable[..., Any]) -> Callable[..., Any]:
    """An MCP server connected in a replay starts (or is reached) as in production: its tool calls are
    served like every function tool's, but its tool list is not served from the recording. The case
    says so, once: a stdio server's command needs ``allow_commands``."""

    async def connect(self: Any) -> Any:
        note = getattr(seam.route(), "note", None)
        if callable(note):
            note(
                f"MCP server `{getattr(self, 'name', type(self).__name__)}` started as in production: the OpenAI "
                "Agents SDK's MCP servers list their tools themselves (their calls are served from the case)"
            )
        return await original(self)

    return connect


def install() -> None:
    import importlib

    from agents import Agent

    for module_name in _BINDINGS:
        module = sys.modules.get(module_name) or importlib.import_module(module_name)
        current = getattr(module, _FUNCTION, None)
        if current is not None and not getattr(current, GUARD, False):
            setattr(module, _FUNCTION, _make_invoke(current))
    owner = defining(Agent, "get_all_tools")
    if owner is not None:
        guard(owner, "get_all_tools", _make_get_all_tools)
    try:  # the base of its stdio, SSE and streamable-HTTP servers
        mcp_server: Any = importlib.import_module("agents.mcp.server")._MCPServerWithClientSession
    except (ImportError, AttributeError):  # no mcp package, or an SDK that renamed it
        mcp_server = None
    owner = defining(mcp_server, "connect") if mcp_server is not None else None
    if owner is not None:
        guard(owner, "connect", _make_connect)
    from agents.models.interface import Model

    for cls in subclasses(Model):  # a recorded-model replay answers every model's calls (_agents_model)
        guard(cls, "get_response", make_get_response)
        guard(cls, "stream_response", make_stream_response)


def accepts(agent: Any) -> bool:
    from agents import Agent

    return isinstance(agent, Agent)


def prepare(agent: Any, case: Any) -> Callable[[str], Any]:
    from agents import Runner

    earlier = input_items(history_of(case))

    async def run(prompt: str) -> str | None:
        given: Any = [*earlier, {"role": "user", "content": prompt}] if earlier else prompt
        return answer_of(await Runner.run(agent, given))

    return takes_history(run)


def input_items(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The case's earlier messages as Responses input items (what ``result.to_input_list()`` gives)."""
    out: list[dict[str, Any]] = []
    for m in history:
        if m["role"] == "tool":
            out.append(
                {"type": "function_call_output", "call_id": m["tool_call_id"] or "", "output": m["content"] or ""}
            )
            continue
        if m["content"]:
            out.append({"role": m["role"], "content": m["content"]})
        for i, c in enumerate(m["tool_calls"]):
            args = json.dumps(c["args"] if c["args"] is not None else {})
            out.append(
                {"type": "function_call", "call_id": c["call_id"] or f"call_{i}", "name": c["name"], "arguments": args}
            )
    return out


def answer_of(result: Any) -> str | None:
    if getattr(result, "interruptions", None):
        return None  # paused on an approval: deferred
    output = getattr(result, "final_output", None)
    if output is None or isinstance(output, str):
        return output
    dump = getattr(output, "model_dump_json", None)
    return str(dump()) if callable(dump) else json.dumps(output, default=str)


def instrument() -> Callable[[], None] | None:
    """OpenInference's instrumentor (it sets the SDK's own exporter aside meanwhile), when it is off."""
    return turn_on("openinference.instrumentation.openai_agents", "OpenAIAgentsInstrumentor")
