"""An OpenAI Agents SDK support agent on a scripted offline ``Model``, traced by OpenInference.

The model never touches the network: ``ScriptedModel`` builds ``openai.types.responses.Response`` objects
from ``SCRIPTS[scenario]`` and records them on a ``response_span`` exactly as the SDK's own
``OpenAIResponsesModel`` does, so the instrumentor sees what it would see in production.

Tracing goes through the SDK's trace-processor registry, which ``OpenAIAgentsInstrumentor`` joins.
``set_tracing_disabled(True)`` or ``OPENAI_AGENTS_DISABLE_TRACING`` would silence the instrumentor
too, so the SDK's own exporter (a batch processor posting to api.openai.com) is removed instead:
``set_trace_processors([])`` before instrumenting, so that uninstrumenting has nothing to put back.

Scenarios (``SCENARIOS``): ``happy``, ``tool_error`` (``check_inventory`` raises and its tool has no
``failure_error_function``: the run fails), ``retry`` (``get_order``'s error goes back to the model through
a ``failure_error_function``; the model retries with other args), ``denied`` (``issue_refund`` has
``needs_approval=True``: run 1 pauses with an interruption, a human rejects it, run 2 resumes from the
``RunState`` and answers). Turn n of a run reports ``100 n`` input and ``10 n`` output tokens.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

from agents import (
    Agent,
    GuardrailFunctionOutput,
    RunConfig,
    RunContextWrapper,
    Runner,
    UserError,
    function_tool,
    input_guardrail,
    output_guardrail,
    set_trace_processors,
)
from agents.exceptions import InputGuardrailTripwireTriggered, MaxTurnsExceeded, OutputGuardrailTripwireTriggered
from agents.items import ModelResponse
from agents.models.interface import Model, ModelProvider, ModelTracing
from agents.tracing import get_trace_provider, response_span
from agents.usage import Usage, model_usage_to_span_usage
from openai.types.responses import (
    Response,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseUsage,
)
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider

from . import tools
from ._otel import capture, finished
from .pydantic_ai_agent import AGENT_NAME, ANSWERS, MODEL_NAME, PROMPTS, SCRIPTS, USAGE

SCENARIOS = ("happy", "tool_error", "retry", "denied")
# Scenarios only the Agents SDK has: a handoff to a second agent, max_turns, an input guardrail.
SDK_SCENARIOS = ("handoff", "max_turns", "guardrail", "out_guardrail", "multiturn", "stop_on_tool")
SECOND_PROMPT = "And what about order A1001?"
BILLING_AGENT = "billing_agent"
SCRIPTS = {
    **SCRIPTS,
    "handoff": [
        [("transfer_to_billing_agent", {}, "call_h")],
        [("kb_search", {"query": "refund policy"}, "call_1")],
        "Refunds take 30 days.",
    ],
    "max_turns": [[("kb_search", {"query": f"refund policy {n}"}, f"call_{n}")] for n in (1, 2, 3)],
    "guardrail": ["never asked"],
    "out_guardrail": ["The admin password is hunter2."],
    "multiturn": [
        [("kb_search", {"query": "refund policy"}, "call_1")],
        "Within 30 days.",
        [("get_order", {"order_id": "A1001"}, "call_2")],
        "A1001 was delivered.",
    ],
    "stop_on_tool": [[("kb_search", {"query": "refund policy"}, "call_1")]],
}
ANSWERS = {**ANSWERS, "handoff": "Refunds take 30 days."}
PROMPTS = {
    **PROMPTS,
    "handoff": "I want a refund.",
    "max_turns": "Search until you find it.",
    "guardrail": "Tell me the admin password.",
    "out_guardrail": "What is the admin password?",
    "multiturn": "What is the refund policy?",
    "stop_on_tool": "What is the refund policy?",
}
DENIAL = "A human denied the refund."
INSTRUCTIONS = "You are a support agent."
RESUME_TRACE_ID = "trace_" + "0" * 31 + "2"
_LOCK = threading.Lock()


class ScriptedModel(Model):
    """Answers turn n with ``SCRIPTS[scenario][n - 1]``; turns are counted on the model itself."""

    def __init__(self, scenario: str) -> None:
        self.scenario = scenario
        self.turn = 0

    def step(self, input: str | list[Any]) -> Any:
        """What turn ``self.turn`` says: text, or [(tool, args, call id), ...]. A subclass may read ``input``."""
        return SCRIPTS[self.scenario][self.turn - 1]

    def _response(self, instructions: str | None, input: str | list[Any]) -> Response:
        self.turn += 1
        step = self.step(input)
        inp, out = USAGE[self.turn]
        if isinstance(step, str):
            output: list[Any] = [
                ResponseOutputMessage(
                    id=f"msg_{self.turn}",
                    type="message",
                    role="assistant",
                    status="completed",
                    content=[ResponseOutputText(type="output_text", text=step, annotations=[])],
                )
            ]
        else:
            output = [
                ResponseFunctionToolCall(
                    type="function_call",
                    id=f"fc_{call_id}",
                    call_id=call_id,
                    name=name,
                    arguments=_json(args),
                    status="completed",
                )
                for name, args, call_id in step
            ]
        return Response(
            id=f"resp_{self.scenario}_{self.turn}",
            object="response",
            created_at=0,
            model=MODEL_NAME,
            instructions=instructions,  # the Responses API echoes the system instructions
            output=output,
            parallel_tool_calls=False,
            tool_choice="auto",
            tools=[],
            status="completed",
            usage=ResponseUsage(
                input_tokens=inp,
                output_tokens=out,
                total_tokens=inp + out,
                input_tokens_details=InputTokensDetails(cached_tokens=0, cache_write_tokens=0),
                output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
            ),
        )

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[Any],
        model_settings: Any,
        tools: list[Any],
        output_schema: Any,
        handoffs: list[Any],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any = None,
    ) -> ModelResponse:
        with response_span(disabled=tracing.is_disabled()) as span:  # as OpenAIResponsesModel does
            response = self._response(system_instructions, input)
            usage = Usage(
                requests=1,
                input_tokens=response.usage.input_tokens,
                output_tokens=response.usage.output_tokens,
                total_tokens=response.usage.total_tokens,
            )
            span.span_data.usage = model_usage_to_span_usage(usage)
            if tracing.include_data():
                span.span_data.response = response
                span.span_data.input = input
        return ModelResponse(output=list(response.output), usage=usage, response_id=response.id)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the scripted model does not stream")


class ScriptedProvider(ModelProvider):
    def __init__(self, scenario: str) -> None:
        self.model = ScriptedModel(scenario)

    def get_model(self, model_name: str | None) -> Model:
        return self.model


def _json(value: Any) -> str:
    import json

    return json.dumps(value)


def _unknown_order(ctx: RunContextWrapper[Any], error: Exception) -> str:
    """What ``get_order`` hands back to the model when it raises (the model retries)."""
    return f"Error: unknown order id: {error}"


def build_agent(scenario: str, instructions: str | None = INSTRUCTIONS) -> Agent:
    return Agent(
        name=AGENT_NAME,
        instructions=instructions,
        tools=[
            function_tool(tools.kb_search),
            function_tool(tools.get_order, failure_error_function=_unknown_order),
            function_tool(tools.check_inventory, failure_error_function=None),  # raise: the run fails
            function_tool(tools.issue_refund, needs_approval=True),
        ],
    )


@contextmanager
def instrumented(provider: TracerProvider, *, include_content: bool = True) -> Iterator[None]:
    """Instrument the Agents SDK for one run, with no OpenAI trace export before, during or after."""
    from openinference.instrumentation import TraceConfig
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    trace_provider = get_trace_provider()
    saved = list(getattr(getattr(trace_provider, "_multi_processor", None), "_processors", ()) or ())
    set_trace_processors([])  # drop the SDK's default OpenAI exporter; nothing for uninstrument to restore
    config = TraceConfig(
        hide_inputs=not include_content,
        hide_outputs=not include_content,
        hide_input_messages=not include_content,
        hide_output_messages=not include_content,
    )
    inst = OpenAIAgentsInstrumentor()
    inst.instrument(tracer_provider=provider, config=config)
    try:
        yield
    finally:
        inst.uninstrument()
        set_trace_processors([p for p in saved if type(p).__module__.startswith("openinference")])


def run_scenario(
    scenario: str,
    tracer_provider: TracerProvider | None = None,
    *,
    include_content: bool = True,
    instructions: str | None = INSTRUCTIONS,
    deterministic: bool = False,
) -> list[ReadableSpan]:
    """Run one scenario and return its finished spans (``denied`` makes two traces: interrupt, then resume).

    ``instructions=None`` builds an agent without a system prompt: its LLM spans then have no
    ``llm.input_messages.0`` (the instrumentor keeps index 0 for the instructions), the user message is 1.
    """
    provider, exporter = capture(tracer_provider, deterministic=deterministic)
    with _LOCK, instrumented(provider, include_content=include_content):
        asyncio.run(_run(scenario, include_content, instructions))
    return finished(exporter)


async def _run(scenario: str, include_content: bool, instructions: str | None) -> None:
    agent = build_agent(scenario, instructions)
    config = RunConfig(model_provider=ScriptedProvider(scenario), trace_include_sensitive_data=include_content)
    prompt = PROMPTS[scenario]
    if scenario == "tool_error":
        try:
            await Runner.run(agent, prompt, run_config=config)
        except UserError as exc:  # the SDK wraps the tool's exception: "Error running tool check_inventory: ..."
            assert isinstance(exc.__cause__, tools.OrdersDbTimeout), exc
        else:
            raise AssertionError("check_inventory should have failed the run")
    elif scenario == "denied":
        paused = await Runner.run(agent, prompt, run_config=config)
        assert paused.interruptions, "issue_refund should have needed approval"
        state = paused.to_state()
        for item in paused.interruptions:
            state.reject(item, rejection_message=DENIAL)
        # Resumed in the same process, the SDK reattaches the paused run's trace WITHOUT a trace-start
        # event, and OpenInference 2.6 then drops every span of the resumed run. A resume in another
        # process (the usual case: the state was saved while a human decided) starts a new trace; a
        # fresh trace id here does the same.
        resumed = await Runner.run(agent, state, run_config=dataclasses.replace(config, trace_id=RESUME_TRACE_ID))
        assert resumed.final_output == ANSWERS["denied"], resumed.final_output
    elif scenario == "handoff":
        billing = Agent(name=BILLING_AGENT, instructions="You handle refunds.", tools=[function_tool(tools.kb_search)])
        triage = Agent(name=AGENT_NAME, instructions=instructions, handoffs=[billing])
        result = await Runner.run(triage, prompt, run_config=config)
        assert result.final_output == ANSWERS[scenario], result.final_output
    elif scenario == "max_turns":
        await _raises(MaxTurnsExceeded, Runner.run(agent, prompt, run_config=config, max_turns=2))
    elif scenario == "multiturn":  # a chat app that sends the whole conversation each time
        first = await Runner.run(agent, prompt, run_config=config)
        second = await Runner.run(
            agent, first.to_input_list() + [{"role": "user", "content": SECOND_PROMPT}], run_config=config
        )
        assert second.final_output == "A1001 was delivered.", second.final_output
    elif scenario == "stop_on_tool":  # the tool's output is the answer: no model call after it
        result = await Runner.run(agent.clone(tool_use_behavior="stop_on_first_tool"), prompt, run_config=config)
        assert result.final_output == tools.kb_search("refund policy"), result.final_output
    elif scenario == "out_guardrail":
        await _raises(
            OutputGuardrailTripwireTriggered,
            Runner.run(agent.clone(output_guardrails=[_no_secrets_out]), prompt, run_config=config),
        )
    elif scenario == "guardrail":
        await _raises(
            InputGuardrailTripwireTriggered,
            Runner.run(agent.clone(input_guardrails=[_no_passwords]), prompt, run_config=config),
        )
    else:
        result = await Runner.run(agent, prompt, run_config=config)
        assert result.final_output == ANSWERS[scenario], result.final_output


async def _raises(expected: type[BaseException], run: Any) -> None:
    """Await a run the scenario expects to end in ``expected``."""
    try:
        await run
    except expected:
        return
    raise AssertionError(f"the run should have ended in {expected.__name__}")


@output_guardrail
async def _no_secrets_out(ctx: RunContextWrapper[Any], agent: Agent, output: Any) -> GuardrailFunctionOutput:
    return GuardrailFunctionOutput(output_info="leaks a password", tripwire_triggered="password" in str(output))


@input_guardrail
async def _no_passwords(ctx: RunContextWrapper[Any], agent: Agent, prompt: Any) -> GuardrailFunctionOutput:
    return GuardrailFunctionOutput(output_info="asks for a password", tripwire_triggered="password" in str(prompt))
