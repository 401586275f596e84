"""An own loop as docs/own-loop.md writes one around a model it calls itself: ``run.model(call, model=...,
system=..., messages=..., tools=...)`` in a loop, the model's tool calls run through ``@harvester.tool``
functions. The model is the shop's script (``shop.variant()``; ``no_model`` raises if it is called).

``HARVESTER_TEST_SYSTEM`` is the system prompt it sends (unset: ``system=None``, none at all) and
``HARVESTER_TEST_MODEL`` the model it asks (unset: ``MODEL``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

from opentelemetry.sdk.trace import TracerProvider

import harvester
from harvester.instrument import ModelAnswer, agent_run

from . import shop

SYSTEM_ENV, MODEL_ENV = "HARVESTER_TEST_SYSTEM", "HARVESTER_TEST_MODEL"
MODEL = "gpt-4.1-mini"
TOOLS = {f.__name__: harvester.tool(f) for f in (shop.kb_search, shop.get_order, shop.issue_refund)}
SCHEMAS = [
    {"name": name, "parameters": {"type": "object", "properties": {arg: {"type": "string"}}}}
    for name, arg in (("kb_search", "query"), ("get_order", "order_id"))
]


def _scripted(steps: Iterator[Any]) -> ModelAnswer:
    step = next(steps, None)
    if step is None:
        raise AssertionError("the model was called: the script has no step for it")
    if isinstance(step, str):
        return ModelAnswer(text=step, input_tokens=100, output_tokens=10)
    calls = [{"id": call_id, "name": name, "arguments": args} for name, args, call_id in step]
    return ModelAnswer(tool_calls=calls, input_tokens=100, output_tokens=10)


def build(provider: TracerProvider | None = None) -> Any:
    def agent(prompt: str) -> str | None:
        steps = iter(shop.STEPS[shop.variant()])
        model = os.environ.get(MODEL_ENV, MODEL)
        with agent_run("support_agent", prompt, model=model, tracer_provider=provider) as run:
            messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
            while True:
                answer = run.model(
                    lambda: _scripted(steps),
                    model=model,
                    system=os.environ.get(SYSTEM_ENV),
                    messages=messages,
                    tools=SCHEMAS,
                )
                if not answer.tool_calls:
                    run.finish(answer.text)
                    return answer.text
                messages.append({"role": "assistant", "content": answer.text, "tool_calls": answer.tool_calls})
                for call in answer.tool_calls:
                    result = TOOLS[call["name"]](**call["arguments"])
                    messages.append({"role": "tool", "tool_call_id": call["id"], "content": json.dumps(result)})

    return agent


def serve(provider: TracerProvider) -> None:
    """One production request, traced onto ``provider``."""
    build(provider)(shop.PROMPT)
