"""A capturing processor on a private provider (or the global one), a GenAI-semconv agent run to emit through
it, and the environment production records model content in."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry import trace as otel
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from harvester.intake import HarvestingSpanProcessor
from harvester.model import Run
from harvester.store import TraceStore


@contextmanager
def production_environment() -> Iterator[None]:
    """What production sets for OpenTelemetry's OpenAI instrumentor to record content on its spans, as its
    docs say; replay runs without it (a CI job does not have production's environment). The semantic
    conventions' opt-in is read once per process, by the first instrumentor turned on: production is a
    process of its own, and so is the replay after it (opentelemetry-util-genai before 1.0 reads it)."""
    from opentelemetry.instrumentation._semconv import _OpenTelemetrySemanticConventionStability as stability

    with pytest.MonkeyPatch.context() as env:
        env.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
        env.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
        env.setattr(stability, "_initialized", False)
        yield
    stability._initialized = False


def in_memory() -> tuple[TracerProvider, InMemorySpanExporter]:
    """A private provider whose finished spans a test reads from the exporter."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def setup(tmp_path: Path, **kw: Any) -> tuple[HarvestingSpanProcessor, Any, str]:
    path = str(tmp_path / "t.db")
    proc = HarvestingSpanProcessor(path, **kw)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(proc)
    return proc, provider.get_tracer("test"), path


def agent_run(
    tracer: Any,
    *,
    prompt: str = "Can I return order A1001?",
    result: Any = "Refunds within 30 days.",
    args: str = '{"query": "refund policy"}',
    answer: str = "Yes.",
    tool_error: Exception | None = None,
    kind: str = "genai",
    context: Any = None,
    extra: dict[str, Any] | None = None,
) -> str:
    """A GenAI-semconv agent run: agent span > chat (tool call) > tool > chat (answer)."""
    attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support", **(extra or {})}
    if kind == "openllmetry_nested":
        outer = tracer.start_span("invoke_agent support", context=context, attributes=attrs)
        ctx = otel.set_span_in_context(outer)
        agent = tracer.start_span("support.workflow", context=ctx, attributes={"traceloop.span.kind": "workflow"})
    else:
        outer = None
        agent = tracer.start_span("invoke_agent support", context=context, attributes=attrs)
    ctx = otel.set_span_in_context(agent)
    user = [{"role": "user", "parts": [{"type": "text", "content": prompt}]}]
    with tracer.start_as_current_span(
        "chat m",
        context=ctx,
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "m",
            "gen_ai.usage.input_tokens": 10,
            "gen_ai.input.messages": orjson.dumps(user).decode(),
            "gen_ai.output.messages": orjson.dumps(
                [
                    {
                        "role": "assistant",
                        "parts": [
                            {
                                "type": "tool_call",
                                "id": "c1",
                                "name": "kb_search",
                                "arguments": {"query": "refund policy"},
                            }
                        ],
                    }
                ]
            ).decode(),
        },
    ):
        pass
    tool = tracer.start_span(
        "execute_tool kb_search",
        context=ctx,
        attributes={
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "kb_search",
            "gen_ai.tool.call.id": "c1",
            "gen_ai.tool.call.arguments": args,
        },
    )
    if tool_error is not None:
        tool.record_exception(tool_error)
        tool.set_status(Status(StatusCode.ERROR, str(tool_error)))
    else:
        tool.set_attribute("gen_ai.tool.call.result", result)
    tool.end()
    with tracer.start_as_current_span(
        "chat m",
        context=ctx,
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "m",
            "gen_ai.output.messages": orjson.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": answer}]}]
            ).decode(),
        },
    ):
        pass
    agent.end()
    if outer is not None:
        outer.end()
    return format(agent.get_span_context().trace_id, "032x")


def stored(path: str) -> list[Run]:
    with TraceStore(path) as s:
        return list(s.runs(newest_first=False))


def fork_child_capturing(proc: HarvestingSpanProcessor, tracer: Any) -> int:
    """Fork; the child captures one run ("child") on its own and exits 0 if it wrote it. Returns its pid."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        code = 1
        try:
            agent_run(tracer, prompt="child")
            code = 0 if proc.force_flush(10_000) and proc.stats()["deferred"] == 1 else 3
            proc.shutdown()
        finally:
            os._exit(code)
    return pid


class FailingStore(TraceStore):
    """A store whose writes raise ``fail`` while it is set (a full disk, a locked file)."""

    fail: BaseException | None = None

    def add_many(self, items: Any, **kw: Any) -> int:
        if self.fail is not None:
            raise self.fail
        return super().add_many(items, **kw)


@contextmanager
def capturing_globally(path: str) -> Iterator[HarvestingSpanProcessor]:
    """Production capture on the process's global SDK provider (set here if none is): where an app that
    traces through the global provider (pydantic-ai's ``instrument=True``, an MCP client) sends its spans.
    The processor is shut down on leaving: it stores nothing after."""
    provider = otel.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        otel.set_tracer_provider(TracerProvider())
        provider = otel.get_tracer_provider()
    assert isinstance(provider, TracerProvider)
    processor = HarvestingSpanProcessor(path, redact=False)
    provider.add_span_processor(processor)
    try:
        yield processor
    finally:
        processor.shutdown()
