"""LangChain and LangGraph: in replay, every ``BaseTool``, however the graph reaches it.

``@tool`` functions, ``StructuredTool``, ``BaseTool`` subclasses, the tools inside ``create_agent``,
prebuilt ReAct agents and ``ToolNode`` all run a tool through ``BaseTool.run``/``arun``, which fires
the callbacks (the tracing instrumentors' tool span), validates the input, and then calls the class's
``_run``/``_arun``. The guard on ``run``/``arun`` remembers the arguments the model sent (injected
ones, such as ``ToolRuntime``, ``InjectedToolArg``, state, store and callbacks, filtered out the way
LangChain filters them for its callbacks); the guard on ``_run``/``_arun`` of every tool class
answers from the case's executor instead of running the body. A recorded ``ToolException`` is raised
as one, so ``handle_tool_error`` turns it into the same error message; a ``no_fixture`` answer becomes
the tool message the model reads. A ``_run`` reached any other way inside a replay is served too.

A graph is run the way production had to run it: awaited through ``ainvoke`` when some part of it is
async only (``async_only``), else ``invoke``d; the replay awaits it on the case's own event loop, and
the tool calls a ``ToolNode`` gathers as tasks each carry the case's executor in their context.

In a recorded-model replay, every chat model's call is served from the recording (``_langchain_model``).

In capture, what it records its own way (``FRAMEWORK``): langChain and LangGraph (under OpenInference or
OpenLLMetry): the exceptions that pause or limit a graph, and the answers its call-limit middleware
writes itself.

A tool span's input is a callback payload (``{"input_str", "inputs", "kwargs"}``, the call id in
``kwargs.tool_call_id``). Its message forms (``dumpd()``, ``message_to_dict()``, graph states) are read
by their shape (``_values``, ``_readings``), as other producers write them alike.
"""

from __future__ import annotations

import contextvars
import json
from collections.abc import Callable
from typing import Any

from ... import seam
from .._values import MISSING, text
from ._async_graph import async_only
from ._framework import Framework
from ._history import history_of, takes_history
from ._langchain_model import install_models
from ._patch import defining, guard, subclasses
from ._tracing import turn_on

__all__ = ["FRAMEWORK", "NAME", "ROOTS", "accepts", "answer_of", "async_only", "install", "instrument", "prepare"]


def _tool_input(payload: dict[str, Any], call_id: str | None) -> tuple[Any, str | None] | None:
    """A callback payload: its ``inputs``, and the call id it names (when the span named none)."""
    if "input_str" not in payload and not ("inputs" in payload and "kwargs" in payload):
        return None
    kw = payload.get("kwargs")
    if isinstance(kw, dict) and call_id is None:
        call_id = text(kw.get("tool_call_id"))
    inputs = payload.get("inputs")
    return (inputs if isinstance(inputs, dict) else MISSING), call_id


FRAMEWORK = Framework(
    "langchain",
    deferrals=frozenset({"GraphInterrupt", "NodeInterrupt", "Interrupt"}),  # interrupt(), interrupt_before
    limit_stops={
        "GraphRecursionError": "max_steps",
        "ModelCallLimitExceededError": "max_steps",
        "ToolCallLimitExceededError": "max_steps",
    },
    # The call-limit middleware with exit_behavior="end" ends the run on a message of its own, which
    # no model wrote: the run stopped on a limit, whatever the message says.
    limit_answers=("Model call limits exceeded", "Tool call limit reached", "Tool call limits exceeded"),
    tool_input=_tool_input,
)

ROOTS = ("langchain_core",)
NAME = FRAMEWORK.name  # one name in capture and in replay
# (tool, the model's arguments) of the BaseTool.run on this context's stack
_pending: contextvars.ContextVar[tuple[Any, Any] | None] = contextvars.ContextVar("harvester_lc_tool", default=None)


def _visible(tool: Any, tool_input: Any) -> Any:
    """The arguments the model sent: the input without what LangChain injects."""
    if isinstance(tool_input, dict):
        filt = getattr(tool, "_filter_injected_args", None)
        return filt(tool_input) if callable(filt) else dict(tool_input)
    if isinstance(tool_input, str):
        fields = _fields(tool)
        return {fields[0]: tool_input} if len(fields) == 1 else {"input": tool_input}
    return tool_input


def _fields(tool: Any) -> list[str]:
    try:
        schema = tool.tool_call_schema
    except Exception:
        return []
    if isinstance(schema, dict):
        return list(schema.get("properties", {}))
    return list(getattr(schema, "model_fields", {}) or {})


def _served_args(tool: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    pending = _pending.get()
    if pending is not None and pending[0] is tool:
        return pending[1]
    kw = {k: v for k, v in kwargs.items() if k not in ("run_manager", "callbacks", "config")}
    if args and not kw:
        return _visible(tool, args[0] if len(args) == 1 else list(args))
    return _visible(tool, kw)


def _content(tool: Any, result: Any) -> Any:
    if getattr(tool, "response_format", None) == "content_and_artifact":
        return (result, None)
    return result


def _hands_over(tool: Any, ex: Any, args: Any) -> bool:
    """A handoff, which runs (and is logged as the call of an agent): it routes the graph to another
    agent, whose own tool calls are served. LangChain's multi-agent docs write one as a tool returning
    ``Command(goto=<agent>, graph=Command.PARENT)``; langgraph-supervisor's and -swarm's carry their
    destination in the tool's metadata. Served instead, it would hand over nothing."""
    fn = getattr(tool, "func", None) or getattr(tool, "coroutine", None)
    returns = getattr(fn, "__annotations__", {}).get("return")
    name = returns if isinstance(returns, str) else getattr(returns, "__name__", "")
    handoff = name.rpartition(".")[2] == "Command" or "__handoff_destination" in (getattr(tool, "metadata", None) or {})
    delegated = getattr(ex, "delegated", None)
    if handoff and callable(delegated):
        delegated(tool.name, args)
    return handoff


def _make_run(original: Callable[..., Any]) -> Callable[..., Any]:
    def _run(self: Any, *args: Any, **kwargs: Any) -> Any:
        ex = seam.route()
        if ex is None:
            return original(self, *args, **kwargs)
        served = _served_args(self, args, kwargs)
        if _hands_over(self, ex, served) or seam.sandboxed(ex, self.name, served):
            with seam.running_tool(self.name):
                return original(self, *args, **kwargs)
        return _content(self, ex.execute(self.name, served))

    return _run


def _make_arun(original: Callable[..., Any]) -> Callable[..., Any]:
    async def _arun(self: Any, *args: Any, **kwargs: Any) -> Any:
        ex = seam.route()
        if ex is None:
            return await original(self, *args, **kwargs)
        served = _served_args(self, args, kwargs)
        if _hands_over(self, ex, served) or seam.sandboxed(ex, self.name, served):
            with seam.running_tool(self.name):
                return await original(self, *args, **kwargs)
        return _content(self, await ex.aexecute(self.name, served))

    return _arun


def _call_input(tool: Any, value: Any) -> tuple[Any, str | None]:
    """(the model's arguments, the tool call id) of what ``invoke`` was given: a ToolCall, a dict or a str."""
    if isinstance(value, dict) and value.get("type") == "tool_call" and isinstance(value.get("args"), dict):
        return _visible(tool, value["args"]), value.get("id")
    return _visible(tool, value), None


def _as_invoked(tool: Any, result: Any, call_id: str | None) -> Any:
    """What ``invoke`` returns: a tool message for a tool call (as ``ToolNode`` expects), else the content."""
    if call_id is None:
        return result
    from langchain_core.messages import ToolMessage

    content = result if isinstance(result, (str, list)) else json.dumps(result, default=str)
    return ToolMessage(content=content, tool_call_id=call_id, name=tool.name)


def _make_invoke(original: Callable[..., Any]) -> Callable[..., Any]:
    """A tool class with an ``invoke`` of its own (it never reaches ``run``): served at ``invoke``."""

    def invoke(self: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
        ex = seam.route()
        if ex is None:
            return original(self, input, *args, **kwargs)
        call_args, call_id = _call_input(self, input)
        if seam.sandboxed(ex, self.name, call_args):
            with seam.running_tool(self.name):
                return original(self, input, *args, **kwargs)
        return _as_invoked(self, ex.execute(self.name, call_args), call_id)

    return invoke


def _make_ainvoke(original: Callable[..., Any]) -> Callable[..., Any]:
    async def ainvoke(self: Any, input: Any, *args: Any, **kwargs: Any) -> Any:
        ex = seam.route()
        if ex is None:
            return await original(self, input, *args, **kwargs)
        call_args, call_id = _call_input(self, input)
        if seam.sandboxed(ex, self.name, call_args):
            with seam.running_tool(self.name):
                return await original(self, input, *args, **kwargs)
        return _as_invoked(self, await ex.aexecute(self.name, call_args), call_id)

    return ainvoke


def _guard_class(cls: type) -> None:
    from langchain_core.tools import BaseTool

    for name, make in (("_run", _make_run), ("_arun", _make_arun)):
        owner = defining(cls, name)
        if owner is not None:
            guard(owner, name, make)
    for name, make in (("invoke", _make_invoke), ("ainvoke", _make_ainvoke)):
        owner = defining(cls, name)
        if owner is not None and owner is not BaseTool and _overrides(owner, name):
            guard(owner, name, make)


def _overrides(owner: type, name: str) -> bool:
    """The class's own ``invoke`` does not end in ``BaseTool.run`` (StructuredTool's ``ainvoke`` does)."""
    return owner.__module__.split(".")[0] != "langchain_core"


def _make_entry(original: Callable[..., Any], is_async: bool) -> Callable[..., Any]:
    if is_async:

        async def arun(self: Any, tool_input: Any, *args: Any, **kwargs: Any) -> Any:
            if seam.route() is None:
                return await original(self, tool_input, *args, **kwargs)
            _guard_class(type(self))
            token = _pending.set((self, _visible(self, tool_input)))
            try:
                return await original(self, tool_input, *args, **kwargs)
            finally:
                _pending.reset(token)

        return arun

    def run(self: Any, tool_input: Any, *args: Any, **kwargs: Any) -> Any:
        if seam.route() is None:
            return original(self, tool_input, *args, **kwargs)
        _guard_class(type(self))  # a tool class defined after the replay began
        token = _pending.set((self, _visible(self, tool_input)))
        try:
            return original(self, tool_input, *args, **kwargs)
        finally:
            _pending.reset(token)

    return run


def install() -> None:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.tools import BaseTool

    guard(BaseTool, "run", lambda original: _make_entry(original, False))
    guard(BaseTool, "arun", lambda original: _make_entry(original, True))
    for cls in subclasses(BaseTool):
        _guard_class(cls)
    install_models(BaseChatModel)


def accepts(agent: Any) -> bool:
    try:
        from langgraph.pregel import Pregel
    except ImportError:
        return False
    return isinstance(agent, Pregel)


def prepare(agent: Any, case: Any) -> Callable[[str], Any]:
    """A compiled graph invoked with the prompt as its messages (a thread of its own when it checkpoints);
    awaited through ``ainvoke`` when part of it is async only, as production had to run it (the replay
    awaits it on the case's own event loop), else ``invoke``d as a sync app is."""
    config: dict[str, Any] = {}
    if getattr(agent, "checkpointer", None) is not None:
        config = {"configurable": {"thread_id": f"harvester-{case.id}"}}

    earlier = messages(history_of(case))

    def given(prompt: str) -> dict[str, Any]:
        return {"messages": [*earlier, {"role": "user", "content": prompt}]}

    if async_only(agent):

        async def arun(prompt: str) -> str | None:
            return answer_of(await agent.ainvoke(given(prompt), config or None))

        return takes_history(arun)

    def run(prompt: str) -> str | None:
        return answer_of(agent.invoke(given(prompt), config or None))

    return takes_history(run)


def messages(history: list[dict[str, Any]]) -> list[Any]:
    """The case's earlier messages as LangChain messages (the conversation a chat app sends)."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    out: list[Any] = []
    for m in history:
        if m["role"] == "assistant":
            calls = [{"name": c["name"], "args": c["args"] or {}, "id": c["call_id"]} for c in m["tool_calls"]]
            out.append(AIMessage(content=m["content"] or "", tool_calls=calls))
        elif m["role"] == "tool":
            out.append(ToolMessage(content=m["content"] or "", tool_call_id=m["tool_call_id"] or ""))
        else:
            out.append(HumanMessage(content=m["content"] or ""))
    return out


def answer_of(state: Any) -> str | None:
    """The last AI message's text, or the structured response; none while the graph waits (an interrupt)."""
    if not isinstance(state, dict) or state.get("__interrupt__"):
        return None
    if state.get("structured_response") is not None:
        resp = state["structured_response"]
        dump = getattr(resp, "model_dump_json", None)
        return str(dump()) if callable(dump) else json.dumps(resp, default=str)
    messages = state.get("messages") or []
    last = messages[-1] if messages else None
    content = getattr(last, "content", None)
    if isinstance(content, list):  # content blocks: the text ones
        content = "".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in content)
    return content if isinstance(content, str) and getattr(last, "type", None) == "ai" else None


def instrument() -> Callable[[], None] | None:
    """OpenInference's LangChain instrumentor, unless it or OpenLLMetry's is on already."""
    return turn_on(
        "openinference.instrumentation.langchain",
        "LangChainInstrumentor",
        unless=[("opentelemetry.instrumentation.langchain", "LangchainInstrumentor")],
    )
