"""Each framework adapter on the ways its framework's docs build agents and tools: toolsets and prefixes,
injected arguments, tool classes, prebuilt agents, hosted tools, code agents. Every tool body counts
its real runs in ``shop.LIVE``; a replay must leave it at zero."""

from __future__ import annotations

import functools
from typing import Annotated, Any

import pytest
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import InjectedToolCallId
from langgraph.prebuilt import InjectedState, InjectedStore
from pydantic import BaseModel
from pydantic_ai import Agent, RunContext

import harvester
from harvester.canonical import fixture_key
from harvester.case import AgentCase
from harvester.conventions import runs_from_spans
from harvester.replay import replay
from tests.apps import shop
from tests.frameworks._otel import capture, finished

ORDER = {"order_id": "A1001"}


def case(tool: str = "get_order", args: dict[str, Any] | None = None, result: Any = None, **fields: Any) -> AgentCase:
    args = ORDER if args is None else args
    return AgentCase.model_validate(
        {
            "id": "adapter",
            "status": "accepted",
            "prompt": shop.PROMPT,
            "why": "the order answer",
            "checks": [{"check": "answered"}],
            "fixtures": [
                {
                    "key": fixture_key(tool, args),
                    "tool": tool,
                    "args": args,
                    "result": {"order_id": "A1001", "status": "FIXTURE"} if result is None else result,
                }
            ],
            "recorded": {"trajectory": [tool], "stop": "answered"},
            **fields,
        }
    )


@pytest.fixture(autouse=True)
def _live() -> None:
    shop.LIVE.clear()


def _replayed(spec: AgentCase, build: Any) -> Any:
    (r,) = replay([spec], build).results
    assert not shop.LIVE, f"a replay ran live tools: {dict(shop.LIVE)}"
    return r


# -- pydantic-ai --------------------------------------------------------------------------------------
def _pydantic_model(*calls: tuple[str, dict[str, Any]]) -> Any:
    """Turn 1 calls ``calls``; turn 2 answers with what they returned."""
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import FunctionModel

    def respond(messages: list[Any], info: Any) -> Any:
        returns = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]
        if not returns:
            return ModelResponse(parts=[ToolCallPart(n, a, f"call_{i}") for i, (n, a) in enumerate(calls)])
        return ModelResponse(parts=[TextPart(" / ".join(str(p.content) for p in returns))])

    return FunctionModel(respond, model_name="scripted")


def test_pydantic_ai_toolset_tools_are_served_by_the_name_the_model_called() -> None:
    from pydantic_ai.toolsets import FunctionToolset

    def build() -> Agent:
        shop_tools = FunctionToolset([shop.get_order, shop.issue_refund]).prefixed("shop")
        return Agent(_pydantic_model(("shop_get_order", ORDER)), name="support_agent", toolsets=[shop_tools])

    r = _replayed(case("shop_get_order"), build)
    assert r.passed and r.trajectory == ["shop_get_order"] and "FIXTURE" in (r.answer or ""), r.reasons()


class Eligibility(BaseModel):
    eligible: bool
    days_left: int


def test_pydantic_ai_structured_output_is_the_answer_not_a_tool_call() -> None:
    from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import FunctionModel

    def respond(messages: list[Any], info: Any) -> Any:
        if not any(isinstance(p, ToolReturnPart) for m in messages if isinstance(m, ModelRequest) for p in m.parts):
            return ModelResponse(parts=[ToolCallPart("get_order", ORDER, "call_1")])
        return ModelResponse(
            parts=[ToolCallPart(info.output_tools[0].name, {"eligible": True, "days_left": 18}, "call_2")]
        )

    def build() -> Agent:
        return Agent(
            FunctionModel(respond, model_name="scripted"),
            name="support_agent",
            output_type=Eligibility,
            tools=[shop.get_order],
        )

    r = _replayed(case(), build)
    assert r.passed and r.trajectory == ["get_order"] and r.tool_calls == 1, r.reasons()
    assert Eligibility.model_validate_json(r.answer or "{}") == Eligibility(eligible=True, days_left=18)


def test_a_factory_that_takes_the_case_gets_it_and_can_pass_deps() -> None:
    seen: list[str] = []

    def build(case: AgentCase) -> Any:
        seen.append(case.id)
        agent = Agent(_pydantic_model(("get_order", ORDER)), name="support_agent", deps_type=str)

        @agent.instructions
        def whose(ctx: RunContext[str]) -> str:  # runs in replay: it needs real deps
            return f"You serve customer {ctx.deps.upper()}."

        @agent.tool
        def get_order(ctx: RunContext[str], order_id: str) -> dict:
            """Look up one of the customer's orders."""
            return shop.get_order(order_id)

        return functools.partial(agent.run, deps=f"customer-of-{case.id}")

    r = _replayed(case(), build)
    assert r.passed and seen == ["adapter"] and r.trajectory == ["get_order"], r.reasons()


def test_a_decorated_tool_under_a_framework_is_one_call_not_two() -> None:
    """``@harvester.tool`` without ``spans=False`` inside pydantic-ai: its span would double every call."""
    from pydantic_ai.models.instrumented import InstrumentationSettings

    provider, exporter = capture()
    agent = Agent(_pydantic_model(("get_order", ORDER)), name="support_agent", tools=[harvester.tool(shop.get_order)])
    agent.instrument = InstrumentationSettings(tracer_provider=provider)
    agent.run_sync(shop.PROMPT)
    (run,) = runs_from_spans(finished(exporter))
    assert [c.name for c in run.calls] == ["get_order"] and run.calls[0].status == "ok"


# -- LangChain / LangGraph ----------------------------------------------------------------------------
def _chat_model(*calls: tuple[str, dict[str, Any]]) -> Any:
    from tests.frameworks.langchain_agent import ToolsThenEcho

    return ToolsThenEcho(calls=list(calls))


def test_langchain_injected_arguments_stay_out_of_the_args() -> None:
    from langchain.agents import create_agent
    from langchain_core.tools import tool
    from langgraph.store.memory import InMemoryStore

    @tool
    def get_order(
        order_id: str,
        state: Annotated[dict, InjectedState],
        store: Annotated[Any, InjectedStore()],
        call_id: Annotated[str, InjectedToolCallId],
        config: RunnableConfig,
    ) -> dict:
        """Look up an order by its id."""
        return shop.get_order(order_id)

    def build() -> Any:
        return create_agent(
            _chat_model(("get_order", ORDER)), tools=[get_order], store=InMemoryStore(), name="support_agent"
        )

    r = _replayed(case(), build)
    assert r.passed and r.trajectory == ["get_order"] and r.no_fixture == 0, r.reasons()


def test_langchain_tool_classes_artifacts_and_checkpointed_graphs() -> None:
    from langchain.agents import create_agent
    from langchain_core.tools import BaseTool, tool
    from langgraph.checkpoint.memory import InMemorySaver

    class OrderLookup(BaseTool):
        name: str = "get_order"
        description: str = "Look up an order by its id."

        def _run(self, order_id: str) -> dict:
            return shop.get_order(order_id)

    @tool(response_format="content_and_artifact")
    def kb_search(query: str) -> tuple[str, dict]:
        """Search the knowledge base."""
        return shop.kb_search(query), {"source": "kb"}

    def build() -> Any:
        return create_agent(
            _chat_model(("get_order", ORDER), ("kb_search", {"query": "refund policy"})),
            tools=[OrderLookup(), kb_search],
            checkpointer=InMemorySaver(),
            name="support_agent",
        )

    spec = case()
    spec.fixtures.append(
        spec.fixtures[0].model_copy(
            update={
                "key": fixture_key("kb_search", {"query": "refund policy"}),
                "tool": "kb_search",
                "args": {"query": "refund policy"},
                "result": "KB-FIXTURE",
            }
        )
    )
    r = _replayed(spec, build)
    assert r.passed and sorted(r.trajectory) == ["get_order", "kb_search"], r.reasons()
    assert "FIXTURE" in (r.answer or "") and "KB-FIXTURE" in (r.answer or "")


def test_langgraph_prebuilt_agents_and_a_hand_built_tool_node() -> None:
    import warnings

    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    @tool
    def get_order(order_id: str) -> dict:
        """Look up an order by its id."""
        return shop.get_order(order_id)

    def react() -> Any:
        from langgraph.prebuilt import create_react_agent

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # deprecated in favour of create_agent, still what many apps run
            return create_react_agent(_chat_model(("get_order", ORDER)), [get_order], name="support_agent")

    def hand_built() -> Any:
        model = _chat_model(("get_order", ORDER))
        graph = StateGraph(MessagesState)
        graph.add_node("agent", lambda state: {"messages": [model.invoke(state["messages"])]})
        graph.add_node("tools", ToolNode([get_order]))
        graph.add_edge(START, "agent")
        graph.add_conditional_edges("agent", tools_condition)
        graph.add_edge("tools", "agent")
        return graph.compile(name="support_agent")

    for build in (react, hand_built):
        r = _replayed(case(), build)
        assert r.passed and r.trajectory == ["get_order"] and "FIXTURE" in (r.answer or ""), (build, r.reasons())


# -- OpenAI Agents SDK --------------------------------------------------------------------------------
def _agents_model(scenario: str, offered: list[list[str]] | None = None) -> Any:
    """The drivers' offline model, noting the tools each request offered."""
    from tests.frameworks import openai_agents_agent as driver

    class Noting(driver.ScriptedModel):
        async def get_response(
            self, system_instructions: Any, input: Any, model_settings: Any, tools: list[Any], *args: Any, **kwargs: Any
        ) -> Any:
            if offered is not None:
                offered.append(sorted(getattr(t, "name", type(t).__name__) for t in tools))
            return await super().get_response(system_instructions, input, model_settings, tools, *args, **kwargs)

    return Noting(scenario)


def _agents_script(name: str, steps: list[Any]) -> str:
    from tests.frameworks import openai_agents_agent as driver

    driver.SCRIPTS[name] = steps
    return name


def test_openai_agents_hosted_tools_are_left_out_and_said_so() -> None:
    from agents import Agent, WebSearchTool, function_tool

    scenario = _agents_script("adapter-hosted", [[("get_order", ORDER, "call_1")], "A1001 was delivered."])
    offered: list[list[str]] = []

    def build() -> Agent:
        return Agent(
            name="support_agent",
            model=_agents_model(scenario, offered),
            tools=[function_tool(shop.get_order), WebSearchTool()],
        )

    r = _replayed(case(), build)
    assert r.passed and r.trajectory == ["get_order"], r.reasons()
    assert offered and all(names == ["get_order"] for names in offered)  # the model never saw web_search
    assert r.notes == ["not replayable, not offered to the model: web_search (WebSearchTool)"]


def test_openai_agents_recorded_error_goes_through_the_tools_failure_function() -> None:
    from agents import Agent, function_tool

    scenario = _agents_script("adapter-error", [[("get_order", ORDER, "call_1")], "I could not find that order."])
    told: list[str] = []

    def unknown_order(ctx: Any, error: Exception) -> str:
        told.append(str(error))
        return f"Error: unknown order id: {error}"

    def build() -> Agent:
        return Agent(
            name="support_agent",
            model=_agents_model(scenario),
            tools=[function_tool(shop.get_order, failure_error_function=unknown_order)],
        )

    spec = case()
    failed = {
        **spec.fixtures[0].model_dump(),
        "result": None,
        "error": {"type": "KeyError", "message": "no order A1001"},
    }
    spec = spec.model_copy(update={"fixtures": [type(spec.fixtures[0]).model_validate(failed)]})
    r = _replayed(spec, build)
    assert r.passed and r.stop == "answered" and told == ["'no order A1001'"], (r.reasons(), told)
    assert r.requested == ["get_order"] and r.trajectory == []  # it ran, and failed as recorded


# -- smolagents ---------------------------------------------------------------------------------------
def test_smolagents_code_agent_tools_called_from_its_code_are_served() -> None:
    from smolagents import CodeAgent, tool
    from smolagents.monitoring import LogLevel

    from tests.frameworks import smolagents_agent as driver

    driver.SCRIPTS["adapter-code"] = [
        'Thought: look the order up.\n<code>\norder = get_order(order_id="A1001")\n'
        'final_answer("A1001 is " + order["status"])\n</code>'
    ]

    @tool
    def get_order(order_id: str) -> dict:
        """Look up an order by its id.

        Args:
            order_id: The order id, like A1001.
        """
        return shop.get_order(order_id)

    def build() -> CodeAgent:
        return CodeAgent(
            tools=[get_order],
            model=driver.ScriptedModel("adapter-code"),
            name="support_agent",
            max_steps=2,
            verbosity_level=LogLevel.OFF,
        )

    r = _replayed(case(), build)
    assert r.passed and r.answer == "A1001 is FIXTURE" and r.tool_calls == 1, r.reasons()


def test_openai_agents_an_agent_used_as_a_tool_runs_and_its_tools_are_served() -> None:
    from agents import Agent, function_tool

    outer = _agents_script(
        "adapter-outer", [[("ask_research", {"input": "refund policy?"}, "call_1")], "Refunds in 30 days."]
    )
    inner = _agents_script("adapter-inner", [[("kb_search", {"query": "refund policy"}, "call_r1")], "Within 30 days."])

    def build() -> Agent:
        research = Agent(name="research_agent", model=_agents_model(inner), tools=[function_tool(shop.kb_search)])
        return Agent(
            name="support_agent",
            model=_agents_model(outer),
            tools=[research.as_tool("ask_research", "Ask the research agent.")],
        )

    kb = {"query": "refund policy"}
    spec = case("kb_search", kb, "KB-FIXTURE")
    r = _replayed(
        spec.model_copy(
            update={"recorded": spec.recorded.model_copy(update={"trajectory": ["ask_research", "kb_search"]})}
        ),
        build,
    )
    assert r.passed and r.trajectory == ["ask_research", "kb_search"], r.reasons()
    assert r.live_calls == 0 and r.no_fixture == 0 and r.divergence is None


def test_pydantic_ai_wrapper_toolsets_still_decide_only_the_bottom_one_is_served() -> None:
    """``approval_required()`` defers the call in replay as in production: wrappers run, the tool does not."""
    from pydantic_ai import DeferredToolRequests
    from pydantic_ai.toolsets import FunctionToolset

    refund = {"order_id": "A1001", "amount": 40.0}

    def build() -> Agent:
        gated = FunctionToolset([shop.issue_refund]).approval_required()
        return Agent(
            _pydantic_model(("issue_refund", refund)),
            name="support_agent",
            toolsets=[gated],
            output_type=[str, DeferredToolRequests],
        )

    spec = case(
        "issue_refund",
        refund,
        "refunded (fixture)",
        checks=[],
        recorded={"stop": "deferred", "denied": ["issue_refund"]},
    )
    r = _replayed(spec, build)
    assert r.stop == "deferred" and r.tool_calls == 0 and r.live_calls == 0, r.reasons()


def test_pydantic_ai_output_functions_are_served_like_tools() -> None:
    """An output function may act (run SQL, send the reply): production records it as a call, replay serves it."""
    from pydantic_ai import TextOutput, ToolOutput
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel
    from pydantic_ai.models.instrumented import InstrumentationSettings

    from harvester.harvest import case_from_run

    def send_reply(text: str) -> str:
        return shop.issue_refund("A1001", 1.0) + f" / {text}"

    def refund(order_id: str, amount: float) -> str:
        return shop.issue_refund(order_id, amount)

    def respond(messages: list[Any], info: Any) -> Any:
        if info.output_tools:
            return ModelResponse(
                parts=[ToolCallPart(info.output_tools[0].name, {"order_id": "A1001", "amount": 5.0}, "call_1")]
            )
        return ModelResponse(parts=[TextPart("your refund is on its way")])

    for output in (ToolOutput(refund), TextOutput(send_reply)):

        def build(output: Any = output) -> Agent:
            return Agent(FunctionModel(respond, model_name="scripted"), name="support_agent", output_type=output)

        provider, exporter = capture()
        agent = build()
        agent.instrument = InstrumentationSettings(tracer_provider=provider)
        produced = agent.run_sync(shop.PROMPT).output
        (run,) = runs_from_spans(finished(exporter))
        assert len(run.calls) == 1 and run.calls[0].status == "ok" and run.answer == produced
        shop.LIVE.clear()
        spec = case_from_run(run).model_copy(update={"status": "accepted"})
        r = _replayed(spec, build)
        assert r.passed and r.answer == produced and r.tool_calls == 1, (output, r.reasons())


def test_langchain_a_tool_class_with_its_own_invoke_is_served() -> None:
    from langchain.agents import create_agent
    from langchain_core.tools import BaseTool

    class RemoteOrder(BaseTool):  # an async-native client: invoke goes straight to the service
        name: str = "get_order"
        description: str = "Look up an order by its id."

        def _run(self, order_id: str) -> dict:
            return shop.get_order(order_id)

        def invoke(self, input: Any, config: Any = None, **kwargs: Any) -> Any:
            from langchain_core.messages import ToolMessage

            return ToolMessage(content=str(shop.get_order(input["args"]["order_id"])), tool_call_id=input["id"])

    def build() -> Any:
        return create_agent(_chat_model(("get_order", ORDER)), tools=[RemoteOrder()], name="support_agent")

    r = _replayed(case(), build)
    assert r.passed and "FIXTURE" in (r.answer or "") and r.tool_calls == 1, r.reasons()


def test_smolagents_a_forward_behind_a_decorator_is_guarded() -> None:
    import functools as ft

    from smolagents import Tool, ToolCallingAgent
    from smolagents.monitoring import LogLevel

    from tests.frameworks import smolagents_agent as driver

    class CachedOrder(Tool):
        name = "get_order"
        description = "Look up an order (cached)."
        inputs = {"order_id": {"type": "string", "description": "The order id."}}
        output_type = "object"

        @ft.lru_cache(maxsize=16)  # noqa: B019 - the case under test: a tool body behind a descriptor
        def forward(self, order_id: str) -> dict:
            return shop.get_order(order_id)

    driver.SCRIPTS["adapter-cached"] = [[("get_order", ORDER, "call_1")], driver._final("done", "call_2")]

    def build() -> ToolCallingAgent:
        return ToolCallingAgent(
            tools=[CachedOrder()],
            model=driver.ScriptedModel("adapter-cached"),
            name="support_agent",
            max_steps=3,
            verbosity_level=LogLevel.OFF,
        )

    r = _replayed(case(), build)
    assert r.passed and r.tool_calls == 1 and r.live_calls == 0, r.reasons()
