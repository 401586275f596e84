"""Real frameworks, scripted models: every scenario's spans must read back as the Run the script implies."""

from __future__ import annotations

import tempfile

import orjson
import pytest

from harvester.conventions import is_agent_span, runs_from_spans
from harvester.spans import from_readable, to_otlp
from tests.frameworks import langchain_agent, pydantic_ai_agent
from tests.frameworks.pydantic_ai_agent import ANSWERS, MODEL_NAME, PROMPTS

ORDER = {"order_id": "A1001", "status": "delivered", "days_since_delivery": 12, "total": 40.0}
KB = "Refunds are accepted within 30 days of delivery."

# (driver, kwargs, expected source)
PRODUCERS = {
    "pydantic-ai-v5": (pydantic_ai_agent, {"version": 5}, "genai"),
    "pydantic-ai-v6": (pydantic_ai_agent, {"version": 6}, "genai"),
    "langchain-openinference": (langchain_agent, {"instrumentor": "openinference"}, "openinference"),
    "langchain-openllmetry": (langchain_agent, {"instrumentor": "openllmetry"}, "openllmetry"),
}
_cache: dict[tuple[str, str], list] = {}


def spans_for(producer: str, scenario: str) -> list:
    if (producer, scenario) not in _cache:
        driver, kwargs, _ = PRODUCERS[producer]
        _cache[producer, scenario] = driver.run_scenario(scenario, **kwargs)
    return _cache[producer, scenario]


def one_run(producer: str, scenario: str):
    runs = runs_from_spans(spans_for(producer, scenario))
    assert len(runs) == 1, [r.model_dump() for r in runs]
    run = runs[0]
    assert run.source == PRODUCERS[producer][2]
    assert run.agent == "support_agent"
    assert run.model == MODEL_NAME
    assert run.prompt == PROMPTS[scenario]
    assert run.content_captured
    assert run.cost is None
    assert run.started_at and run.started_at.endswith("Z") and len(run.started_at) == 24
    assert run.duration_ms is not None and run.duration_ms >= 0
    return run


@pytest.mark.parametrize("producer", PRODUCERS)
def test_happy(producer):
    run = one_run(producer, "happy")
    assert run.stop == "answered" and run.error is None
    assert run.answer == ANSWERS["happy"]
    assert run.trajectory() == ["kb_search", "get_order"]
    assert run.blocked_tools() == []
    assert [(c.call_id, c.args, c.result) for c in run.calls] == [
        ("call_1", {"query": "refund policy"}, KB),
        ("call_2", {"order_id": "A1001"}, ORDER),
    ]
    assert [(c.usage.input_tokens, c.usage.output_tokens) for c in run.llm_calls] == [(100, 10), (200, 20)]
    assert (run.usage.input_tokens, run.usage.output_tokens) == (300, 30)  # never the agent span's sum on top
    assert [r.name for r in run.llm_calls[0].requests] == ["kb_search", "get_order"]
    assert run.llm_calls[0].requests[1].args == {"order_id": "A1001"}
    assert not run.failed


@pytest.mark.parametrize("producer", PRODUCERS)
def test_tool_error_fails_the_run(producer):
    run = one_run(producer, "tool_error")
    assert run.stop == "error"
    assert (run.error.type, run.error.message) == ("OrdersDbTimeout", "orders-db timeout")  # module stripped
    assert run.answer is None
    [call] = run.calls
    assert (call.name, call.status, call.args, call.result) == ("check_inventory", "error", {"sku": "SKU-1"}, None)
    assert (call.error.type, call.error.message) == ("OrdersDbTimeout", "orders-db timeout")
    assert run.trajectory() == [] and run.requested_tools() == ["check_inventory"]
    assert run.blocked_tools() == ["check_inventory"]
    assert (run.usage.input_tokens, run.usage.output_tokens) == (100, 10)


@pytest.mark.parametrize("producer", PRODUCERS)
def test_retried_tool_error_is_a_failed_call_then_a_new_call(producer):
    run = one_run(producer, "retry")
    assert run.stop == "answered" and run.error is None
    assert run.answer == ANSWERS["retry"]
    first, second = run.calls
    assert (first.name, first.call_id, first.args, first.status) == (
        "get_order",
        "call_1",
        {"order_id": "B2002"},
        "error",
    )
    assert "B2002" in first.error.message
    assert first.error.type == ("ToolRetryError" if producer.startswith("pydantic") else "KeyError")
    assert (second.call_id, second.args, second.status, second.result) == ("call_2", {"order_id": "A1001"}, "ok", ORDER)
    assert run.trajectory() == ["get_order"] and run.steps == 2
    assert (run.usage.input_tokens, run.usage.output_tokens) == (600, 60)
    assert run.failed  # a failed call makes the run worth keeping


@pytest.mark.parametrize("producer", PRODUCERS)
def test_human_denial_defers_then_resumes(producer):
    runs = runs_from_spans(spans_for(producer, "denied"))
    assert len(runs) == 2 and runs[0].trace_id != runs[1].trace_id
    paused, resumed = runs
    assert paused.stop == "deferred" and paused.error is None and paused.answer is None
    [call] = paused.calls
    assert (call.name, call.call_id, call.status) == ("issue_refund", "call_1", "awaiting")  # not denied: pending
    assert call.args == {"order_id": "A1001", "amount": 40.0}
    assert paused.requested_tools() == ["issue_refund"] and paused.awaiting_tools() == ["issue_refund"]
    assert paused.blocked_tools() == []
    assert paused.trajectory() == []
    assert (paused.usage.input_tokens, paused.usage.output_tokens) == (100, 10)
    assert resumed.stop == "answered" and resumed.answer == ANSWERS["denied"]
    assert resumed.prompt == PROMPTS["denied"]
    assert resumed.trajectory() == []
    assert (resumed.usage.input_tokens, resumed.usage.output_tokens) == (200, 20)


@pytest.mark.parametrize("instrumentor", ["openinference", "openllmetry"])
def test_langchain_agent_without_a_name_is_one_run(instrumentor):
    """OpenInference marks a graph AGENT only when its name says "agent": create_agent's default
    name is "LangGraph", and the run must still be found, once, through the capture processor."""
    from opentelemetry.sdk.trace import TracerProvider

    from harvester.intake import HarvestingSpanProcessor
    from harvester.store import TraceStore

    with tempfile.TemporaryDirectory() as tmp:
        proc = HarvestingSpanProcessor(f"{tmp}/t.db")
        provider = TracerProvider()
        provider.add_span_processor(proc)
        spans = langchain_agent.run_scenario("happy", provider, instrumentor=instrumentor, agent_name=None)
        proc.shutdown()
        with TraceStore(f"{tmp}/t.db") as store:
            stored = list(store.runs())
    for runs in (runs_from_spans(spans), stored):
        assert len(runs) == 1, [r.model_dump() for r in runs]
        (run,) = runs
        assert run.prompt == PROMPTS["happy"] and run.answer == ANSWERS["happy"] and run.stop == "answered"
        assert run.trajectory() == ["kb_search", "get_order"] and not run.failed
        assert (run.usage.input_tokens, run.usage.output_tokens) == (300, 30)


def test_named_agents_inside_an_outer_chain_stay_their_own_runs():
    """Two named agents run by an outer graph (OpenInference: a CHAIN above two AGENT spans) are two runs."""
    import dataclasses

    from harvester.spans import from_readable

    spans = [from_readable(s) for s in langchain_agent.run_scenario("happy", deterministic=True)]
    outer = dataclasses.replace(
        spans[0], span_id="f" * 16, parent_id=None, name="LangGraph", attributes={"openinference.span.kind": "CHAIN"}
    )
    twin = [
        dataclasses.replace(
            s, span_id="e" + s.span_id[1:], parent_id=None if s.parent_id is None else "e" + s.parent_id[1:]
        )
        for s in spans
    ]
    both = [dataclasses.replace(s, parent_id=s.parent_id or outer.span_id) for s in spans + twin] + [outer]
    runs = runs_from_spans(both)
    assert [r.agent for r in runs] == ["support_agent", "support_agent"]
    assert all(r.trajectory() == ["kb_search", "get_order"] for r in runs)


@pytest.mark.parametrize("instrumentor", ["openinference", "openllmetry"])
def test_langchain_structured_response_is_the_answer_not_a_blocked_call(instrumentor):
    """With response_format=ToolStrategy(...) the model "calls" the schema and LangChain answers it itself."""
    (run,) = runs_from_spans(langchain_agent.run_scenario("structured", instrumentor=instrumentor))
    assert run.stop == "answered" and not run.failed and run.blocked_tools() == []
    assert run.trajectory() == ["kb_search"]
    assert orjson.loads(run.answer) == {"eligible": True, "days_left": 18}
    assert [r.name for r in run.llm_calls[1].requests] == ["RefundAnswer"]  # still what the model asked


@pytest.mark.parametrize("producer", PRODUCERS)
def test_capture_processor_sees_the_outermost_agent_span_end_last(producer):
    spans = spans_for(producer, "happy")
    agents = [s for s in spans if is_agent_span(from_readable(s))]
    assert agents and spans[-1] in agents  # the root ends last, and it is an agent span
    assert not any(is_agent_span(from_readable(s)) for s in spans if s not in agents)


@pytest.mark.parametrize("producer", PRODUCERS)
def test_otlp_json_input_reads_like_readable_spans(producer):
    spans = spans_for(producer, "retry")
    doc = to_otlp(from_readable(s) for s in spans)
    from_doc = runs_from_spans(doc)
    from_dicts = runs_from_spans([s for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]])
    assert from_doc == runs_from_spans(spans)
    # bare span objects lose only the scope name, which OpenLLMetry's root span is recognised by and
    # which names the run's instrumentation
    if producer != "langchain-openllmetry":
        assert from_dicts == [r.model_copy(update={"instrumentation": []}) for r in from_doc]


@pytest.mark.parametrize("producer", ["pydantic-ai-v5", "langchain-openinference", "langchain-openllmetry"])
def test_content_capture_off(producer):
    driver, kwargs, source = PRODUCERS[producer]
    runs = runs_from_spans(driver.run_scenario("happy", include_content=False, **kwargs))
    assert len(runs) == 1
    run = runs[0]
    assert not run.content_captured
    assert run.source == source
    assert run.stop == "answered"
    # names and statuses survive; LangGraph runs the two tools in parallel, and with the model's output
    # hidden nothing orders them but their start times
    assert sorted(run.trajectory()) == ["get_order", "kb_search"]
    assert (run.usage.input_tokens, run.usage.output_tokens) == (300, 30)
    assert all(c.result is None for c in run.calls)


def test_pydantic_ai_content_off_keeps_denial_shape():
    runs = runs_from_spans(pydantic_ai_agent.run_scenario("denied", include_content=False))
    assert [r.stop for r in runs] == ["deferred", "answered"]
    assert [(c.name, c.status) for c in runs[0].calls] == [("issue_refund", "awaiting")]
    assert runs[0].calls[0].args is None and not runs[0].content_captured


@pytest.mark.parametrize("version", [2, 3, 4])
def test_pydantic_ai_deprecated_data_formats_read_like_version_5(version):
    """pydantic-ai still offers data formats 2-4: an app pinned to one must not lose its runs."""
    import warnings

    volatile = {"trace_id", "run_id", "started_at", "duration_ms"}
    for scenario in pydantic_ai_agent.SCENARIOS:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            old = runs_from_spans(pydantic_ai_agent.run_scenario(scenario, version=version))
        new = runs_from_spans(pydantic_ai_agent.run_scenario(scenario, version=5))
        assert [r.model_dump(exclude=volatile) for r in old] == [r.model_dump(exclude=volatile) for r in new], scenario
