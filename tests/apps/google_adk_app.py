"""A Google ADK support agent as ADK's docs write one: plain functions in an ``LlmAgent``'s ``tools``, run
by a ``Runner`` on an in-memory session; the model calls two tools at once (ADK runs them in parallel
and sums them up in a span of their own). ``build()`` returns the agent: replay runs it with a runner.

The model is ``ScriptedLlm``, a ``BaseLlm`` answering from a script, offline: each step is a text
answer or a list of function calls ``(name, args, id)``, the shop's (``shop.STEPS``) or a test's own.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Iterator
from contextlib import contextmanager
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.adk.telemetry import tracing
from google.genai import types
from openinference.instrumentation.google_adk import GoogleADKInstrumentor
from opentelemetry.sdk.trace import TracerProvider

from . import shop

MODEL = "scripted-gemini"


class ScriptedLlm(BaseLlm):
    """Answers from ``steps``, one per model call; turn n reports ``100 n`` input and ``10 n`` output tokens."""

    steps: list[Any]
    turn: int = 0

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        if self.turn >= len(self.steps):
            raise RuntimeError(f"the scripted model has no step {self.turn + 1}")
        step = self.steps[self.turn]
        self.turn += 1
        if isinstance(step, str):
            parts = [types.Part(text=step)]
        else:
            parts = [types.Part(function_call=types.FunctionCall(name=n, args=a, id=i)) for n, a, i in step]
        yield LlmResponse(
            content=types.Content(role="model", parts=parts),
            usage_metadata=types.GenerateContentResponseUsageMetadata(
                prompt_token_count=100 * self.turn, candidates_token_count=10 * self.turn
            ),
        )


def agent(steps: list[Any], tools: list[Any], instruction: str = shop.INSTRUCTIONS) -> LlmAgent:
    return LlmAgent(
        name="support_agent", model=ScriptedLlm(model=MODEL, steps=steps), instruction=instruction, tools=tools
    )


def build() -> LlmAgent:
    tools = [shop.kb_search_function(), shop.get_order, shop.issue_refund]
    return agent(shop.STEPS[shop.variant()], tools, shop.instructions())


@contextmanager
def instrumented(provider: TracerProvider) -> Iterator[None]:
    """OpenInference's instrumentor on ``provider``, as production turns it on; off again after."""
    instrumentor = GoogleADKInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    # ADK's own spans (invoke_agent, invocation) go to the global provider, which production sets to the
    # one it instruments with (``phoenix.otel.register``); a test's provider is not global
    proxy = tracing.tracer
    adk_own, proxy.__wrapped__ = proxy.__wrapped__, provider.get_tracer("gcp.vertex.agent")
    try:
        yield
    finally:
        proxy.__wrapped__ = adk_own
        instrumentor.uninstrument()


def run(root: LlmAgent, prompt: str) -> None:
    """One request, as ADK's docs run one: a runner, a session, the user's message."""

    async def main() -> None:
        runner = InMemoryRunner(agent=root, app_name="shop")
        session = await runner.session_service.create_session(app_name="shop", user_id="c-17")
        message = types.Content(role="user", parts=[types.Part(text=prompt)])
        async for _ in runner.run_async(user_id="c-17", session_id=session.id, new_message=message):
            pass

    asyncio.run(main())


def serve(provider: TracerProvider) -> None:
    with instrumented(provider):
        run(build(), shop.PROMPT)
