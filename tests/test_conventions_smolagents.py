"""smolagents 1.26 ``ToolCallingAgent`` + openinference-instrumentation-smolagents 0.1.43, offline.

A scripted ``OpenAIModel`` with an offline client answers every turn (see ``tests/frameworks/smolagents_agent.py``).
Each run is one trace: ``support_agent.run`` (AGENT, which repeats the run's token SUM) > ``Step N``
(CHAIN) > ``<Model>.generate`` (LLM) + ``SimpleTool`` / ``FinalAnswerTool`` (TOOL, name in ``tool.name``).
smolagents hands every tool error back to the model, and has no approval step (no ``denied`` scenario).
"""

from __future__ import annotations

import pytest

from harvester.conventions import is_agent_span, runs_from_spans
from harvester.spans import from_readable
from tests.builders.frameworks import KB, ORDER
from tests.builders.frameworks import smolagents_run as one_run
from tests.builders.frameworks import smolagents_spans as spans_for
from tests.frameworks import smolagents_agent
from tests.frameworks.smolagents_agent import ANSWERS, MODEL_NAME


def test_happy():
    run = one_run("happy")
    assert [(c.name, c.call_id, c.status, c.result, c.error) for c in run.calls] == [
        ("kb_search", "call_1", "ok", KB, None),
        ("get_order", "call_2", "ok", ORDER, None),
    ]
    assert [(c.model, c.usage.input_tokens, c.usage.output_tokens) for c in run.llm_calls] == [
        (MODEL_NAME, 100, 10),
        (MODEL_NAME, 200, 20),
    ]
    # per model call, once: the AGENT span's llm.token_count.* (300/30) is the same sum, never added
    assert (run.usage.input_tokens, run.usage.output_tokens) == (300, 30)
    assert [(r.name, r.call_id, r.args) for r in run.llm_calls[0].requests] == [
        ("kb_search", "call_1", {"query": "refund policy"}),
        ("get_order", "call_2", {"order_id": "A1001"}),
    ]
    assert not run.failed


def test_tool_error_goes_back_to_the_model():
    run = one_run("tool_error")
    [call] = run.calls
    assert (call.name, call.call_id, call.status, call.result) == ("check_inventory", "call_1", "error", None)
    assert (call.error.type, call.error.message) == ("OrdersDbTimeout", "orders-db timeout")  # module stripped
    assert "check_inventory" not in run.trajectory()
    assert run.blocked_tools() == ["check_inventory"]
    assert (run.usage.input_tokens, run.usage.output_tokens) == (300, 30)
    assert run.failed


def test_retried_tool_error_is_a_failed_call_then_a_new_call():
    run = one_run("retry")
    first, second = run.calls
    assert (first.name, first.call_id, first.status, first.result) == ("get_order", "call_1", "error", None)
    assert (first.error.type, first.error.message) == ("KeyError", "'no order B2002'")
    assert (second.name, second.call_id, second.status, second.result, second.error) == (
        "get_order",
        "call_2",
        "ok",
        ORDER,
        None,
    )
    assert run.blocked_tools() == ["get_order"]
    assert [(c.usage.input_tokens, c.usage.output_tokens) for c in run.llm_calls] == [(100, 10), (200, 20), (300, 30)]
    assert (run.usage.input_tokens, run.usage.output_tokens) == (600, 60)
    assert run.failed


def test_capture_processor_sees_the_outermost_agent_span_end_last():
    spans = spans_for("happy")
    agents = [s for s in spans if is_agent_span(from_readable(s))]
    assert [s.name for s in agents] == ["support_agent.run"]
    assert spans[-1] is agents[0]


def test_content_capture_off():
    # With the model's output hidden, calls are ordered by start time: run the two tools one after the other.
    runs = runs_from_spans(smolagents_agent.run_scenario("happy", include_content=False, deterministic=True))
    assert len(runs) == 1
    run = runs[0]
    assert not run.content_captured and run.source == "openinference"
    assert run.prompt is None and run.answer is None
    assert [c.name for c in run.calls] == ["kb_search", "get_order"]
    assert all(c.result is None for c in run.calls)
    assert (run.usage.input_tokens, run.usage.output_tokens) == (300, 30)


def test_uninstrument_restores_smolagents():
    """No instrumentor wrapper is left behind (a replay's own guard on ``Tool.__call__`` may stay)."""
    import smolagents
    from wrapt import ObjectProxy

    spans_for("happy")
    for method in (smolagents.Tool.__call__, smolagents.MultiStepAgent.run, smolagents.OpenAIModel.generate):
        assert not isinstance(method, ObjectProxy), method


@pytest.mark.parametrize("scenario", smolagents_agent.SCENARIOS)
def test_deterministic_driver_orders_tool_spans(scenario):
    spans = smolagents_agent.run_scenario(scenario, deterministic=True)
    assert runs_from_spans(spans)[0].calls == runs_from_spans(spans_for(scenario))[0].calls


def test_running_out_of_steps_is_a_max_steps_stop():
    """No final_answer call: after max_steps smolagents asks the model for an answer itself."""
    runs = runs_from_spans(spans_for("max_steps"))
    assert len(runs) == 1
    (run,) = runs
    assert run.stop == "max_steps" and run.failed and run.error is None
    assert run.answer == ANSWERS["max_steps"] and run.trajectory() == ["kb_search"] * 5


def test_a_managed_agent_is_the_call_the_model_made():
    """smolagents runs a managed agent the model "calls" by name as an AGENT span, not a TOOL span."""
    (run,) = runs_from_spans(spans_for("managed"))
    assert run.stop == "answered" and not run.failed and run.blocked_tools() == []
    assert run.agent == "support_agent" and run.answer == ANSWERS["managed"]
    assert run.agents == ["support_agent", "research_agent"]  # the call research_agent ran an agent
    assert [(c.name, c.status) for c in run.calls] == [("research_agent", "ok"), ("kb_search", "ok")]
    assert run.calls[0].args == {"task": "Find the refund policy."}
    assert run.calls[0].result == "Within 30 days of delivery."


def test_a_streamed_run_has_the_final_answer_not_a_repr_of_its_steps():
    """run(stream=True), as GradioUI runs an agent: the agent span's output is every step's repr."""
    (run,) = runs_from_spans(smolagents_agent.run_scenario("happy", stream=True, deterministic=True))
    assert run.answer == ANSWERS["happy"] and run.stop == "answered"


def test_a_managed_agents_final_answer_is_not_the_runs():
    """The sub-agent calls final_answer; the outer agent then runs out of steps: stop max_steps, its own answer."""
    (run,) = runs_from_spans(smolagents_agent.run_scenario("managed_max_steps", deterministic=True))
    assert run.stop == "max_steps" and run.failed and run.answer == ANSWERS["managed_max_steps"]


@pytest.mark.parametrize("scenario", ["tool_error", "retry"])
def test_a_recovered_tool_error_with_content_off_is_no_run_error(scenario):
    """The model recovered and answered: a failed step span must not make the run an error."""
    (run,) = runs_from_spans(smolagents_agent.run_scenario(scenario, include_content=False, deterministic=True))
    assert run.stop == "answered" and run.error is None
