"""pydantic-ai: in replay, every tool call an agent dispatches, whatever toolset holds the tool; output functions.

Tools given as ``tools=[...]``, ``@agent.tool``, ``@agent.tool_plain``, function toolsets, MCP servers
and wrapper toolsets all reach the model's call through ``ToolManager._raw_execute`` (after validation,
hooks and the instrumentation's span), which calls down the run's toolsets: wrappers (approval,
prefixes, your own policies) run as in production, and the toolset at the bottom, the one that would
run the tool, is served instead. The guard on ``_raw_execute`` remembers the name the model called and
the arguments it sent (``RunContext`` is never among them); the guard on every leaf toolset's
``call_tool`` answers with them from the case's executor. A toolset that holds others (``wrapped``,
``toolsets``) is a wrapper, everything else a leaf. So retries (``ModelRetry``), approvals and the span
behave as in production. An MCP server's toolset is also entered and listed from the recording, so the
server is never started (``_pydantic_mcp``).

An output function (``ToolOutput(fn)``, ``TextOutput(fn)``, a function in ``output_type``) is code of
yours too, and may act: it is served like a tool, under the name its span records (the output tool's,
or the function's for text output), with the arguments it was given. Plain structured output (a model,
a string) is the answer itself and runs.

In a recorded-model replay (``seam.model_server()``), every model's ``request`` and ``request_stream``
is served: the guard sits on every ``Model`` class that talks to a model itself (``FunctionModel``,
``OpenAIChatModel``, ``AnthropicModel``, ...), below the wrappers (``InstrumentedModel``,
``FallbackModel``) that only pass the call on, so pydantic-ai's own model span still records the
call. The live request, read the way its span records it (``_served``), goes to the server, and the
recorded answer comes back as a ``ModelResponse`` (streamed: a completed stream that yields it).

In capture, what it records its own way (``FRAMEWORK``): pydantic-ai (the GenAI convention): the
exceptions that defer a tool call or end a run on a budget.

Its output tools, MCP toolsets and older data formats are read by ``_genai``, whose convention it writes
in practice.
"""

from __future__ import annotations

import contextvars
import json
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from ... import seam
from . import _served
from ._framework import Framework
from ._history import history_of, takes_history
from ._patch import guard, subclasses
from ._pydantic_mcp import install_mcp

__all__ = ["FRAMEWORK", "NAME", "ROOTS", "accepts", "answer_of", "install", "instrument", "message_history", "prepare"]

FRAMEWORK = Framework(
    "pydantic-ai",
    deferrals=frozenset({"ApprovalRequired", "CallDeferred"}),  # a tool call left for a human or elsewhere
    limit_stops={"UsageLimitExceeded": "budget_exceeded"},
)

ROOTS = ("pydantic_ai",)
NAME = FRAMEWORK.name  # one name in capture and in replay
# (executor, the name the model called, its arguments) of the tool call on this context's stack
_pending: contextvars.ContextVar[tuple[Any, str, Any] | None] = contextvars.ContextVar(
    "harvester_pai_call", default=None
)
# the model whose live call is under way (a subclass's request calling super().request is one call)
_live: contextvars.ContextVar[Any] = contextvars.ContextVar("harvester_pai_model", default=None)
_FINISH = {"tool_calls": "tool_call", "tool_use": "tool_call", "end_turn": "stop", "max_tokens": "length"}


def _make_raw_execute(original: Callable[..., Any]) -> Callable[..., Any]:
    async def _raw_execute(self: Any, validated: Any, *args: Any, **kwargs: Any) -> Any:
        ex = seam.route()
        tool = validated.tool
        if ex is None or tool is None or tool.tool_def.kind == "output":
            return await original(self, validated, *args, **kwargs)
        token = _pending.set((ex, validated.call.tool_name, validated.call.args_as_dict()))
        try:
            return await original(self, validated, *args, **kwargs)
        finally:
            _pending.reset(token)

    return _raw_execute


def _delegates(toolset: Any) -> bool:
    """A toolset that passes calls on to others (a wrapper, a combination, a dynamic toolset)."""
    return any(
        isinstance(getattr(toolset, attr, None), (list, tuple)) or hasattr(getattr(toolset, attr, None), "call_tool")
        for attr in ("wrapped", "toolsets", "_toolset")
    )


def _make_call_tool(original: Callable[..., Any]) -> Callable[..., Any]:
    async def call_tool(self: Any, name: str, tool_args: Any, ctx: Any, tool: Any) -> Any:
        ex = seam.route()
        if ex is None or _delegates(self):
            return await original(self, name, tool_args, ctx, tool)
        pending = _pending.get()
        # the call as the model made it; else a toolset called outside an agent's run
        called, args = (pending[1], pending[2]) if pending is not None and pending[0] is ex else (name, tool_args)
        if not _mcp(self) and seam.sandboxed(ex, called, args):
            with seam.running_tool(called):
                return await original(self, name, tool_args, ctx, tool)
        return await ex.aexecute(called, args)

    return call_tool


def _mcp(toolset: Any) -> bool:
    """An MCP server's toolset: its server is never started in a replay (``_pydantic_mcp``), so its
    tools are always served, sandbox or not."""
    cls = getattr(sys.modules.get("pydantic_ai.mcp"), "MCPToolset", None)
    return isinstance(cls, type) and isinstance(toolset, cls)


def _make_output_function(original: Callable[..., Any]) -> Callable[..., Any]:
    async def execute_output_function(
        function_schema: Any, *, run_context: Any, args: Any, wrap_validation_errors: bool = True
    ) -> Any:
        ex = seam.route()
        if ex is None:
            return await original(
                function_schema, run_context=run_context, args=args, wrap_validation_errors=wrap_validation_errors
            )
        tool_name = getattr(run_context, "tool_name", None)
        if tool_name:  # an output tool the model called: its span records the tool and these args
            return await ex.aexecute(tool_name, args)
        # text output: the span records the function and the text, which a run reads as {"input": text}
        values = list(args.values()) if isinstance(args, dict) else [args]
        return await ex.aexecute(function_schema.name, {"input": values[0]} if len(values) == 1 else args)

    return execute_output_function


def _served_answer(model: Any, messages: Any, settings: Any, params: Any) -> Any:
    """The recorded answer to this call, or None: no recorded-model replay, a model that only passes the
    call on (a wrapper: the model it wraps is served), or the live model answers from here on."""
    server = seam.model_server()
    if server is None or _live.get() is model or _delegates_model(model):
        return None
    return server.answer(_request_data(model, messages, settings, params))


def _delegates_model(model: Any) -> bool:
    from pydantic_ai.models import Model

    return isinstance(getattr(model, "wrapped", None), Model) or isinstance(getattr(model, "models", None), list)


def _request_data(model: Any, messages: Any, settings: Any, params: Any) -> Any:
    """The live request as its span records it: the messages as pydantic-ai writes ``gen_ai.input.messages``
    (system parts to ``system``, after the instructions), the tools and settings once the model prepared them."""
    from pydantic_ai._instrumentation import get_instructions
    from pydantic_ai.models.instrumented import InstrumentationSettings

    settings, params = model.prepare_request(settings, params)
    system = [get_instructions(messages, params)]
    out: list[Any] = []
    for m in InstrumentationSettings().messages_to_otel_messages(messages):
        parts: list[dict[str, Any]] = [dict(p) for p in m.get("parts", ())]
        texts = _served.joined(p.get("content") for p in parts if p.get("type") == "text")
        if m.get("role") == "system":
            system.append(texts)
            continue
        out += [
            _served.message("tool", _served.result_text(p.get("result")))
            for p in parts
            if p.get("type") == "tool_call_response"
        ]
        calls = [(p.get("name", ""), p.get("arguments")) for p in parts if p.get("type") == "tool_call"]
        if texts or calls:
            out.append(_served.message(str(m.get("role")), texts, calls))
    tools = [
        _served.spec(t.name, t.description, t.parameters_json_schema)
        for t in (*params.function_tools, *params.output_tools)
    ]
    return _served.request(system, out, tools, settings)


def _response(model: Any, answer: Any) -> Any:
    """A recorded answer as the ``ModelResponse`` the model would have returned."""
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.usage import RequestUsage

    parts: list[Any] = [TextPart(answer["text"])] if answer["text"] else []
    parts += [
        ToolCallPart(c["name"], _served.args_object(c["args"]), _served.call_id(c, n))
        for n, c in enumerate(answer["tool_calls"])
    ]
    usage = answer["usage"]
    finish = _FINISH.get(answer["finish_reason"] or "", answer["finish_reason"])
    return ModelResponse(
        parts=parts,
        usage=RequestUsage(input_tokens=usage["input_tokens"] or 0, output_tokens=usage["output_tokens"] or 0),
        model_name=answer["model"] or model.model_name,
        finish_reason=finish if finish in ("stop", "length", "content_filter", "tool_call", "error") else None,
    )


def _make_request(original: Callable[..., Any]) -> Callable[..., Any]:
    async def request(self: Any, messages: Any, settings: Any, params: Any, *args: Any, **kwargs: Any) -> Any:
        answer = _served_answer(self, messages, settings, params)
        if answer is not None:
            return _response(self, answer)
        token = _live.set(self)
        try:
            return await original(self, messages, settings, params, *args, **kwargs)
        finally:
            _live.reset(token)

    return request


def _make_request_stream(original: Callable[..., Any]) -> Callable[..., Any]:
    @asynccontextmanager
    async def request_stream(
        self: Any, messages: Any, settings: Any, params: Any, *args: Any, **kwargs: Any
    ) -> AsyncIterator[Any]:
        answer = _served_answer(self, messages, settings, params)
        if answer is not None:
            from pydantic_ai.models import CompletedStreamedResponse

            yield CompletedStreamedResponse(
                _response(self, answer), model_request_parameters=params, replay_events=True
            )
            return
        token = _live.set(self)
        try:
            async with original(self, messages, settings, params, *args, **kwargs) as stream:
                yield stream
        finally:
            _live.reset(token)

    return request_stream


def _guard_models() -> None:
    from pydantic_ai.models import Model

    for cls in subclasses(Model):
        if not getattr(cls.__dict__.get("request"), "__isabstractmethod__", False):
            guard(cls, "request", _make_request)
        guard(cls, "request_stream", _make_request_stream)


def install() -> None:
    from pydantic_ai import _output
    from pydantic_ai.tool_manager import ToolManager
    from pydantic_ai.toolsets import AbstractToolset

    guard(ToolManager, "_raw_execute", _make_raw_execute)
    _guard_models()
    for cls in subclasses(AbstractToolset):
        if "call_tool" in cls.__dict__:
            guard(cls, "call_tool", _make_call_tool)
    mcp = sys.modules.get("pydantic_ai.mcp")  # never imported here: it needs the app's MCP client
    if mcp is not None and isinstance(getattr(mcp, "MCPToolset", None), type):
        install_mcp(mcp.MCPToolset)
    current = getattr(_output, "execute_output_function", None)
    if current is not None and not getattr(current, "__harvester_guard__", False):
        served = _make_output_function(current)
        served.__harvester_guard__ = True  # type: ignore[attr-defined]
        _output.execute_output_function = served


def accepts(agent: Any) -> bool:
    from pydantic_ai.agent import AbstractAgent

    return isinstance(agent, AbstractAgent)


def prepare(agent: Any, case: Any) -> Callable[[str], Any]:
    """``agent.run(prompt, message_history=...)``, traced onto the global provider the replay reads."""
    _instrument(agent)
    history = message_history(history_of(case))

    async def run(prompt: str) -> str | None:
        return answer_of((await agent.run(prompt, message_history=history or None)).output)

    return takes_history(run)


def message_history(history: list[dict[str, Any]]) -> list[Any]:
    """The case's earlier messages as pydantic-ai ``ModelMessage``s: a user message and the tool
    results that follow a response are requests, an assistant message a response."""
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart, UserPromptPart

    out: list[Any] = []
    request: list[Any] = []  # the parts of the request being gathered (one response's results go back in one)
    for m in history:
        if m["role"] == "assistant":
            if request:
                out.append(ModelRequest(parts=request))
                request = []
            parts: list[Any] = [TextPart(m["content"])] if m["content"] else []
            parts += [
                ToolCallPart(c["name"], c["args"], c["call_id"] or f"call_{i}") for i, c in enumerate(m["tool_calls"])
            ]
            out.append(ModelResponse(parts=parts))
        elif m["role"] == "tool":
            request.append(ToolReturnPart(_called(out, m["tool_call_id"]), m["content"] or "", m["tool_call_id"] or ""))
        else:
            request.append(UserPromptPart(m["content"] or ""))
    if request:
        out.append(ModelRequest(parts=request))
    return out


def _called(messages: list[Any], call_id: str | None) -> str:
    """The tool a tool message answers (pydantic-ai's ToolReturnPart names it)."""
    for m in reversed(messages):
        for p in getattr(m, "parts", ()):
            if getattr(p, "tool_call_id", None) == call_id and getattr(p, "part_kind", "") == "tool-call":
                return str(p.tool_name)
    return "tool"


def _instrument(agent: Any) -> None:
    from pydantic_ai.models.instrumented import InstrumentationSettings

    if not getattr(agent, "instrument", None):  # unset, or off: a replay is read from its spans
        agent.instrument = InstrumentationSettings()


def answer_of(output: Any) -> str | None:
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


def instrument() -> Callable[[], None] | None:
    """Trace every agent the replay meets (``Agent.instrument_all``), as it was afterwards."""
    from pydantic_ai import Agent
    from pydantic_ai.models.instrumented import InstrumentationSettings

    before = Agent._instrument_default
    if before:
        return None
    Agent.instrument_all(InstrumentationSettings())
    return lambda: Agent.instrument_all(before)
