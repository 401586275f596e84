"""A triage agent that hands refunds over to a refunds agent, as the OpenAI Agents SDK's docs write
handoffs (``Agent(handoffs=[refunds_agent])``: the model calls ``transfer_to_refunds_agent``). Both
agents share one offline scripted model; ``build()`` returns the triage agent, which replay runs with
``Runner.run``.

``HARVESTER_TEST_VARIANT`` picks the script: ``incident`` (production: triage reads the policy, hands
over, and the refunds agent refunds an order nobody approved), ``no_handoff`` (the fix: triage answers
itself), ``refuses`` (another fix: it hands over, and the refunds agent declines), ``lazy`` (answers
without reading the policy).
"""

from __future__ import annotations

import asyncio
import os

from agents import Agent, Runner, function_tool
from opentelemetry.sdk.trace import TracerProvider

from tests.frameworks import openai_agents_agent as driver

from . import shop

PROMPT = "My order A1001 arrived broken, I want my money back."
HANDOFF = "transfer_to_refunds_agent"
DECLINED = "Refunds need a human's approval: I have passed your request on."
_POLICY = ("kb_search", {"query": "refund policy"}, "call_1")
_TRANSFER = (HANDOFF, {}, "call_h")
STEPS = {
    "incident": [[_POLICY], [_TRANSFER], [("issue_refund", {"order_id": "A1001", "amount": 40.0}, "call_r")], "Done."],
    "no_handoff": [[_POLICY], DECLINED],
    "refuses": [[_POLICY], [_TRANSFER], DECLINED],
    "lazy": [DECLINED],
}
for _name, _steps in STEPS.items():
    driver.SCRIPTS[f"handoff-{_name}"] = _steps

kb_search, issue_refund = function_tool(shop.kb_search), function_tool(shop.issue_refund)


def build() -> Agent:
    model = driver.ScriptedModel(f"handoff-{os.environ.get(shop.VARIANT_ENV, 'incident')}")
    refunds = Agent(name="refunds_agent", instructions="You issue refunds.", model=model, tools=[issue_refund])
    return Agent(
        name="triage_agent",
        instructions="You help customers; refunds go to the refunds agent.",
        model=model,
        tools=[kb_search],
        handoffs=[refunds],
    )


def serve(provider: TracerProvider) -> None:
    with driver.instrumented(provider):
        asyncio.run(Runner.run(build(), PROMPT))
