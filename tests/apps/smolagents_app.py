"""A smolagents support agent as smolagents' docs write one: ``tool`` functions (with an ``Args``
section) on a ``ToolCallingAgent``; the model calls two tools at once (smolagents runs them in a thread
pool). ``build()`` returns the agent: replay runs it with ``agent.run``."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider
from smolagents import ToolCallingAgent, tool
from smolagents.monitoring import LogLevel

from tests.frameworks import smolagents_agent as driver

from . import shop

for _name, _steps in shop.STEPS.items():  # smolagents answers through its final_answer tool
    driver.SCRIPTS[f"shop-{_name}"] = [*_steps[:-1], driver._final(_steps[-1], "call_9")] if _steps else []


# The shop's functions as smolagents tools (``@tool`` reads their hints and their ``Args`` sections).
get_order, issue_refund = (tool(f) for f in (shop.get_order, shop.issue_refund))


def build() -> ToolCallingAgent:
    return ToolCallingAgent(
        tools=[tool(shop.kb_search_function()), get_order, issue_refund],
        model=driver.ScriptedModel(shop.scenario()),
        instructions=shop.instructions(),
        name="support_agent",
        max_steps=5,
        verbosity_level=LogLevel.OFF,
    )


def serve(provider: TracerProvider) -> None:
    with driver.instrumented(provider):
        build().run(shop.PROMPT)
