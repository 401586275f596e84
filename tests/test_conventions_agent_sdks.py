"""The OpenInference details openai-agents and smolagents differ on, read from their real spans.

Each of these failed before conventions learnt it: a prompt after a gap in llm.input_messages, the agent
nested in "Agent workflow", dict-repr error statuses, a tool span waiting for approval, smolagents' call
wrapper and answer tool, and the ``.run`` suffix of its agent span.
"""

from __future__ import annotations

import pytest

from harvester.conventions import runs_from_spans
from harvester.spans import from_readable, to_otlp
from tests.builders.frameworks import KB, ORDER
from tests.builders.frameworks import openai_agents_runs as oa_runs
from tests.builders.frameworks import openai_agents_spans as oa_spans
from tests.builders.frameworks import smolagents_run as smol_run
from tests.builders.frameworks import smolagents_spans as smol_spans
from tests.frameworks import openai_agents_agent
from tests.frameworks.pydantic_ai_agent import AGENT_NAME, PROMPTS


# -- both ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("spans_for", [oa_spans, smol_spans], ids=["openai-agents", "smolagents"])
def test_otlp_json_input_reads_like_readable_spans(spans_for):
    spans = spans_for("retry")
    doc = to_otlp(from_readable(s) for s in spans)
    assert runs_from_spans(doc) == runs_from_spans(spans)
    bare = runs_from_spans([s for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]])
    # span objects without their scopeSpans have no instrumentation scope to tell: all else reads the same
    assert [r.model_copy(update={"instrumentation": []}) for r in runs_from_spans(doc)] == bare


# -- openai-agents ---------------------------------------------------------------------------------
@pytest.mark.parametrize("scenario", ["happy", "denied"])
def test_openai_agents_prompt_without_system_instructions(scenario):
    # an agent without instructions: llm.input_messages.0 is absent (kept for the instructions), the user
    # message is llm.input_messages.1.*; the reader must not stop at the gap
    runs = runs_from_spans(openai_agents_agent.run_scenario(scenario, instructions=None))
    assert [r.prompt for r in runs] == [PROMPTS[scenario]] * len(runs)
    assert all(r.content_captured for r in runs if r.stop == "answered")


@pytest.mark.parametrize("scenario", ["happy", "tool_error", "retry", "denied"])
def test_openai_agents_agent_is_the_agent_not_the_workflow(scenario):
    # root AGENT span "Agent workflow" (no name attribute) > nested AGENT span with agent.name="support_agent"
    runs = runs_from_spans(oa_spans(scenario))
    assert [r.agent for r in runs] == [AGENT_NAME] * len(runs)


def test_openai_agents_tool_error_reads_the_dict_repr_status():
    [run] = oa_runs("tool_error")
    [call] = run.calls
    # TOOL status: "Error running tool: {'tool_name': 'check_inventory', 'error': 'orders-db timeout'}"
    assert call.error.model_dump() == {"type": "Error", "message": "orders-db timeout"}
    # AGENT status: "Error in agent run: {'error': 'Error running tool check_inventory: orders-db timeout'}"
    assert run.error.model_dump() == {
        "type": "Error",
        "message": "Error running tool check_inventory: orders-db timeout",
    }


def test_openai_agents_retried_tool_error_message():
    [run] = oa_runs("retry")
    # TOOL status: "Error running tool (non-fatal): {'tool_name': 'get_order', 'error': \"'no order B2002'\"}"
    assert run.calls[0].error.model_dump() == {"type": "Error", "message": "'no order B2002'"}


def test_openai_agents_approval_pause_is_deferred_and_awaiting():
    paused, resumed = oa_runs("denied", 2)
    # the paused run ends on a TOOL span with input.value, no output.value, status OK, and no LLM span after it
    assert paused.stop == "deferred" and paused.error is None and paused.answer is None
    [call] = paused.calls
    assert (call.name, call.call_id, call.status, call.args, call.result, call.error) == (
        "issue_refund",
        "call_1",
        "awaiting",
        {"order_id": "A1001", "amount": 40.0},
        None,
        None,
    )
    assert paused.requested_tools() == ["issue_refund"] and paused.awaiting_tools() == ["issue_refund"]
    assert paused.trajectory() == []
    assert paused.failed
    assert resumed.stop == "answered" and resumed.prompt == PROMPTS["denied"]


def test_openai_agents_finish_reason():
    [run] = oa_runs("happy")
    assert [c.finish_reason for c in run.llm_calls] == ["stop", "stop"]  # llm.finish_reason


# -- smolagents -------------------------------------------------------------------------------------
def test_smolagents_agent_name_drops_the_run_suffix():
    assert smol_run("happy").agent == AGENT_NAME  # AGENT span "support_agent.run", no agent.name attribute


def test_smolagents_tool_args_unwrap_the_call_wrapper():
    run = smol_run("happy")
    # TOOL input.value = {"args": [], "sanitize_inputs_outputs": true, "kwargs": {"query": "refund policy"}}
    assert [c.args for c in run.calls if c.name != "final_answer"] == [
        {"query": "refund policy"},
        {"order_id": "A1001"},
    ]


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        (
            "happy",
            [
                ("kb_search", "call_1", {"query": "refund policy"}, "ok", KB),
                ("get_order", "call_2", {"order_id": "A1001"}, "ok", ORDER),
            ],
        ),
        ("tool_error", [("check_inventory", "call_1", {"sku": "SKU-1"}, "error", None)]),
        (
            "retry",
            [
                ("get_order", "call_1", {"order_id": "B2002"}, "error", None),
                ("get_order", "call_2", {"order_id": "A1001"}, "ok", ORDER),
            ],
        ),
    ],
)
def test_smolagents_final_answer_is_the_answer_not_a_tool_call(scenario, expected):
    run = smol_run(scenario)
    assert [(c.name, c.call_id, c.args, c.status, c.result) for c in run.calls] == expected
    assert "final_answer" not in run.requested_tools()
    assert run.trajectory() == [c[0] for c in expected if c[3] == "ok"]
