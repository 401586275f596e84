"""A model call traced twice: pydantic-ai's chat span around an OpenAI instrumentor's span of the same call.

Apps that run ``Traceloop.init()`` or OpenInference's OpenAI instrumentor beside a framework get both.
The run must count the call once (tokens, requests) and never report its requested tool as blocked.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI
from pydantic_ai import Agent
from pydantic_ai.models.instrumented import InstrumentationSettings
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from harvester.conventions import runs_from_spans
from tests.apps import raw_openai_app
from tests.frameworks._otel import capture, finished

# The chat completions the fake OpenAI endpoint answers with, turn by turn.
TURNS: list[dict[str, Any]] = [
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": json.dumps({"city": "Rome"})}}
        ],
    },
    {"role": "assistant", "content": "Rome: 20C"},
]


def _openai_client() -> AsyncOpenAI:
    turn = iter(range(len(TURNS)))

    def answer(request: httpx.Request) -> httpx.Response:
        n = next(turn)
        return httpx.Response(
            200,
            json={
                "id": f"cmpl-{n}",
                "object": "chat.completion",
                "created": 0,
                "model": "gpt-4o-mini",
                "choices": [{"index": 0, "message": TURNS[n], "finish_reason": "tool_calls" if n == 0 else "stop"}],
                "usage": {
                    "prompt_tokens": 100 * (n + 1),
                    "completion_tokens": 10 * (n + 1),
                    "total_tokens": 110 * (n + 1),
                },
            },
        )

    return AsyncOpenAI(
        api_key="sk-test",
        base_url="http://openai.invalid/v1",
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(answer)),
    )


@pytest.mark.slow
@pytest.mark.parametrize("instrumentor", ["openinference", "openllmetry"])
def test_a_model_call_traced_twice_counts_once(instrumentor: str) -> None:
    if instrumentor == "openinference":
        from openinference.instrumentation.openai import OpenAIInstrumentor
    else:
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor
    provider, exporter = capture()
    inst = OpenAIInstrumentor()
    inst.instrument(tracer_provider=provider)
    try:
        model = OpenAIChatModel("gpt-4o-mini", provider=OpenAIProvider(openai_client=_openai_client()))
        agent = Agent(model, name="weather_agent")
        agent.instrument = InstrumentationSettings(tracer_provider=provider)

        @agent.tool_plain
        def lookup(city: str) -> dict[str, Any]:
            """The weather in a city."""
            return {"city": city, "temp": 20}

        agent.run_sync("Weather in Rome?")
    finally:
        inst.uninstrument()
        raw_openai_app.unwrap_leftovers()  # OpenLLMetry's uninstrument leaves its wrappers on the client
    spans = finished(exporter)
    sdk_spans = [s for s in spans if "instrumentation.openai" in s.instrumentation_scope.name]
    assert len(sdk_spans) == 2 and all(s.parent is not None for s in sdk_spans)  # really traced twice
    (run,) = runs_from_spans(spans)
    assert run.trajectory() == ["lookup"] and run.blocked_tools() == [] and not run.failed
    assert len(run.llm_calls) == 2
    assert (run.usage.input_tokens, run.usage.output_tokens) == (300, 30)
    assert run.answer == "Rome: 20C"
