"""conventions on hand-built spans: the edges real frameworks rarely show but production traces do."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harvester.conventions import is_agent_span, runs_from_spans
from harvester.spans import SpanData, to_otlp

TRACE = "0af7651916cd43dd8448eb211c80319c"


class Clock:
    def __init__(self) -> None:
        self.t = 1_764_468_123_456_000_000  # 2025-11-30T02:02:03.456Z

    def __call__(self) -> int:
        self.t += 1_000_000
        return self.t


def mk(
    sid: int,
    name: str,
    attrs: dict,
    parent: int | None = None,
    *,
    clock: Clock,
    trace: str = TRACE,
    status: str = "UNSET",
    message: str = "",
    events: list | None = None,
    scope: str = "test",
) -> SpanData:
    start = clock()
    return SpanData(
        trace_id=trace,
        span_id=f"{sid:016x}",
        parent_id=f"{parent:016x}" if parent else None,
        name=name,
        start_ns=start,
        end_ns=start + 500_000,
        status=status,
        status_message=message,
        attributes=attrs,
        events=events or [],
        scope=scope,
    )


def chat(sid, parent, clock, calls=(), text=None, tokens=(10, 1), **kw):
    parts = [{"type": "tool_call", "id": cid, "name": n, "arguments": a} for n, a, cid in calls]
    if text is not None:
        parts.append({"type": "text", "content": text})
    return mk(
        sid,
        "chat m",
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "m",
            "gen_ai.usage.input_tokens": tokens[0],
            "gen_ai.usage.output_tokens": tokens[1],
            "gen_ai.output.messages": orjson.dumps([{"role": "assistant", "parts": parts}]).decode(),
            **kw,
        },
        parent,
        clock=clock,
    )


def tool(sid, parent, clock, name, args=None, result="ok", call_id=None, **kw):
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}
    if args is not None:
        attrs["gen_ai.tool.call.arguments"] = args if isinstance(args, str) else orjson.dumps(args).decode()
    if result is not None:
        attrs["gen_ai.tool.call.result"] = result
    if call_id:
        attrs["gen_ai.tool.call.id"] = call_id
    return mk(sid, f"execute_tool {name}", attrs, parent, clock=clock, **kw)


def agent(sid, clock, parent=None, **attrs):
    return mk(
        sid,
        "invoke_agent a",
        {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "a",
            "pydantic_ai.all_messages": '[{"role":"user","parts":[{"type":"text","content":"hi"}]}]',
            **attrs,
        },
        parent,
        clock=clock,
    )


def simple_run(clock=None, **agent_attrs):
    c = clock or Clock()
    root = agent(1, c, final_result="done", **agent_attrs)
    return [
        root,
        chat(2, 1, c, [("kb_search", {"query": "q"}, "c1")]),
        tool(3, 1, c, "kb_search", {"query": "q"}, "found", "c1"),
        chat(4, 1, c, text="done"),
    ]


def test_happy_synthetic_run_and_timestamps():
    [run] = runs_from_spans(simple_run())
    assert (run.prompt, run.answer, run.stop, run.trajectory()) == ("hi", "done", "answered", ["kb_search"])
    assert run.started_at == "2025-11-30T02:02:03.457Z"
    assert run.duration_ms == 0.5
    assert run.usage.input_tokens == 20 and run.usage.output_tokens == 2


def test_unknown_spans_are_ignored():
    c = Clock()
    http = [
        mk(10, "GET /orders", {"http.method": "GET", "http.status_code": 500}, None, clock=c, status="ERROR"),
        mk(11, "SELECT", {"db.system": "sqlite"}, 10, clock=c),
    ]
    assert runs_from_spans(http) == []
    spans = simple_run(c)
    spans.append(mk(12, "GET /kb", {"http.method": "GET"}, 3, clock=c, status="ERROR", message="boom"))
    [run] = runs_from_spans(spans)
    assert run.stop == "answered" and run.calls[0].status == "ok"


def test_trace_without_agent_span_yields_no_run():
    c = Clock()
    orphan = [chat(2, None, c, [("kb_search", {"query": "q"}, "c1")]), tool(3, None, c, "kb_search", {"query": "q"})]
    assert runs_from_spans(orphan) == []


def test_several_traces_and_runs():
    a, b = simple_run(), simple_run()
    for s in b:
        s.trace_id = "1" * 32
    c = Clock()
    c.t += 10**9  # starts after the first run
    second = [agent(20, c, final_result="again"), chat(21, 20, c, text="again")]  # a second run in trace a
    runs = runs_from_spans(a + b + second)
    assert [(r.trace_id, r.answer) for r in runs] == [(TRACE, "done"), (TRACE, "again"), ("1" * 32, "done")]


def test_nested_agent_spans_are_one_run():
    c = Clock()
    # OpenLLMetry: invoke_agent root > <name>.workflow (both agent spans) > chat / execute_tool
    root = mk(
        1,
        "invoke_agent a",
        {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "a"},
        None,
        clock=c,
        scope="opentelemetry.instrumentation.langchain",
    )
    wf = mk(
        2,
        "a.workflow",
        {
            "traceloop.span.kind": "workflow",
            "traceloop.entity.name": "a",
            "traceloop.entity.input": '{"inputs": {"messages": [{"role": "user", "content": "hi"}]}}',
        },
        1,
        clock=c,
    )
    inner = mk(3, "invoke_agent sub", {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "sub"}, 2, clock=c)
    spans = [
        root,
        wf,
        inner,
        chat(4, 3, c, [("kb_search", {"query": "q"}, "c1")]),
        tool(5, 3, c, "kb_search", {"query": "q"}, "x", "c1"),
        chat(6, 2, c, text="bye"),
    ]
    [run] = runs_from_spans(spans)
    assert run.run_id == f"{1:016x}" and run.agent == "a" and run.source == "openllmetry"
    assert (run.prompt, run.answer, run.trajectory()) == ("hi", "bye", ["kb_search"])
    # openai-agents + OpenInference: AGENT > CHAIN > AGENT
    c = Clock()
    oi = [
        mk(1, "wf", {"openinference.span.kind": "AGENT"}, None, clock=c),
        mk(2, "wf", {"openinference.span.kind": "CHAIN"}, 1, clock=c),
        mk(3, "support", {"openinference.span.kind": "AGENT"}, 2, clock=c),
        mk(
            4,
            "response",
            {
                "openinference.span.kind": "LLM",
                "llm.model_name": "m",
                "llm.token_count.prompt": 5,
                "llm.input_messages.0.message.role": "user",
                "llm.input_messages.0.message.content": "hello",
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.content": "hey",
            },
            3,
            clock=c,
        ),
    ]
    [run] = runs_from_spans(oi)
    assert (run.run_id, run.prompt, run.answer, run.usage.input_tokens) == (f"{1:016x}", "hello", "hey", 5)


def test_tool_spans_without_ids_pair_by_order_and_name():
    c = Clock()
    spans = [
        agent(1, c),
        chat(
            2,
            1,
            c,
            [
                ("get_order", {"order_id": "A"}, "c1"),
                ("kb_search", {"query": "q"}, "c2"),
                ("get_order", {"order_id": "B"}, "c3"),
            ],
        ),
        tool(3, 1, c, "get_order", result="a"),
        tool(4, 1, c, "get_order", result="b"),
        tool(5, 1, c, "kb_search", result="k"),
        chat(6, 1, c, text="ok"),
    ]
    [run] = runs_from_spans(spans)
    assert [(x.name, x.call_id, x.args, x.result) for x in run.calls] == [
        ("get_order", "c1", {"order_id": "A"}, "a"),
        ("kb_search", "c2", {"query": "q"}, "k"),
        ("get_order", "c3", {"order_id": "B"}, "b"),
    ]


def test_bare_and_wrapped_tool_inputs_become_objects():
    c = Clock()
    oi_tool = {
        "openinference.span.kind": "TOOL",
        "tool.name": "kb_search",
        "input.value": "refund policy",
        "output.value": "found",
    }
    llm = {
        "openinference.span.kind": "LLM",
        "llm.output_messages.0.message.role": "assistant",
        "llm.output_messages.0.message.tool_calls.0.tool_call.id": "c1",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "kb_search",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": '{"query": "refund policy"}',
    }
    spans = [
        mk(1, "a", {"openinference.span.kind": "AGENT", "input.value": "hi", "output.value": "bye"}, None, clock=c),
        mk(2, "llm", llm, 1, clock=c),
        mk(3, "kb_search", oi_tool, 1, clock=c),
        mk(
            4,
            "get_order",
            {
                "openinference.span.kind": "TOOL",
                "tool.name": "get_order",
                "input.value": '{"args": [], "kwargs": {"order_id": "A1"}}',
            },
            1,
            clock=c,
        ),
        mk(5, "lookup", {"openinference.span.kind": "TOOL", "tool.name": "lookup", "input.value": "A1"}, 1, clock=c),
    ]
    [run] = runs_from_spans(spans)
    assert [(x.name, x.call_id, x.args) for x in run.calls] == [
        ("kb_search", "c1", {"query": "refund policy"}),  # the bare value: args from the model's request
        ("get_order", None, {"order_id": "A1"}),  # smolagents wrapper
        ("lookup", None, {"input": "A1"}),
    ]  # no request to name it: wrapped, still an object
    assert (run.prompt, run.answer) == ("hi", "bye")


def test_invalid_json_payloads_degrade():
    c = Clock()
    spans = [
        agent(1, c, final_result="{not json"),
        chat(2, 1, c, [("kb_search", {"query": "q"}, "c1")]),
        tool(3, 1, c, "kb_search", '{"query": "q', '{"truncated": [1, 2', "c1"),
        mk(4, "chat m", {"gen_ai.operation.name": "chat", "gen_ai.output.messages": "[{oops"}, 1, clock=c),
    ]
    [run] = runs_from_spans(spans)
    [call] = run.calls
    assert call.args == {"query": "q"}  # the cut-off span args give way to the model's request
    assert call.truncated and call.result == '{"truncated": [1, 2'
    assert run.answer == "{not json"


def test_wrong_attribute_types_never_raise():
    c = Clock()
    spans = [
        mk(
            1,
            "invoke_agent",
            {
                "gen_ai.operation.name": "invoke_agent",
                "gen_ai.agent.name": 7,
                "final_result": ["a", "b"],
                "pydantic_ai.all_messages": 3,
            },
            None,
            clock=c,
        ),
        mk(
            2,
            "chat",
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.usage.input_tokens": "12",
                "gen_ai.usage.output_tokens": [1],
                "gen_ai.request.model": 3.5,
                "gen_ai.output.messages": 42,
            },
            1,
            clock=c,
        ),
        mk(
            3,
            "tool",
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": None,
                "gen_ai.tool.call.arguments": 5,
                "gen_ai.tool.call.result": True,
            },
            1,
            clock=c,
        ),
        mk(4, "weird", {"openinference.span.kind": ["AGENT"], "traceloop.span.kind": {"x": 1}}, 1, clock=c),
        mk(5, "weird2", {"gen_ai.operation.name": ["chat"]}, 1, clock=c, events=[{"name": "exception"}, "x"]),
    ]
    [run] = runs_from_spans(spans)
    assert run.usage.input_tokens == 12 and run.usage.output_tokens is None
    assert run.calls[0].args == {"input": 5} and run.calls[0].result is True
    run.to_json()


def test_non_utf8_and_binary_values():
    c = Clock()
    spans = [
        agent(1, c, final_result=b"\xff\xfeanswer"),
        chat(2, 1, c, [("kb_search", {"query": "q"}, "c1")]),
        tool(3, 1, c, "kb_search", {"query": "q"}, "bad \udcff surrogate", "c1"),
        chat(4, 1, c, text="x"),
    ]
    spans[0].attributes["pydantic_ai.all_messages"] = '[{"role":"user","parts":[{"type":"text","content":"h\udce9"}]}]'
    [run] = runs_from_spans(spans)
    assert run.answer.endswith("answer") and "\ufffd" in run.answer
    assert run.calls[0].result == "bad \ufffd surrogate"
    orjson.loads(run.to_json())


def test_content_capture_off_placeholders():
    c = Clock()
    red = "__REDACTED__"
    spans = [
        mk(1, "a", {"openinference.span.kind": "AGENT", "input.value": red, "output.value": red}, None, clock=c),
        mk(2, "llm", {"openinference.span.kind": "LLM", "llm.token_count.prompt": 7}, 1, clock=c),
        mk(
            3,
            "kb_search",
            {"openinference.span.kind": "TOOL", "tool.name": "kb_search", "input.value": red, "output.value": red},
            1,
            clock=c,
        ),
    ]
    [run] = runs_from_spans(spans)
    assert not run.content_captured
    assert run.prompt is None and run.answer is None
    assert [(x.name, x.args, x.result, x.status) for x in run.calls] == [("kb_search", None, None, "ok")]
    assert run.usage.input_tokens == 7


def test_feedback_attributes():
    [run] = runs_from_spans(simple_run(**{"harvester.feedback": "negative"}))
    assert run.feedback == "negative" and run.failed and run.stop == "answered"
    spans = simple_run()
    spans[2].attributes["user.feedback"] = -1
    assert runs_from_spans(spans)[0].feedback == "negative"
    assert runs_from_spans(simple_run(**{"feedback": "thumbs_up"}))[0].feedback == "positive"
    assert runs_from_spans(simple_run())[0].feedback is None


def test_limits_and_errors():
    c = Clock()
    exc = [
        {
            "name": "exception",
            "time_ns": 0,
            "attributes": {
                "exception.type": "pydantic_ai.exceptions.UsageLimitExceeded",
                "exception.message": "over budget",
            },
        }
    ]
    spans = [agent(1, c, parent=None), chat(2, 1, c, [("kb_search", {"query": "q"}, "c1")])]
    spans[0].status, spans[0].events = "ERROR", exc
    [run] = runs_from_spans(spans)
    assert run.stop == "budget_exceeded" and run.error.type == "UsageLimitExceeded"
    assert run.calls[0].status == "blocked"  # requested, never executed
    spans[0].events = []
    spans[0].status_message = "KeyError('no order')Traceback (most recent call last):\n  ..."
    [run] = runs_from_spans(spans)
    assert (run.stop, run.error.type, run.error.message) == ("error", "KeyError", "no order")


def test_output_tool_is_not_a_blocked_call():
    c = Clock()
    params = '{"function_tools": [], "output_tools": [{"name": "final_result"}]}'
    spans = [
        agent(1, c, final_result='{"city": "Paris"}'),
        chat(2, 1, c, [("final_result", {"city": "Paris"}, "c1")], model_request_parameters=params),
    ]
    [run] = runs_from_spans(spans)
    assert run.calls == [] and run.stop == "answered" and run.answer == '{"city": "Paris"}'
    assert [r.name for r in run.llm_calls[0].requests] == ["final_result"]


def test_agent_usage_aggregate_is_a_fallback_never_added():
    c = Clock()
    alone = [agent(1, c, **{"gen_ai.aggregated_usage.input_tokens": 50, "gen_ai.aggregated_usage.output_tokens": 5})]
    assert runs_from_spans(alone)[0].usage.input_tokens == 50
    spans = simple_run(**{"gen_ai.aggregated_usage.input_tokens": 20, "gen_ai.aggregated_usage.output_tokens": 2})
    assert runs_from_spans(spans)[0].usage.input_tokens == 20


def test_is_agent_span():
    c = Clock()

    def s(attrs):
        return mk(1, "x", attrs, clock=c)

    assert is_agent_span(s({"gen_ai.operation.name": "invoke_agent"}))
    assert is_agent_span(s({"openinference.span.kind": "AGENT"}))
    assert is_agent_span(s({"traceloop.span.kind": "workflow"}))
    assert is_agent_span(s({"traceloop.span.kind": "agent"}))
    assert not is_agent_span(s({"gen_ai.operation.name": "create_agent"}))
    assert not is_agent_span(s({"openinference.span.kind": "CHAIN", "gen_ai.operation.name": "invoke_agent"}))
    assert not is_agent_span(s({"traceloop.span.kind": "task", "gen_ai.operation.name": "execute_task"}))
    assert not is_agent_span(s({"gen_ai.operation.name": "chat"}))
    assert not is_agent_span(s({}))


@pytest.mark.slow
def test_ten_thousand_spans_in_one_trace():
    """Linear pairing: a quadratic one would make this test take minutes (speed lives in bench/, not here)."""
    c = Clock()
    spans = [agent(1, c, final_result="done")]
    sid = 2
    for i in range(3333):
        spans.append(chat(sid, 1, c, [("kb_search", {"query": str(i)}, f"c{i}")]))
        spans.append(tool(sid + 1, 1, c, "kb_search", {"query": str(i)}, "r", f"c{i}"))
        spans.append(mk(sid + 2, "GET", {"http.method": "GET"}, sid + 1, clock=c))
        sid += 3
    assert len(spans) == 10_000
    [run] = runs_from_spans(spans)
    assert run.steps == 3333 and run.calls[-1].args == {"query": "3332"} and run.usage.input_tokens == 33330


def test_otlp_dicts_equal_span_data():
    spans = simple_run()
    doc = to_otlp(spans)
    assert runs_from_spans(doc) == runs_from_spans(spans)
    assert runs_from_spans([doc]) == runs_from_spans([s.to_dict() for s in spans])


_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.binary(max_size=10),
    st.lists(st.integers(), max_size=3),
    st.sampled_from(
        [
            "{",
            "[1,",
            '{"a": 1}',
            "__REDACTED__",
            "AGENT",
            "LLM",
            "TOOL",
            "invoke_agent",
            "chat",
            "execute_tool",
            "workflow",
            "tool",
            "ERROR",
        ]
    ),
)
_keys = st.sampled_from(
    [
        "gen_ai.operation.name",
        "openinference.span.kind",
        "traceloop.span.kind",
        "gen_ai.tool.name",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
        "gen_ai.output.messages",
        "gen_ai.input.messages",
        "final_result",
        "pydantic_ai.all_messages",
        "input.value",
        "output.value",
        "tool.name",
        "llm.model_name",
        "llm.token_count.prompt",
        "gen_ai.usage.input_tokens",
        "traceloop.entity.input",
        "traceloop.entity.output",
        "llm.output_messages.0.message.tool_calls.0.tool_call.function.name",
        "harvester.feedback",
        "error.type",
        "model_request_parameters",
        "gen_ai.tool.call.id",
    ]
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.dictionaries(_keys, _values, max_size=6), min_size=1, max_size=5),
    st.lists(st.sampled_from(["UNSET", "OK", "ERROR"]), min_size=5, max_size=5),
)
def test_fuzzed_attributes_never_raise(attr_sets, statuses):
    c = Clock()
    spans = [agent(1, c)] + [
        mk(i + 2, "s", a, 1 if i % 2 == 0 else i + 1, clock=c, status=statuses[i]) for i, a in enumerate(attr_sets)
    ]
    for run in runs_from_spans(spans):
        run.to_json()


def test_older_openllmetry_indexed_prompt_and_completion_keys():
    """OpenLLMetry's OpenAI/Anthropic instrumentors under a traceloop workflow: gen_ai.prompt.N, gen_ai.completion.N."""
    c, oa = Clock(), "opentelemetry.instrumentation.openai.v1"
    workflow = mk(
        1,
        "support.workflow",
        {"traceloop.span.kind": "workflow", "traceloop.entity.name": "support", "traceloop.workflow.name": "support"},
        clock=c,
        scope="traceloop.tracer",
    )
    first = mk(
        2,
        "openai.chat",
        {
            "llm.request.type": "chat",
            "gen_ai.system": "openai",
            "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.prompt.0.role": "system",
            "gen_ai.prompt.0.content": "You are a support agent.",
            "gen_ai.prompt.1.role": "user",
            "gen_ai.prompt.1.content": "Where is order A1001?",
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.finish_reason": "tool_calls",
            "gen_ai.completion.0.tool_calls.0.id": "call_1",
            "gen_ai.completion.0.tool_calls.0.name": "get_order",
            "gen_ai.completion.0.tool_calls.0.arguments": '{"order_id": "A1001"}',
            "gen_ai.usage.prompt_tokens": 50,
            "gen_ai.usage.completion_tokens": 10,
        },
        1,
        clock=c,
        scope=oa,
    )
    call = mk(
        3,
        "get_order.tool",
        {
            "traceloop.span.kind": "tool",
            "traceloop.entity.name": "get_order",
            "traceloop.entity.input": '{"args": [], "kwargs": {"order_id": "A1001"}}',
            "traceloop.entity.output": '{"status": "delivered"}',
        },
        1,
        clock=c,
        scope="traceloop.tracer",
    )
    last = mk(
        4,
        "openai.chat",
        {
            "llm.request.type": "chat",
            "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.content": "Order A1001 was delivered.",
            "gen_ai.completion.0.finish_reason": "stop",
            "gen_ai.usage.prompt_tokens": 70,
            "gen_ai.usage.completion_tokens": 12,
        },
        1,
        clock=c,
        scope=oa,
    )
    [run] = runs_from_spans([workflow, first, call, last])
    assert (run.prompt, run.answer, run.stop, run.model) == (
        "Where is order A1001?",
        "Order A1001 was delivered.",
        "answered",
        "gpt-4o-mini",
    )
    assert [(x.name, x.call_id, x.args, x.result) for x in run.calls] == [
        ("get_order", "call_1", {"order_id": "A1001"}, {"status": "delivered"})
    ]
    assert (run.usage.input_tokens, run.usage.output_tokens) == (120, 22)
    assert [llm.finish_reason for llm in run.llm_calls] == ["tool_calls", "stop"]


def test_parallel_calls_of_one_tool_pair_by_id_then_by_args():
    """OpenInference: a LangChain tool that raised has no output, so no call id; its siblings do. Which
    one ends (and starts) first varies run to run: the failed one must never take a sibling's request."""
    calls = [("Rome", "c1"), ("Atlantis", "c2"), ("Oslo", "c3")]
    llm = {"openinference.span.kind": "LLM", "llm.output_messages.0.message.role": "assistant"}
    for m, (city, cid) in enumerate(calls):
        base = f"llm.output_messages.0.message.tool_calls.{m}.tool_call."
        llm.update(
            {
                base + "id": cid,
                base + "function.name": "lookup",
                base + "function.arguments": orjson.dumps({"city": city}).decode(),
            }
        )

    def lookup(sid, city, cid, c):
        if city == "Atlantis":
            return mk(
                sid,
                "lookup",
                {"openinference.span.kind": "TOOL", "tool.name": "lookup", "input.value": city},
                1,
                clock=c,
                status="ERROR",
                message="KeyError('no city Atlantis')",
            )
        out = {"type": "tool", "data": {"content": f"{city}: 20C", "tool_call_id": cid, "status": "success"}}
        return mk(
            sid,
            "lookup",
            {
                "openinference.span.kind": "TOOL",
                "tool.name": "lookup",
                "input.value": city,
                "output.value": orjson.dumps(out).decode(),
            },
            1,
            clock=c,
        )

    for order in ([1, 0, 2], [0, 1, 2], [1, 2, 0], [2, 1, 0]):
        c = Clock()
        spans = [
            mk(1, "a", {"openinference.span.kind": "AGENT", "input.value": "W?", "output.value": "ok"}, None, clock=c),
            mk(2, "llm", llm, 1, clock=c),
        ]
        spans += [lookup(3 + i, *calls[i], c) for i in order]
        [run] = runs_from_spans(spans)
        assert [(x.call_id, x.args, x.status) for x in run.calls] == [
            ("c1", {"city": "Rome"}, "ok"),
            ("c2", {"city": "Atlantis"}, "error"),
            ("c3", {"city": "Oslo"}, "ok"),
        ], order


def test_a_call_id_used_twice_pairs_by_name_too():
    """A sub-agent numbering its own calls from call_1 again: an id match under another name is not a match."""
    c = Clock()
    spans = [
        agent(1, c),
        chat(2, 1, c, calls=[("ask_orders", {"q": "A1"}, "call_1")]),
        mk(
            3,
            "invoke_agent orders",
            {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "orders"},
            1,
            clock=c,
        ),
        chat(4, 3, c, calls=[("get_order", {"order_id": "A1"}, "call_1")]),
        tool(5, 3, c, "get_order", {"order_id": "A1"}, "shipped", call_id="call_1"),
        tool(6, 1, c, "ask_orders", {"q": "A1"}, "A1 shipped", call_id="call_1"),
        chat(7, 1, c, text="Boss: A1 shipped"),
    ]
    [run] = runs_from_spans(spans)
    assert [(x.name, x.call_id, x.status, x.result) for x in run.calls] == [
        ("ask_orders", "call_1", "ok", "A1 shipped"),
        ("get_order", "call_1", "ok", "shipped"),
    ]


def test_a_plain_openinference_chain_is_no_agent_run():
    """prompt | llm | parser: a model call but no tool, no requested call: not an agent run."""
    c = Clock()
    spans = [
        mk(
            1,
            "RunnableSequence",
            {"openinference.span.kind": "CHAIN", "input.value": '{"text": "article"}', "output.value": "A summary."},
            None,
            clock=c,
        ),
        mk(2, "ChatPromptTemplate", {"openinference.span.kind": "CHAIN"}, 1, clock=c),
        mk(
            3,
            "ChatOpenAI",
            {
                "openinference.span.kind": "LLM",
                "llm.model_name": "m",
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.content": "A summary.",
            },
            1,
            clock=c,
        ),
        mk(4, "StrOutputParser", {"openinference.span.kind": "CHAIN"}, 1, clock=c),
    ]
    assert runs_from_spans(spans) == []


def test_the_model_is_the_one_that_answered_not_a_failed_primary():
    """LangChain's ModelFallbackMiddleware: the primary's call failed, the fallback's answered."""
    c = Clock()
    spans = [
        agent(1, c),
        mk(
            2,
            "chat primary",
            {"gen_ai.operation.name": "chat", "gen_ai.request.model": "primary"},
            1,
            clock=c,
            status="ERROR",
            message="RateLimitError('429')",
        ),
        chat(3, 1, c, text="hello", **{"gen_ai.request.model": "fallback"}),
    ]
    [run] = runs_from_spans(spans)
    assert run.model == "fallback" and run.answer == "hello"


def test_an_openinference_llm_span_with_payloads_but_no_conversation_is_no_model_call():
    """OpenInference's OpenAI instrumentor traces a moderation (any request of the client) as an LLM span:
    payloads, no model, tokens or messages. It is no model call; a span with its payloads hidden still is."""
    c = Clock()
    llm = {"openinference.span.kind": "LLM", "llm.provider": "openai"}
    asked = '{"model": "omni-moderation-latest", "input": "hi"}'
    spans = [
        mk(1, "a", {"openinference.span.kind": "AGENT", "input.value": "hi", "output.value": "done"}, None, clock=c),
        mk(2, "ModerationCreateResponse", {**llm, "input.value": asked, "output.value": '{"results": []}'}, 1, clock=c),
        mk(3, "ChatCompletion", {**llm, "input.value": "__REDACTED__", "output.value": "__REDACTED__"}, 1, clock=c),
        mk(
            4,
            "ChatCompletion",
            {**llm, "llm.model_name": "m", "llm.output_messages.0.message.content": "done"},
            1,
            clock=c,
        ),
    ]
    [run] = runs_from_spans(spans)
    assert [(x.model, x.text) for x in run.llm_calls] == [(None, None), ("m", "done")]
