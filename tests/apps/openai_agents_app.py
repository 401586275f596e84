"""An OpenAI Agents SDK support agent as the SDK's docs write one: ``@function_tool`` functions on an
``Agent``; the model calls two tools at once. ``build()`` returns the ``Agent``: replay runs it with
``Runner.run``. The model is the drivers' offline scripted one, set on the agent."""

from __future__ import annotations

import asyncio

from agents import Agent, Runner, function_tool
from opentelemetry.sdk.trace import TracerProvider

from tests.frameworks import openai_agents_agent as driver

from . import shop

for _name, _steps in shop.STEPS.items():
    driver.SCRIPTS[f"shop-{_name}"] = _steps


@function_tool
def kb_search(query: str) -> str:
    """Search the support knowledge base and return the best matching article.

    Args:
        query: What to look for.
    """
    return shop.kb_search(query)


@function_tool
def get_order(order_id: str) -> dict:
    """Look up an order by its id.

    Args:
        order_id: The order id, like A1001.
    """
    return shop.get_order(order_id)


@function_tool
def issue_refund(order_id: str, amount: float) -> str:
    """Refund an amount on an order.

    Args:
        order_id: The order to refund.
        amount: How much to refund.
    """
    return shop.issue_refund(order_id, amount)


def build() -> Agent:
    return Agent(name="support_agent", instructions="You are a support agent.",
                 model=driver.ScriptedModel(shop.scenario()), tools=[kb_search, get_order, issue_refund])


def serve(provider: TracerProvider) -> None:
    with driver.instrumented(provider):
        asyncio.run(Runner.run(build(), shop.PROMPT))
