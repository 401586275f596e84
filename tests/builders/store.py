"""Runs, spans and OTLP/JSON files as the store and ingest tests need them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from harvester.model import ErrorInfo, Run, ToolCall
from harvester.spans import SpanData, to_otlp


def make_run(
    i: int,
    *,
    failed: bool = False,
    agent: str = "support",
    trace: str | None = None,
    started: str = "2026-11-30T01:02:03.456Z",
) -> Run:
    return Run(
        trace_id=trace or f"{i:032x}",
        run_id=f"{i:016x}",
        agent=agent,
        prompt=f"question {i}",
        answer=None if failed else f"answer {i}",
        stop="error" if failed else "answered",
        error=ErrorInfo(type="Timeout", message="slow") if failed else None,
        calls=[ToolCall(name="kb_search", args={"q": i}, result="r")],
        started_at=started,
    )


def make_span(trace: str, span: str, parent: str | None = None, **attrs: object) -> SpanData:
    return SpanData(
        trace_id=trace, span_id=span, parent_id=parent, name="s", start_ns=1, end_ns=2, attributes=dict(attrs)
    )


def agent_trace(trace: str, *, secret: str = "", tool_result: str = "Refunds within 30 days.") -> list[SpanData]:
    root = make_span(trace, "1" * 16, None, **{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support"})
    chat = make_span(
        trace,
        "2" * 16,
        root.span_id,
        **{
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "m",
            "gen_ai.input.messages": orjson.dumps(
                [{"role": "user", "parts": [{"type": "text", "content": "hi " + secret}]}]
            ).decode(),
            "gen_ai.output.messages": orjson.dumps(
                [
                    {
                        "role": "assistant",
                        "parts": [
                            {"type": "tool_call", "id": "c1", "name": "kb_search", "arguments": {"query": "refund"}}
                        ],
                    }
                ]
            ).decode(),
        },
    )
    tool = make_span(
        trace,
        "3" * 16,
        root.span_id,
        **{
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "kb_search",
            "gen_ai.tool.call.id": "c1",
            "gen_ai.tool.call.arguments": '{"query": "refund"}',
            "gen_ai.tool.call.result": tool_result,
        },
    )
    return [chat, tool, root]


def write_otlp(path: Path, traces: list[list[SpanData]], lines: bool = False) -> Path:
    if lines:
        path.write_bytes(b"\n".join(orjson.dumps(to_otlp(t)) for t in traces))
    else:
        path.write_bytes(orjson.dumps(to_otlp([s for t in traces for s in t])))
    return path


def run_together(procs: list[Any], timeout: float = 120) -> None:
    """Start the processes, wait for all, and require each to have exited cleanly."""
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout)
        assert p.exitcode == 0, p
