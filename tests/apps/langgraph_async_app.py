"""A LangGraph support agent as LangGraph's docs write an async one: a ``StateGraph`` whose model node is
an ``async def`` awaiting the chat model's ``ainvoke``, an async router, ``@tool async def`` tools and a
``ToolNode``, which runs one turn's two tool calls concurrently (``asyncio.gather``). Production awaits
``graph.ainvoke``; ``invoke`` fails ("No synchronous function provided"). ``build()`` returns the compiled
graph: replay has to await it.

Besides the shop's variants, ``skipped`` answers after the policy lookup alone (it skips the order)."""

from __future__ import annotations

import asyncio
from typing import Any

from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from opentelemetry.sdk.trace import TracerProvider

from tests.frameworks import langchain_agent as driver

from . import shop

STEPS = {**shop.STEPS, "skipped": [[shop.STEPS["baseline"][0][0]], shop.ANSWER]}
for _name, _steps in STEPS.items():
    driver.SCRIPTS[f"shop-{_name}"] = _steps


@tool
async def kb_search(query: str) -> str:
    """Search the support knowledge base and return the best matching article."""
    await asyncio.sleep(0)
    return shop.kb_search(query)


@tool
async def get_order(order_id: str) -> dict:
    """Look up an order by its id."""
    await asyncio.sleep(0)
    return shop.get_order(order_id)


@tool
async def issue_refund(order_id: str, amount: float) -> str:
    """Refund an amount on an order."""
    await asyncio.sleep(0)
    return shop.issue_refund(order_id, amount)


TOOLS = [kb_search, get_order, issue_refund]


def graph(model: Any, tools: list[Any]) -> Any:
    """The graph around a chat model (its tools bound) and its tools."""

    async def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    async def route(state: MessagesState) -> str:
        return "tools" if state["messages"][-1].tool_calls else END

    builder = StateGraph(MessagesState)
    builder.add_node("model", call_model)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", route, ["tools", END])
    builder.add_edge("tools", "model")
    return builder.compile(name="support_agent")


def build() -> Any:
    return graph(driver.ScriptedChatModel(scenario=shop.scenario()).bind_tools(TOOLS), TOOLS)


def serve(provider: TracerProvider) -> None:
    with driver.instrumented("openinference", provider):
        asyncio.run(build().ainvoke({"messages": [{"role": "user", "content": shop.PROMPT}]}))
