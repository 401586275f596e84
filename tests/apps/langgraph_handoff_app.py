"""A triage agent that hands refunds over to a refunds agent in one LangGraph graph, as LangChain's
multi-agent docs write handoffs: each agent a ``create_agent`` node, and a handoff tool that returns
``Command(goto=<agent>, graph=Command.PARENT)``. Both agents share one offline scripted chat model,
whose script is production's incident: hand over, then refund an order nobody approved."""

from __future__ import annotations

from typing import Any

from langchain.agents import create_agent
from langchain.tools import ToolRuntime, tool
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import Command
from opentelemetry.sdk.trace import TracerProvider

from tests.frameworks import langchain_agent as driver

from . import shop

PROMPT = "My order A1001 arrived broken, I want my money back."
driver.SCRIPTS["langgraph-handoff"] = [
    [("transfer_to_refunds_agent", {}, "call_h")],
    [("issue_refund", {"order_id": "A1001", "amount": 40.0}, "call_r")],
    "Done.",
]


@tool
def transfer_to_refunds_agent(runtime: ToolRuntime) -> Command:
    """Hand the customer over to the refunds agent."""
    asked = next(m for m in reversed(runtime.state["messages"]) if isinstance(m, AIMessage))
    done = ToolMessage(content="Transferred to refunds_agent", tool_call_id=runtime.tool_call_id)
    return Command(goto="refunds_agent", update={"messages": [asked, done]}, graph=Command.PARENT)


@tool
def issue_refund(order_id: str, amount: float) -> str:
    """Refund an amount on an order."""
    return shop.issue_refund(order_id, amount)


def build() -> Any:
    model = driver.ScriptedChatModel(scenario="langgraph-handoff")
    graph = StateGraph(MessagesState)
    graph.add_node("triage_agent", create_agent(model, tools=[transfer_to_refunds_agent], name="triage_agent"))
    graph.add_node("refunds_agent", create_agent(model, tools=[issue_refund], name="refunds_agent"))
    graph.add_edge(START, "triage_agent")
    return graph.compile(name="support_agent")


def serve(provider: TracerProvider) -> None:
    with driver.instrumented("openinference", provider):
        build().invoke({"messages": [{"role": "user", "content": PROMPT}]})
