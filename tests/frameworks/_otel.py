"""Tracer providers for the drivers: in-memory capture, optionally deterministic ids."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator


class CountingIds(IdGenerator):
    """Sequential ids, so a recorded trace is byte-identical when regenerated."""

    def __init__(self, seed: int = 1) -> None:
        self._trace = seed << 64
        self._span = seed << 32

    def generate_span_id(self) -> int:
        self._span += 1
        return self._span

    def generate_trace_id(self) -> int:
        self._trace += 1
        return self._trace


def capture(tracer_provider: TracerProvider | None = None, *, deterministic: bool = False):
    """A provider (the caller's, or a fresh one) plus the in-memory exporter attached to it."""
    if tracer_provider is None:
        kwargs = {"id_generator": CountingIds()} if deterministic else {}
        tracer_provider = TracerProvider(resource=Resource({"service.name": "harvester-tests"}), **kwargs)
    exporter = InMemorySpanExporter()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    return tracer_provider, exporter


def finished(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    spans: Sequence[ReadableSpan] = exporter.get_finished_spans()
    exporter.shutdown()  # the caller's provider keeps the processor; stop it from holding more spans
    return list(spans)
