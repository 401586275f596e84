"""A pydantic-ai support agent as pydantic-ai's docs write one: plain functions in ``tools=[...]``, a
``@agent.tool`` taking ``RunContext`` with deps, a ``@agent.tool_plain``; the model calls two tools at
once. ``build()`` returns the ``Agent`` itself: replay instruments and runs it."""

from __future__ import annotations

from dataclasses import dataclass

from opentelemetry.sdk.trace import TracerProvider
from pydantic_ai import Agent, RunContext
from pydantic_ai.models.instrumented import InstrumentationSettings

from tests.frameworks import pydantic_ai_agent as driver

from . import shop

for _name, _steps in shop.STEPS.items():
    driver.SCRIPTS[f"shop-{_name}"] = _steps


@dataclass
class Deps:
    """What a request brings: the customer asking."""

    customer: str


def build() -> Agent:
    agent = Agent(
        driver._scripted(shop.scenario()),
        name="support_agent",
        instructions=shop.instructions(),
        deps_type=Deps,
        tools=[shop.kb_search_function()],
    )

    @agent.tool
    def get_order(ctx: RunContext[Deps], order_id: str) -> dict:
        """Look up one of the customer's orders by its id."""
        return {**shop.get_order(order_id), "customer": ctx.deps.customer}

    @agent.tool_plain
    def issue_refund(order_id: str, amount: float) -> str:
        """Refund an amount on an order."""
        return shop.issue_refund(order_id, amount)

    return agent


def serve(provider: TracerProvider) -> None:
    """One production request, traced onto ``provider``."""
    agent = build()
    agent.instrument = InstrumentationSettings(tracer_provider=provider)
    agent.run_sync(shop.PROMPT, deps=Deps(customer="c-17"))
