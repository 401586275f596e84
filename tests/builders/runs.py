"""Runs and tool calls in a few words, as the harvest and case tests need them."""

from __future__ import annotations

from harvester.model import ErrorInfo, Run, ToolCall


def call(name: str, status: str = "ok", **kw) -> ToolCall:
    kw.setdefault("args", {"q": name})
    if status == "ok":
        kw.setdefault("result", f"{name} result")
    if status == "error":
        kw.setdefault("error", ErrorInfo(type="timeout", message="db timeout"))
    return ToolCall(name=name, status=status, **kw)


def run(
    *calls: ToolCall,
    prompt: str = "Can I still return order A1001?",
    answer: str = "Yes, within 30 days.",
    stop: str = "answered",
    trace: str = "t" * 32,
    **kw,
) -> Run:
    kw.setdefault("history", [])  # a first turn; None is "the spans did not say"
    return Run(
        trace_id=trace,
        run_id="r1",
        agent="support",
        prompt=prompt,
        answer=answer,
        stop=stop,
        calls=list(calls),
        started_at="2026-11-30T01:02:03Z",
        **kw,
    )
