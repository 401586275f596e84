"""A pydantic-ai support agent on an offline ``FunctionModel`` that reads the prompt, for the shadow tests:
production (``build``) and a candidate with a changed system prompt (``build_candidate``) that the
offline model obeys on a known subset of the traffic.

The model: an order id in the prompt -> ``get_order``, then the order's status; anything else ->
``kb_search``, then the article. Under the candidate's prompt ("make it right for the customer") it
also refunds an order the prompt calls damaged (``issue_refund``: newly mutating) and answers a
shipping question in its own words (a changed answer, nothing worse). ``TRAFFIC(n)`` is n prompts of
which every fifth is about a damaged order and every seventh about shipping.
"""

from __future__ import annotations

import json
import re
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.usage import RequestUsage

from . import shop

INSTRUCTIONS = "You are the shop's support agent: answer from the knowledge base and the orders."
CANDIDATE_INSTRUCTIONS = INSTRUCTIONS + " Make it right for the customer."
_ORDER = re.compile(r"\b(A\d{4})\b")


def traffic(n: int) -> list[str]:
    """``n`` prompts: every fifth about a damaged order, every seventh (not fifth) about shipping."""
    out = []
    for i in range(n):
        order = f"A{1001 + i % 2}"
        if i % 5 == 0:
            out.append(f"My order {order} arrived damaged (ticket {i})")
        elif i % 7 == 0:
            out.append(f"How long does shipping take to zone {i}?")
        else:
            out.append(f"What is the status of order {order}? (ticket {i})")
    return out


def changed(prompt: str) -> str | None:
    """How the candidate behaves differently on ``prompt``: "mutating", "answer" or None (the same)."""
    return "mutating" if "damaged" in prompt else "answer" if "shipping" in prompt else None


def _respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    candidate = "Make it right" in (info.instructions or "")
    prompt = next(p.content for p in messages[0].parts if p.part_kind == "user-prompt")  # type: ignore[union-attr]
    assert isinstance(prompt, str)
    returns = [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart)]
    turn = sum(isinstance(m, ModelResponse) for m in messages) + 1
    usage = RequestUsage(input_tokens=50 * turn, output_tokens=10 * turn)
    order = _ORDER.search(prompt)
    if not returns:
        call = ("get_order", {"order_id": order[1]}) if order else ("kb_search", {"query": "shipping"})
        return ModelResponse(parts=[ToolCallPart(*call, tool_call_id="call_1")], usage=usage)
    last = returns[-1]
    if candidate and "damaged" in prompt and last.tool_name == "get_order":
        args = {"order_id": order[1] if order else "", "amount": 40.0}
        return ModelResponse(parts=[ToolCallPart("issue_refund", args, tool_call_id="call_2")], usage=usage)
    if last.tool_name == "issue_refund":
        text = "I refunded the damaged order."
    elif last.tool_name == "get_order":
        content: Any = last.content
        status = (json.loads(content) if isinstance(content, str) else content).get("status", "unknown")
        text = f"Order {order[1] if order else ''} is {status}."
    else:
        text = "Usually three days." if candidate else f"From our help centre: {last.content}"
    return ModelResponse(parts=[TextPart(text)], usage=usage)


def _agent(instructions: str) -> Agent:
    model = FunctionModel(_respond, model_name="scripted-shadow")
    agent = Agent(model, name="pydantic_support", instructions=instructions)
    agent.tool_plain(shop.get_order)
    agent.tool_plain(shop.kb_search)
    agent.tool_plain(shop.issue_refund)
    return agent


def build() -> Agent:
    """Production's agent."""
    return _agent(INSTRUCTIONS)


def build_candidate() -> Agent:
    """The candidate: the changed system prompt."""
    return _agent(CANDIDATE_INSTRUCTIONS)


def serve(provider: TracerProvider, prompt: str) -> None:
    """One production request, traced onto ``provider``."""
    agent = build()
    agent.instrument = InstrumentationSettings(tracer_provider=provider)
    agent.run_sync(prompt)
