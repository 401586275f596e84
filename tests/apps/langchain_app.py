"""A LangChain 1.x support agent as LangChain's docs write one: ``@tool`` functions (one with an injected
``ToolRuntime``) in ``create_agent``; the model calls two tools at once (``ToolNode`` runs them in
threads). ``build()`` returns the compiled graph: replay invokes it with the prompt as messages."""

from __future__ import annotations

from langchain.agents import create_agent
from langchain.tools import ToolRuntime, tool
from opentelemetry.sdk.trace import TracerProvider

from tests.frameworks import langchain_agent as driver

from . import shop

for _name, _steps in shop.STEPS.items():
    driver.SCRIPTS[f"shop-{_name}"] = _steps


@tool
def kb_search(query: str) -> str:
    """Search the support knowledge base and return the best matching article."""
    return shop.kb_search(query)


@tool("kb_search")
def kb_search_renamed(text: str) -> str:
    """Search the support knowledge base and return the best matching article."""
    return shop.kb_search(text)


@tool
def get_order(order_id: str, runtime: ToolRuntime) -> dict:
    """Look up an order by its id."""
    return {**shop.get_order(order_id), "thread": (runtime.config.get("configurable") or {}).get("thread_id")}


@tool
def issue_refund(order_id: str, amount: float) -> str:
    """Refund an amount on an order."""
    return shop.issue_refund(order_id, amount)


def build():
    return create_agent(
        driver.ScriptedChatModel(scenario=shop.scenario()),
        tools=[kb_search_renamed if shop.change() == "schema" else kb_search, get_order, issue_refund],
        system_prompt=shop.instructions(),
        name="support_agent",
    )


def serve(provider: TracerProvider) -> None:
    with driver.instrumented("openinference", provider):
        build().invoke({"messages": [{"role": "user", "content": shop.PROMPT}]})
