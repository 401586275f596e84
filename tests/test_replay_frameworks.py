"""Replay through real frameworks: the same plain functions serve a pydantic-ai agent and a LangChain
agent, the run is read from the frameworks' own spans, and no live tool ever runs."""

from __future__ import annotations

import pytest
from langchain.agents import create_agent
from opentelemetry import trace
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import harvester
from harvester.canonical import fixture_key
from harvester.case import AgentCase
from harvester.replay import replay
from tests.frameworks import langchain_agent
from tests.frameworks import tools as live

# The production tools as they are: no decorator. The adapters route the frameworks' dispatch.
kb_search, get_order, issue_refund = live.kb_search, live.get_order, live.issue_refund
TOOLS = [kb_search, get_order, issue_refund]
CALLS = [("kb_search", {"query": "refund policy"}), ("get_order", {"order_id": "A1001"})]


def case(i: int = 0) -> AgentCase:
    kb, status = f"FIXTURE-{i}: refunds within 30 days", f"fixture-status-{i}"
    return AgentCase.model_validate(
        {
            "id": f"fw-{i}",
            "status": "accepted",
            "prompt": "Can I still return order A1001?",
            "why": "policy answer",
            "required_elements": [kb, status],
            "forbidden_tools": ["issue_refund"],
            "min_steps": 2,
            "appropriate_tools": ["kb_search", "get_order"],
            "checks": [{"check": "answered"}, {"check": "trajectory_is", "tools": ["kb_search", "get_order"]}],
            "fixtures": [
                {"key": fixture_key("kb_search", CALLS[0][1]), "tool": "kb_search", "args": CALLS[0][1], "result": kb},
                {
                    "key": fixture_key("get_order", CALLS[1][1]),
                    "tool": "get_order",
                    "args": CALLS[1][1],
                    "result": {"order_id": "A1001", "status": status},
                },
            ],
            "recorded": {"trajectory": ["kb_search", "get_order"], "stop": "answered"},
        }
    )


# -- pydantic-ai --------------------------------------------------------------------------------
def _respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    returns = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]
    if not returns:
        return ModelResponse(parts=[ToolCallPart(name, args, f"call_{n}") for n, (name, args) in enumerate(CALLS)])
    return ModelResponse(parts=[TextPart(" / ".join(str(p.content) for p in returns))])


def build_pydantic_ai() -> Agent:
    """Returned as is: replay instruments it and reads the run from its spans."""
    return Agent(FunctionModel(_respond, model_name="scripted"), name="support_agent", tools=TOOLS)


# -- LangChain ----------------------------------------------------------------------------------
def build_langchain():
    return create_agent(langchain_agent.ToolsThenEcho(calls=CALLS), tools=TOOLS, name="support_agent")


@pytest.fixture(scope="module")
def openinference():
    """LangChain traced by the stock OpenInference instrumentor, onto the global provider replay watches."""
    replay([], build_langchain)  # installs the SDK provider and the collector
    with langchain_agent.instrumented("openinference", trace.get_tracer_provider()):
        yield


def _assert_replayed(result, i=0):
    assert result.passed, result.reasons()
    assert f"FIXTURE-{i}" in result.answer and f"fixture-status-{i}" in result.answer  # fixture results, not live
    assert result.trajectory == ["kb_search", "get_order"]
    assert result.no_fixture == 0 and result.tool_calls == 2 and result.divergence is None
    assert result.unauthorised == 0
    assert any(c.name == "never_used(issue_refund)" and c.passed for c in result.checks)


def test_pydantic_ai_agent_replays_from_fixtures():
    (r,) = replay([case()], build_pydantic_ai).results
    _assert_replayed(r)


def test_langchain_agent_replays_from_fixtures(openinference):
    (r,) = replay([case()], build_langchain).results
    _assert_replayed(r)


def test_concurrent_framework_cases_never_share_fixtures(openinference):
    cases = [case(i) for i in range(6)]
    for build in (build_pydantic_ai, build_langchain):
        report = replay(cases, build, concurrency=6)
        for i, r in enumerate(report.results):
            _assert_replayed(r, i)


def test_injected_failure_reaches_the_framework():
    c = AgentCase.model_validate(
        {**case().model_dump(by_alias=True), "inject_failures": {"get_order": {"mode": "not_found"}}}
    )
    (r,) = replay([c], build_pydantic_ai).results
    assert not r.passed and "NotFound" in (r.error or "")  # pydantic-ai lets a tool exception end the run


def test_a_recorded_model_retry_is_a_retry_again():
    """pydantic-ai records a tool's ModelRetry as ToolRetryError; replayed as a plain exception it would end
    the run that in production went on: the model must get the retry and call again."""

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        returns = [
            p.content for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)
        ]  # pydantic-ai 2 hands a retry back as a tool return
        if len(returns) == 2:
            return ModelResponse(parts=[TextPart(f"{returns[1]} (after: {returns[0]})")])
        order = "A1001" if returns else "a1001"
        return ModelResponse(parts=[ToolCallPart("get_order", {"order_id": order}, f"call_{len(returns)}")])

    def build() -> Agent:
        return Agent(FunctionModel(respond, model_name="scripted"), name="support_agent", tools=[get_order])

    retry = {"order_id": "a1001"}
    c = AgentCase.model_validate(
        {
            "id": "retry",
            "status": "accepted",
            "prompt": "Where is order a1001?",
            "why": "retry",
            "checks": [{"check": "answered"}],
            "fixtures": [
                {
                    "key": fixture_key("get_order", retry),
                    "tool": "get_order",
                    "args": retry,
                    "error": {"type": "ToolRetryError", "message": "order ids are upper case"},
                },
                {
                    "key": fixture_key("get_order", CALLS[1][1]),
                    "tool": "get_order",
                    "args": CALLS[1][1],
                    "result": "delivered",
                },
            ],
            "recorded": {"trajectory": ["get_order", "get_order"], "stop": "answered"},
        }
    )
    (r,) = replay([c], build).results
    assert r.passed, r.reasons()
    assert r.answer == "delivered (after: order ids are upper case)"  # the model got the retry, then the result


def test_a_recorded_error_the_agent_caught_is_caught_again():
    @harvester.tool
    def lookup(order_id: str) -> str:
        """Look an order up (raises TimeoutError in production, once)."""
        raise AssertionError("never runs in replay")

    def build():
        def agent(prompt: str) -> str:
            with harvester.agent_run("support_agent", prompt) as run:
                run.model_call("m", tool_calls=[{"name": "lookup", "arguments": {"order_id": "A1"}}])
                try:
                    answer = lookup(order_id="A1")
                except TimeoutError:  # the app's own handling, as in production
                    answer = "The order service is slow, please try again later."
                run.finish(answer)
                return answer

        return agent

    args = {"order_id": "A1"}
    c = AgentCase.model_validate(
        {
            "id": "timeout",
            "status": "accepted",
            "prompt": "Where is A1?",
            "why": "timeout handled",
            "checks": [{"check": "answered"}, {"check": "contains", "needles": ["try again later"]}],
            "fixtures": [
                {
                    "key": fixture_key("lookup", args),
                    "tool": "lookup",
                    "args": args,
                    "error": {"type": "TimeoutError", "message": "upstream timed out"},
                }
            ],
            "recorded": {"trajectory": ["lookup"], "stop": "answered"},
        }
    )
    (r,) = replay([c], build).results
    assert r.passed, r.reasons()
