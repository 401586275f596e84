"""A LangChain 1.x ``create_agent`` support agent on a scripted chat model, traced by a stock instrumentor.

``instrumentor`` is ``"openinference"`` (openinference-instrumentation-langchain) or ``"openllmetry"``
(opentelemetry-instrumentation-langchain). Both patch LangChain globally, so every run instruments,
runs and uninstruments, under a lock: two scenarios never share an instrumentor.

Scenarios (``SCENARIOS``): ``happy``, ``tool_error`` (a tool raises: the run fails), ``retry`` (the tool
error goes back to the model through ``ToolErrorMiddleware``; the model retries with other args),
``denied`` (``HumanInTheLoopMiddleware`` interrupts before ``issue_refund``; a human rejects it and the
resumed run answers). Turn n of a run reports ``100 n`` input and ``10 n`` output tokens.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import langchain.agents
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain.agents.middleware.tool_error import ToolErrorMiddleware
from langchain.agents.structured_output import ToolStrategy
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from pydantic import BaseModel

from . import tools
from ._otel import capture, finished
from .pydantic_ai_agent import AGENT_NAME, ANSWERS, MODEL_NAME, PROMPTS, SCRIPTS, USAGE

SCENARIOS = ("happy", "tool_error", "retry", "denied")


class RefundAnswer(BaseModel):
    """The structured answer of the "structured" scenario (``response_format=ToolStrategy(RefundAnswer)``)."""

    eligible: bool
    days_left: int


# LangChain-only: the model answers by "calling" the response schema, which LangChain handles itself.
SCRIPTS = {
    **SCRIPTS,
    "structured": [
        [("kb_search", {"query": "refund policy"}, "call_1")],
        [("RefundAnswer", {"eligible": True, "days_left": 18}, "call_2")],
    ],
}
PROMPTS = {**PROMPTS, "structured": "Can I still return order A1001?"}
INSTRUMENTORS = ("openinference", "openllmetry")
_LOCK = threading.Lock()
# What the instrumentors patch. OpenLLMetry 0.62's uninstrument() leaves most of it wrapped (its unwrap
# cannot follow "Class.attr" paths), and a stale wrapper keeps the old tracer: restore them ourselves.
_PATCHED = [
    ("langchain_core.callbacks.base", "BaseCallbackManager", "__init__"),
    ("langgraph.pregel", "Pregel", "stream"),
    ("langgraph.pregel", "Pregel", "astream"),
    ("langgraph.types", "Command", "__init__"),
    *[
        ("langchain.agents.middleware.types", "AgentMiddleware", f"{a}{h}_{w}")
        for a in ("", "a")
        for h in ("before", "after")
        for w in ("model", "agent")
    ],
    ("langgraph.prebuilt.chat_agent_executor", None, "create_react_agent"),
    ("langgraph.prebuilt", None, "create_react_agent"),
    ("langchain.agents.factory", None, "create_agent"),
    ("langchain.agents", None, "create_agent"),
]
_ABSENT = object()


def _owner(module: str, cls: str | None) -> Any:
    mod = importlib.import_module(module)
    return getattr(mod, cls) if cls else mod


@contextmanager
def _restored() -> Iterator[None]:
    saved = [(o, name, vars(o).get(name, _ABSENT)) for o, name in ((_owner(m, c), n) for m, c, n in _PATCHED)]
    try:
        yield
    finally:
        for owner, name, value in saved:
            if value is _ABSENT:
                if name in vars(owner):
                    delattr(owner, name)
            else:
                setattr(owner, name, value)


class ScriptedChatModel(BaseChatModel):
    """Answers from ``SCRIPTS[scenario]``: turn n = number of AI messages already in the conversation + 1."""

    scenario: str
    model_name: str = MODEL_NAME

    @property
    def _llm_type(self) -> str:
        return "scripted-chat"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {"model_name": self.model_name}

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        """As provider chat models bind them: each tool in OpenAI's form, its JSON schema with it."""
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        turn = sum(isinstance(m, AIMessage) for m in messages) + 1
        step = SCRIPTS[self.scenario][turn - 1]
        inp, out = USAGE[turn]
        usage = {"input_tokens": inp, "output_tokens": out, "total_tokens": inp + out}
        if isinstance(step, str):
            msg = AIMessage(content=step, usage_metadata=usage)
        else:
            msg = AIMessage(
                content="",
                usage_metadata=usage,
                tool_calls=[{"name": n, "args": a, "id": i, "type": "tool_call"} for n, a, i in step],
            )
        msg.response_metadata = {"model_name": self.model_name}
        return ChatResult(generations=[ChatGeneration(message=msg)], llm_output={"model_name": self.model_name})


class ToolsThenEcho(BaseChatModel):
    """Turn 1 asks for ``calls`` (all at once); turn 2 answers with the tool messages it got back."""

    calls: list[tuple[str, dict[str, Any]]]

    @property
    def _llm_type(self) -> str:
        return "tools-then-echo"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        results = [str(m.content) for m in messages if isinstance(m, ToolMessage)]
        msg = (
            AIMessage(content=" / ".join(results))
            if results
            else AIMessage(
                content="",
                tool_calls=[
                    {"name": n, "args": a, "id": f"call_{i}", "type": "tool_call"}
                    for i, (n, a) in enumerate(self.calls)
                ],
            )
        )
        return ChatResult(generations=[ChatGeneration(message=msg)])


def _surface_unknown_order(exc: Exception, request: Any) -> str | None:
    """Hand a bad order id back to the model (it retries); let every other tool error end the run."""
    return f"Error: unknown order id: {exc}" if isinstance(exc, KeyError) else None


def build_agent(scenario: str, name: str | None = AGENT_NAME) -> Any:
    """Only the middleware a scenario needs: every hook is one more span per turn.

    ``name=None`` keeps LangGraph's default name ("LangGraph"): OpenInference then marks no span AGENT.
    """
    middleware: list[Any] = []
    if scenario == "retry":
        middleware.append(ToolErrorMiddleware(on_error=_surface_unknown_order))
    if scenario == "denied":
        middleware.append(HumanInTheLoopMiddleware(interrupt_on={"issue_refund": True}))
    return langchain.agents.create_agent(  # looked up at call time: OpenLLMetry patches it
        ScriptedChatModel(scenario=scenario),
        tools=[tools.kb_search, tools.get_order, tools.check_inventory, tools.issue_refund],
        middleware=middleware,
        checkpointer=InMemorySaver(),
        name=name,
        **({"response_format": ToolStrategy(RefundAnswer)} if scenario == "structured" else {}),
    )


@contextmanager
def instrumented(instrumentor: str, provider: TracerProvider, *, include_content: bool = True) -> Iterator[None]:
    """Instrument LangChain for the duration of one run, then restore it."""
    if instrumentor == "openinference":
        from openinference.instrumentation import TraceConfig
        from openinference.instrumentation.langchain import LangChainInstrumentor as Instrumentor

        config = TraceConfig(hide_inputs=not include_content, hide_outputs=not include_content)
        kwargs: dict[str, Any] = {"tracer_provider": provider, "config": config}
    elif instrumentor == "openllmetry":
        from opentelemetry.instrumentation.langchain import LangchainInstrumentor as Instrumentor

        kwargs = {"tracer_provider": provider}
    else:
        raise ValueError(f"unknown instrumentor {instrumentor!r}")
    saved = os.environ.get("TRACELOOP_TRACE_CONTENT")
    os.environ["TRACELOOP_TRACE_CONTENT"] = "true" if include_content else "false"
    inst = Instrumentor()
    with _restored():
        inst.instrument(**kwargs)
        try:
            yield
        finally:
            inst.uninstrument()
        if saved is None:
            os.environ.pop("TRACELOOP_TRACE_CONTENT", None)
        else:
            os.environ["TRACELOOP_TRACE_CONTENT"] = saved


def run_scenario(
    scenario: str,
    tracer_provider: TracerProvider | None = None,
    *,
    instrumentor: str = "openinference",
    include_content: bool = True,
    deterministic: bool = False,
    agent_name: str | None = AGENT_NAME,
) -> list[ReadableSpan]:
    """Run one scenario and return its finished spans (``denied`` makes two traces: interrupt, then resume)."""
    provider, exporter = capture(tracer_provider, deterministic=deterministic)
    with _LOCK, instrumented(instrumentor, provider, include_content=include_content):
        agent = build_agent(scenario, agent_name)
        config: dict[str, Any] = {"configurable": {"thread_id": scenario}}
        if deterministic:  # LangGraph runs one turn's tool calls in parallel threads: serialize them
            config["max_concurrency"] = 1
        state = {"messages": [{"role": "user", "content": PROMPTS[scenario]}]}
        if scenario == "tool_error":
            try:
                agent.invoke(state, config)
            except tools.OrdersDbTimeout:
                pass
            else:
                raise AssertionError("check_inventory should have failed the run")
        elif scenario == "denied":
            paused = agent.invoke(state, config)
            assert paused.get("__interrupt__"), "issue_refund should have been interrupted"
            resumed = agent.invoke(
                Command(resume={"decisions": [{"type": "reject", "message": "A human denied the refund."}]}), config
            )
            assert resumed["messages"][-1].content == ANSWERS["denied"]
        elif scenario == "structured":
            out = agent.invoke(state, config)
            assert out["structured_response"] == RefundAnswer(eligible=True, days_left=18), out
        else:
            agent.invoke(state, config)
    return finished(exporter)
