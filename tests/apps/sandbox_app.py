"""A pydantic-ai agent whose tools call HTTP services, as a team that keeps a sandbox writes one: the
service each tool reaches comes from the environment (``ORDERS_URL``, ``INVENTORY_URL``), so a nightly
job points a tool at the sandbox by its environment alone. The model (a scripted ``FunctionModel``)
looks the order up, checks the stock, and answers.

``get_order`` adds the stock of the order's SKU when the orders service names one: its body then
reaches the inventory service too (a helper it shares with ``check_stock``).
"""

from __future__ import annotations

import os
from typing import Any

import httpx
from opentelemetry.sdk.trace import TracerProvider
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings

ORDERS_ENV, INVENTORY_ENV = "ORDERS_URL", "INVENTORY_URL"
PROMPT = "Where is order A1001, and is its item in stock?"
ANSWER = "Order A1001 is on its way, and its item is in stock."
SCRIPT: list[Any] = [
    ("get_order", {"order_id": "A1001"}),
    ("check_stock", {"sku": "SKU-1"}),
    ANSWER,
]


def _get(env: str, path: str) -> Any:
    return httpx.get(f"{os.environ[env]}{path}", timeout=5).json()


def _stock(sku: str) -> Any:
    return _get(INVENTORY_ENV, f"/stock/{sku}")


def get_order(order_id: str) -> dict:
    """Look an order up in the orders service."""
    order = _get(ORDERS_ENV, f"/orders/{order_id}")
    if "sku" in order:
        order["stock"] = _stock(order["sku"])
    return order


def check_stock(sku: str) -> dict:
    """How many of an item the inventory service holds."""
    return _stock(sku)


def _respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    step = SCRIPT[sum(isinstance(m, ModelResponse) for m in messages)]
    if isinstance(step, str):
        return ModelResponse(parts=[TextPart(step)], model_name="scripted-sandbox-model")
    name, args = step
    return ModelResponse(parts=[ToolCallPart(name, args, f"call_{name}")], model_name="scripted-sandbox-model")


def build() -> Agent:
    return Agent(FunctionModel(_respond), name="orders_agent", tools=[get_order, check_stock])


def serve(provider: TracerProvider) -> None:
    """One production request, traced onto ``provider``."""
    agent = build()
    agent.instrument = InstrumentationSettings(tracer_provider=provider)
    agent.run_sync(PROMPT)
