"""What the raw SDK loop apps share: OpenInference's tracer for their own loop, the three ways they
dispatch the shop's functions, and production's entry point.

- ``build``: as OpenInference's docs trace it, ``@tracer.tool`` on each function, nothing for harvester;
- ``build_documented``: as docs/own-loop.md asks, ``@harvester.tool`` under ``@tracer.tool``;
- ``build_bare``: the plain functions as they are, no tool span (only the model's spans say what ran).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from openinference.instrumentation import OITracer, TraceConfig
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

import harvester

from . import shop

FUNCTIONS: dict[str, Callable[..., Any]] = {f.__name__: f for f in (shop.kb_search, shop.get_order, shop.issue_refund)}
Tools = dict[str, Callable[..., Any]]
Agent = Callable[[str], Any]
Factory = Callable[..., Agent]
DISPATCH: dict[str, Callable[[OITracer], Tools]] = {
    "build": lambda tracer: {name: tracer.tool(f) for name, f in FUNCTIONS.items()},
    "build_documented": lambda tracer: {name: tracer.tool(harvester.tool(f)) for name, f in FUNCTIONS.items()},
    "build_bare": lambda tracer: dict(FUNCTIONS),
}


def factories(module: str, agent: Callable[[Tools, OITracer], Agent]) -> tuple[Factory, Factory, Factory]:
    """``build``, ``build_documented`` and ``build_bare`` of the app ``module`` whose loop ``agent`` makes."""

    def factory(how: str) -> Factory:
        def build(provider: TracerProvider | None = None) -> Agent:
            tracer = OITracer(trace.get_tracer(module, tracer_provider=provider), TraceConfig())
            return agent(DISPATCH[how](tracer), tracer)

        build.__name__ = build.__qualname__ = how
        return build

    return factory("build"), factory("build_documented"), factory("build_bare")


def serve(provider: TracerProvider, instrumentor: Any, factory: Factory) -> None:
    """One production request: the entry point instruments the client, the agent runs, tracing stops."""
    instrumentor.instrument(tracer_provider=provider)
    try:
        answer = factory(provider)(shop.PROMPT)
        if asyncio.iscoroutine(answer):
            asyncio.run(answer)
    finally:
        instrumentor.uninstrument()
