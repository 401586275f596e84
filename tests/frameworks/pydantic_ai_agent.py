"""A pydantic-ai support agent on a scripted ``FunctionModel``, with pydantic-ai's native GenAI instrumentation.

Scenarios (``SCENARIOS``): ``happy`` (two tools, answered), ``tool_error`` (a tool raises: the run fails),
``retry`` (a tool error goes back to the model as ``ModelRetry``, the model retries with other args),
``denied`` (``issue_refund`` requires approval: run 1 pauses with deferred requests, run 2 resumes with
the call denied and answers). Every model turn reports fixed token counts (``USAGE``).
"""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults, ModelRetry, ToolDenied
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.usage import RequestUsage

from . import tools
from ._otel import capture, finished

SCENARIOS = ("happy", "tool_error", "retry", "denied")
MODEL_NAME = "scripted-support-model"
AGENT_NAME = "support_agent"
PROMPTS = {
    "happy": "Can I still return order A1001?",
    "tool_error": "Is SKU-1 in stock?",
    "retry": "What is the status of order A1001?",
    "denied": "Refund order A1001 please",
}
ANSWERS = {
    "happy": "Yes, order A1001 can be returned: refunds are accepted within 30 days of delivery.",
    "retry": "Order A1001 was delivered.",
    "denied": "I cannot refund order A1001 without approval.",
}
# Turn n (1-based) of a run reports input_tokens = 100 * n, output_tokens = 10 * n.
USAGE = {n: (100 * n, 10 * n) for n in range(1, 10)}

# The tool calls each scripted turn emits (None = answer with text).
SCRIPTS: dict[str, list[Any]] = {
    "happy": [
        [("kb_search", {"query": "refund policy"}, "call_1"), ("get_order", {"order_id": "A1001"}, "call_2")],
        ANSWERS["happy"],
    ],
    "tool_error": [[("check_inventory", {"sku": "SKU-1"}, "call_1")]],
    "retry": [
        [("get_order", {"order_id": "B2002"}, "call_1")],
        [("get_order", {"order_id": "A1001"}, "call_2")],
        ANSWERS["retry"],
    ],
    "denied": [[("issue_refund", {"order_id": "A1001", "amount": 40.0}, "call_1")], ANSWERS["denied"]],
}


def _scripted(scenario: str) -> FunctionModel:
    script = SCRIPTS[scenario]

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = sum(isinstance(m, ModelResponse) for m in messages) + 1
        step = script[turn - 1]
        parts: list[Any] = (
            [TextPart(step)]
            if isinstance(step, str)
            else [ToolCallPart(name, args, call_id) for name, args, call_id in step]
        )
        inp, out = USAGE[turn]
        return ModelResponse(parts=parts, usage=RequestUsage(input_tokens=inp, output_tokens=out))

    return FunctionModel(respond, model_name=MODEL_NAME)


def get_order(order_id: str) -> dict:
    """Look up an order by its id."""
    try:
        return tools.get_order(order_id)
    except KeyError as exc:
        raise ModelRetry(f"unknown order id {order_id}: {exc}") from None


def build_agent(scenario: str, instrument: InstrumentationSettings) -> Agent:
    agent = Agent(_scripted(scenario), name=AGENT_NAME, output_type=[str, DeferredToolRequests])
    agent.instrument = instrument
    agent.tool_plain(tools.kb_search)
    agent.tool_plain(get_order)
    agent.tool_plain(tools.check_inventory)
    agent.tool_plain(requires_approval=True)(tools.issue_refund)
    return agent


def run_scenario(
    scenario: str,
    tracer_provider: TracerProvider | None = None,
    *,
    version: int = 5,
    include_content: bool = True,
    deterministic: bool = False,
) -> list[ReadableSpan]:
    """Run one scenario and return its finished spans (``denied`` makes two traces: pause, then resume)."""
    provider, exporter = capture(tracer_provider, deterministic=deterministic)
    agent = build_agent(
        scenario, InstrumentationSettings(tracer_provider=provider, version=version, include_content=include_content)
    )
    prompt = PROMPTS[scenario]
    if scenario == "tool_error":
        try:
            agent.run_sync(prompt)
        except tools.OrdersDbTimeout:
            pass
        else:
            raise AssertionError("check_inventory should have failed the run")
    elif scenario == "denied":
        paused = agent.run_sync(prompt)
        assert isinstance(paused.output, DeferredToolRequests)
        denial = DeferredToolResults(
            approvals={c.tool_call_id: ToolDenied("A human denied the refund.") for c in paused.output.approvals}
        )
        agent.run_sync(message_history=paused.all_messages(), deferred_tool_results=denial)
    else:
        agent.run_sync(prompt)
    return finished(exporter)
