"""A tool call traced twice, one span inside the other, is one call: spans emitted through the OTel API as
the OTel MCP conventions and the stacked decorators write them (the real MCP client and OpenInference's
``@tracer.tool`` are driven in test_replay_mcp.py and test_replay_stacked_tools.py)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry.trace import SpanKind

from harvester.conventions import runs_from_spans
from harvester.model import Run
from tests.frameworks._otel import capture, finished

ARGS = {"query": "refund policy"}
RESULT = "Refunds within 30 days."


def _run(body: Callable[[Any], None], calls: list[tuple[str, dict, str]]) -> Run:
    """An agent run: a model turn asking for ``calls``, ``body(tracer)`` emitting the tool spans, an answer."""
    provider, exporter = capture()
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent"}):
        parts = [{"type": "tool_call", "id": cid, "name": n, "arguments": a} for n, a, cid in calls]
        user = [{"role": "user", "parts": [{"type": "text", "content": "q"}]}]
        with tracer.start_as_current_span(
            "chat m",
            attributes={
                "gen_ai.operation.name": "chat",
                "gen_ai.input.messages": json.dumps(user),
                "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": parts}]),
            },
        ):
            pass
        body(tracer)
        done = [{"role": "assistant", "parts": [{"type": "text", "content": "done"}]}]
        with tracer.start_as_current_span(
            "chat m", attributes={"gen_ai.operation.name": "chat", "gen_ai.output.messages": json.dumps(done)}
        ):
            pass
    (run,) = runs_from_spans(finished(exporter))
    return run


@contextmanager
def _tool(tracer: Any, name: str, args: Any = None, result: Any = None, **attrs: Any) -> Iterator[None]:
    """A GenAI ``execute_tool`` span (the framework's, or a decorator's); payloads only when given."""
    a = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name, **attrs}
    if args is not None:
        a["gen_ai.tool.call.arguments"] = json.dumps(args)
    if result is not None:
        a["gen_ai.tool.call.result"] = result
    with tracer.start_as_current_span(f"execute_tool {name}", attributes=a):
        yield


def _calls(run: Run) -> list[tuple[str, Any, Any]]:
    return [(c.name, c.args, c.result) for c in run.calls]


def test_mcp_client_and_server_spans_inside_the_framework_span_are_one_call() -> None:
    """OTel MCP conventions: the client's ``tools/call`` span (no payloads) inside the framework's tool
    span, the SDK's transport span inside it, the server's ``tools/call`` span (same trace) inside that."""

    def body(tracer: Any) -> None:
        with _tool(tracer, "kb_search", ARGS, RESULT, **{"gen_ai.tool.call.id": "c1"}):
            mcp = {"mcp.method.name": "tools/call", "gen_ai.operation.name": "execute_tool"}
            with tracer.start_as_current_span(
                "tools/call kb_search", kind=SpanKind.CLIENT, attributes={**mcp, "gen_ai.tool.name": "kb_search"}
            ):
                with tracer.start_as_current_span(
                    "MCP send tools/call kb_search", attributes={"mcp.method.name": "tools/call"}
                ):
                    with tracer.start_as_current_span(
                        "tools/call kb_search",
                        kind=SpanKind.SERVER,
                        attributes={**mcp, "gen_ai.tool.name": "kb_search"},
                    ):
                        pass

    run = _run(body, [("kb_search", ARGS, "c1")])
    assert _calls(run) == [("kb_search", ARGS, RESULT)] and run.calls[0].call_id == "c1"
    assert run.content_captured and run.blocked_tools() == []


def test_the_inner_span_fills_what_the_outer_one_lacks() -> None:
    """Content capture off on the framework's span, on in a decorator's inside it: the call has the payloads."""

    def body(tracer: Any) -> None:
        with _tool(tracer, "kb_search", **{"gen_ai.tool.call.id": "c1"}):
            with _tool(tracer, "kb_search", ARGS, RESULT):
                pass

    run = _run(body, [("kb_search", ARGS, "c1")])
    assert _calls(run) == [("kb_search", ARGS, RESULT)] and run.content_captured


def test_defaults_one_tracer_added_are_the_same_call() -> None:
    """OpenInference records the defaults the caller left out: the outer reading's args are kept."""

    def body(tracer: Any) -> None:
        with _tool(tracer, "kb_search", ARGS, RESULT):
            with _tool(tracer, "kb_search", {**ARGS, "limit": 5}, RESULT):
                pass

    assert _calls(_run(body, [("kb_search", ARGS, "c1")])) == [("kb_search", ARGS, RESULT)]


def test_other_calls_inside_a_tool_stay_calls() -> None:
    """Another tool, the same tool with other args, or the same call inside a sub-agent: separate calls."""

    def body(tracer: Any) -> None:
        with _tool(tracer, "kb_search", ARGS, RESULT):
            with _tool(tracer, "get_order", {"order_id": "A1"}, "o"):
                pass
            with _tool(tracer, "kb_search", {"query": "returns"}, "r"):
                pass
            with tracer.start_as_current_span("invoke_agent sub", attributes={"gen_ai.operation.name": "invoke_agent"}):
                with _tool(tracer, "kb_search", ARGS, RESULT):
                    pass

    run = _run(body, [("kb_search", ARGS, "c1")])
    assert sorted(_calls(run), key=str) == sorted(
        [
            ("kb_search", ARGS, RESULT),
            ("get_order", {"order_id": "A1"}, "o"),
            ("kb_search", {"query": "returns"}, "r"),
            ("kb_search", ARGS, RESULT),
        ],
        key=str,
    )
