"""An OpenAI Agents SDK support agent as the SDK's docs write one: ``function_tool`` functions on an
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


# The shop's functions, as the SDK's docs wrap plain functions: name, schema and description from them.
get_order, issue_refund = (function_tool(f) for f in (shop.get_order, shop.issue_refund))


def build() -> Agent:
    return Agent(
        name="support_agent",
        instructions=shop.instructions(),
        model=driver.ScriptedModel(shop.scenario()),
        tools=[function_tool(shop.kb_search_function()), get_order, issue_refund],
    )


def serve(provider: TracerProvider) -> None:
    with driver.instrumented(provider):
        asyncio.run(Runner.run(build(), shop.PROMPT))
