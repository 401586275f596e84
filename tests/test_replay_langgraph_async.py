"""A LangGraph graph with async nodes, written as LangGraph's docs write async apps, through the whole loop:
production capture (``ainvoke``, OpenInference), harvest, accept, replay. The graph has no sync function,
so replay must await it on the case's own event loop; its ``ToolNode`` runs a turn's two ``@tool async def``
calls concurrently, and each one is served from the fixtures (``shop.LIVE`` counts every real tool run).
Sync graphs keep being invoked as they are."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import orjson
import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, wrap_model_call, wrap_tool_call
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableLambda
from langchain_core.tools import BaseTool, StructuredTool, tool
from langgraph.func import entrypoint
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode

from harvester.canonical import fixture_key
from harvester.case import AgentCase
from harvester.conventions._frameworks.langchain import async_only
from harvester.replay import replay
from harvester.report import Report
from tests.apps import langgraph_async_app as app
from tests.apps import shop
from tests.builders.project import capture_production, cli, enter_project
from tests.frameworks.langchain_agent import ToolsThenEcho

AGENT = "tests.apps.langgraph_async_app:build"


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return enter_project(tmp_path, monkeypatch, "baseline")


def harvest_and_accept() -> str:
    out = cli("harvest", "--json")
    assert out.exit_code == 0, out.output
    (case_id,) = orjson.loads(out.output)["new_ids"]
    assert cli("accept", case_id).exit_code == 0
    return case_id


def replayed(variant: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, Any, Report]:
    monkeypatch.setenv(shop.VARIANT_ENV, variant)
    out = cli("replay", "--agent", AGENT, "--report", f"{variant}.json")
    report = Report.load(f"{variant}.json")
    assert not shop.LIVE, f"a replay ran live tools: {dict(shop.LIVE)}"
    (r,) = report.results
    assert r.live_calls == 0 and (r.error is None or "synchronous" not in r.error), r.error
    return out.exit_code, r, report


def failed(r: Any, check: str) -> str:
    """The details of the failed checks named ``check`` (a check's name goes on with its parameters)."""
    return " ".join(c.detail or "" for c in r.checks if c.passed is False and c.name.split("(")[0] == check)


@pytest.mark.slow
def test_an_async_graph_replays_through_ainvoke_and_every_regression_is_red(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(TypeError, match="No synchronous function provided"):
        app.build().invoke({"messages": [{"role": "user", "content": shop.PROMPT}]})
    run = capture_production(app, project / "traces.db")
    assert shop.LIVE, "production ran the real tools"
    shop.LIVE.clear()
    assert sorted(run.trajectory()) == ["get_order", "kb_search"]  # one turn, two calls gathered
    harvest_and_accept()

    code, r, _ = replayed("baseline", monkeypatch)
    assert code == 0 and r.passed, r.reasons()
    assert sorted(r.trajectory) == ["get_order", "kb_search"] and r.tool_calls == 2 and r.no_fixture == 0

    code, r, _ = replayed("skipped", monkeypatch)
    assert code == 1 and not r.passed and r.trajectory == ["kb_search"]
    assert "missing get_order" in failed(r, "trajectory_match") and "skipped get_order" in failed(r, "min_steps")

    code, r, _ = replayed("new_args", monkeypatch)
    assert code == 1 and not r.passed and r.no_fixture == 1 and failed(r, "recorded_calls_only")
    (call,) = r.no_fixture_calls
    assert call.tool == "get_order" and call.args == {"order_id": "A1002"} and call.closest == {"order_id": "A1001"}

    code, r, report = replayed("mutating", monkeypatch)
    assert code == 1 and not r.passed and r.unauthorised == 1
    assert report.metrics()["unauthorised_actions"] == 1 and "issue_refund" in failed(r, "never_used")

    assert cli("harvest").exit_code == 0  # the replays were never stored: nothing new to propose
    assert not list((project / "cases" / "pending").glob("*.json"))


# -- what is async only ----------------------------------------------------------------------------------
async def _anode(state: MessagesState) -> dict[str, Any]:
    return {"messages": [AIMessage(content="done")]}


def _node(state: MessagesState) -> dict[str, Any]:
    return {"messages": [AIMessage(content="done")]}


def _graph(node: Any, *, route: Any = None, tools: Any = None) -> Any:
    graph = StateGraph(MessagesState)
    graph.add_node("node", node)
    graph.add_edge(START, "node")
    if tools is not None:
        graph.add_node("tools", ToolNode(tools))
        graph.add_edge("tools", END)
    if route is not None:
        graph.add_conditional_edges("node", route, ["tools", END] if tools is not None else [END])
    elif tools is None:
        graph.add_edge("node", END)
    return graph.compile()


async def _aroute(state: MessagesState) -> str:
    return END


@tool
def _sync_tool(query: str) -> str:
    """A sync tool."""
    return query


@tool
async def _async_tool(query: str) -> str:
    """An async-only tool."""
    return query


@entrypoint()
async def _async_entrypoint(messages: Any) -> Any:
    return messages


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        (lambda: _graph(_node), False),
        (lambda: _graph(_node, route=lambda s: END, tools=[_sync_tool]), False),
        (lambda: app.build(), True),
        (lambda: _graph(_anode), True),
        (lambda: _graph(RunnableLambda(_anode)), True),  # a RunnableLambda of a coroutine: only an afunc
        (lambda: _graph(_node, route=_aroute), True),  # an async router on a sync node
        (lambda: _graph(_node, route=lambda s: END, tools=[_async_tool]), True),  # a tool with only a coroutine
        (lambda: _graph(_graph(_anode)), True),  # a subgraph with an async node
        (lambda: _async_entrypoint, True),  # the functional API
    ],
    ids=["sync", "sync-tools", "app", "async-node", "async-lambda", "async-router", "async-tool", "subgraph", "entry"],
)
def test_what_is_async_only(graph: Any, expected: bool) -> None:
    assert async_only(graph()) is expected


@wrap_model_call
async def _alog_model(request: Any, handler: Any) -> Any:
    return await handler(request)


@wrap_model_call
def _log_model(request: Any, handler: Any) -> Any:
    return handler(request)


@wrap_tool_call
async def _alog_tool(request: Any, handler: Any) -> Any:
    return await handler(request)


class _Retry(AgentMiddleware):
    """LangChain's class form of a middleware, with only the async hook."""

    async def awrap_model_call(self, request: Any, handler: Any) -> Any:
        return await handler(request)


def _agent(*middleware: Any) -> Any:
    return create_agent(ToolsThenEcho(calls=[("_sync_tool", {"query": "q"})]), [_sync_tool], middleware=middleware)


@pytest.mark.parametrize(
    ("middleware", "expected"),
    [((), False), ((_log_model,), False), ((_alog_model,), True), ((_alog_tool,), True), ((_Retry(),), True)],
    ids=["none", "sync-wrap-model", "async-wrap-model", "async-wrap-tool", "async-class"],
)
def test_a_create_agent_with_an_async_only_middleware_is_async_only(middleware: Any, expected: bool) -> None:
    """``create_agent`` wraps the model node's call in each middleware's hook: one with only the async
    form makes ``invoke`` raise ``NotImplementedError`` there, hidden in the node's closures."""
    assert async_only(_agent(*middleware)) is expected


def test_a_create_agent_with_an_async_only_middleware_replays_through_ainvoke() -> None:
    seen: list[str] = []

    @wrap_model_call
    async def remember(request: Any, handler: Any) -> Any:
        seen.append("model")
        return await handler(request)

    args = {"query": "refund policy"}
    spec = _case(
        fixtures=[{"key": fixture_key("_sync_tool", args), "tool": "_sync_tool", "args": args, "result": "FIXTURE"}],
        checks=[{"check": "contains", "needles": ["FIXTURE"]}],
        recorded={"trajectory": ["_sync_tool"]},
    )
    model = ToolsThenEcho(calls=[("_sync_tool", args)])
    (r,) = replay([spec], lambda: create_agent(model, [_sync_tool], middleware=[remember])).results
    assert r.passed and r.error is None and r.live_calls == 0, (r.error, r.reasons())
    assert seen == ["model", "model"]


def _case(**fields: Any) -> AgentCase:
    return AgentCase.model_validate(
        {"id": "graph", "status": "accepted", "prompt": "And can you refund it?", "why": "w"} | fields
    )


def test_a_sync_graph_is_still_invoked_on_the_trial_thread() -> None:
    threads: list[str] = []

    def node(state: MessagesState) -> dict[str, Any]:
        threads.append(threading.current_thread().name)  # ainvoke would run it in a worker thread
        return {"messages": [AIMessage(content="done")]}

    (r,) = replay([_case(checks=[{"check": "answered"}])], lambda: _graph(node)).results
    assert r.passed, r.reasons()
    assert threads == ["harvester-graph"]


def test_an_async_graph_is_given_the_case_history() -> None:
    async def echo(state: MessagesState) -> dict[str, Any]:
        said = [str(m.content) for m in state["messages"] if m.type == "human"]
        return {"messages": [AIMessage(content=" | ".join(said))]}

    history = [{"role": "user", "content": "Where is order A1001?"}, {"role": "assistant", "content": "Shipped."}]
    spec = _case(history=history, checks=[{"check": "contains", "needles": ["Where is order A1001? | And can"]}])
    (r,) = replay([spec], lambda: _graph(echo)).results
    assert r.passed and r.answer == "Where is order A1001? | And can you refund it?", r.reasons()


class OrderLookup(BaseTool):
    """A tool class with only an async body, as a client library with no sync API makes one."""

    name: str = "get_order"
    description: str = "Look up an order by its id."

    def _run(self, order_id: str) -> dict:
        raise NotImplementedError("async only")

    async def _arun(self, order_id: str) -> dict:
        return shop.get_order(order_id)


async def _kb_search(query: str) -> str:
    return shop.kb_search(query)


def test_async_tool_classes_and_coroutine_tools_are_served_in_a_parallel_turn() -> None:
    """Two calls in one message: ``ToolNode`` gathers them as tasks, each served with its case's executor,
    with cases in flight at once, each awaited on its own event loop."""
    calls = [("get_order", {"order_id": "A1001"}), ("kb_search", {"query": "refund policy"})]
    kb_search = StructuredTool.from_function(coroutine=_kb_search, name="kb_search", description="Search the kb.")

    def build() -> Any:
        return app.graph(ToolsThenEcho(calls=calls), [OrderLookup(), kb_search])

    def case(i: int) -> AgentCase:
        fixtures = [
            {"key": fixture_key(name, args), "tool": name, "args": args, "result": f"FIXTURE-{i}-{name}"}
            for name, args in calls
        ]
        recorded = {"trajectory": [n for n, _ in calls]}
        return _case(id=f"graph-{i}", fixtures=fixtures, checks=[{"check": "answered"}], recorded=recorded)

    shop.LIVE.clear()
    report = replay([case(i) for i in range(4)], build, concurrency=4)
    assert not shop.LIVE, f"a replay ran live tools: {dict(shop.LIVE)}"
    for i, r in enumerate(report.results):
        assert r.passed and r.live_calls == 0 and r.no_fixture == 0, r.reasons()
        assert sorted(r.trajectory) == ["get_order", "kb_search"]
        assert r.answer == f"FIXTURE-{i}-get_order / FIXTURE-{i}-kb_search"
