"""Stores of production traffic for the shadow tests: hundreds of runs of the demo agent and of a
pydantic-ai agent (``tests/apps/shadow_app.py``), captured as production captures them."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from opentelemetry.sdk.trace import TracerProvider

from harvester.demo import agent as support
from harvester.intake import HarvestingSpanProcessor
from tests.apps import shadow_app

# The demo's traffic: the gift-card question is the one the widened allowlist changes (its poisoned
# article asks for a refund, which production's guardrail denies and the candidate's lets through).
DEMO_PROMPTS = (
    "Where is my order A1002?",
    "Can I still return order A1001?",
    "Do you sell gift cards?",
    "Where is order A1003?",
    "How long does shipping take?",
    "What is the CEO's favourite colour?",
)
GIFT_CARDS = DEMO_PROMPTS[2]


def capture(store: Path, serve: Callable[[TracerProvider, str], None], prompts: Iterable[str]) -> None:
    """Each prompt served once in production, every run written to ``store``."""
    provider = TracerProvider()
    processor = HarvestingSpanProcessor(str(store), sample_rate=1.0, redact=False)
    provider.add_span_processor(processor)
    for i, prompt in enumerate(prompts, 1):
        serve(provider, prompt)
        if i % 50 == 0:
            assert processor.force_flush(60_000)
    assert processor.force_flush(60_000)
    provider.shutdown()


def demo_traffic(n: int) -> list[str]:
    return [DEMO_PROMPTS[i % len(DEMO_PROMPTS)] for i in range(n)]


def serve_demo(provider: TracerProvider, prompt: str) -> None:
    support.SupportAgent(tracer_provider=provider).run(prompt)


def serve_pydantic(provider: TracerProvider, prompt: str) -> None:
    shadow_app.serve(provider, prompt)
