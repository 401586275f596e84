"""An own agent loop traced as OpenInference documents it (an AGENT span around the loop, an LLM span per
model turn, ``@tracer.tool`` on each tool), on the global provider, whose tools are also
``@harvester.tool``s, stacked as ``HARVESTER_TEST_STACKING`` says (``STACKINGS``):

- ``harvester_outer``: ``@harvester.tool`` on top of ``@tracer.tool`` (both record the call);
- ``harvester_inner``: ``@harvester.tool`` underneath ``@tracer.tool``;
- ``outer_no_spans``: on top, with ``spans=False`` (only OpenInference records the call in production);
- ``plain``: on top of a plain ``functools.wraps`` decorator, which ``TRACED`` counts the calls of.
"""

from __future__ import annotations

import functools
import json
import os
from collections import Counter
from collections.abc import Callable
from typing import Any

from openinference.instrumentation import OITracer, TraceConfig, get_llm_attributes
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

import harvester

from . import shop

STACKING_ENV = "HARVESTER_TEST_STACKING"
STACKINGS = ("harvester_outer", "harvester_inner", "outer_no_spans", "plain")
TRACED: Counter[str] = Counter()  # calls the plain decorator saw


def _counted(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A decorator of the app's own (logging, retries...), written with ``functools.wraps``."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        TRACED[fn.__name__] += 1
        return fn(*args, **kwargs)

    return wrapper


def _tools(tracer: OITracer, stacking: str) -> dict[str, Callable[..., Any]]:
    out = {}
    for fn in (shop.kb_search, shop.get_order, shop.issue_refund):
        if stacking == "harvester_outer":
            tool = harvester.tool(tracer.tool(fn))
        elif stacking == "harvester_inner":
            tool = tracer.tool(harvester.tool(fn))
        elif stacking == "outer_no_spans":
            tool = harvester.tool(spans=False)(tracer.tool(fn))
        else:
            tool = harvester.tool(_counted(fn))
        out[fn.__name__] = tool
    return out


def _model_turn(tracer: OITracer, messages: list[dict[str, Any]], step: Any) -> None:
    """One scripted model turn as an LLM span: what it was given and what it answered or asked for."""
    if isinstance(step, str):
        said: dict[str, Any] = {"role": "assistant", "content": step}
    else:
        calls = [{"id": cid, "function": {"name": name, "arguments": json.dumps(args)}} for name, args, cid in step]
        said = {"role": "assistant", "tool_calls": calls}
    attrs = get_llm_attributes(
        model_name="scripted",
        input_messages=list(messages),
        output_messages=[said],
        token_count={"prompt": 100, "completion": 10, "total": 110},
    )
    with tracer.start_as_current_span("chat scripted", openinference_span_kind="llm", attributes=attrs):
        pass
    messages.append(said)


def build() -> Callable[[str], str]:
    tracer = OITracer(trace.get_tracer("shop-own-loop"), config=TraceConfig())
    tools = _tools(tracer, os.environ.get(STACKING_ENV, "harvester_outer"))

    def agent(prompt: str) -> str:
        with tracer.start_as_current_span("support_agent", openinference_span_kind="agent") as span:
            span.set_input(prompt)
            messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
            for step in shop.STEPS[shop.variant()]:
                _model_turn(tracer, messages, step)
                if isinstance(step, str):
                    span.set_output(step)
                    return step
                for name, args, call_id in step:
                    result = tools[name](**args)
                    messages.append({"role": "tool", "tool_call_id": call_id, "content": json.dumps(result)})
            return ""

    return agent


def serve(provider: TracerProvider | None) -> None:
    """One production request, traced onto the global provider."""
    build()(shop.PROMPT)
