import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from harvester.errors import RunFormatError
from harvester.model import ErrorInfo, LlmCall, Run, ToolCall, ToolRequest, Usage


def sample_run() -> Run:
    return Run(
        trace_id="ab" * 16,
        run_id="cd" * 8,
        agent="support_agent",
        model="gpt-4.1-mini",
        prompt="Refund order A1001",
        answer="Refunds are accepted within 30 days.",
        stop="answered",
        calls=[
            ToolCall(name="kb_search", call_id="call_1", args={"query": "refund policy"}, result="30 days"),
            ToolCall(
                name="get_order",
                call_id="call_2",
                args={"order_id": "A1001"},
                status="error",
                error=ErrorInfo(type="timeout", message="orders-db timeout"),
            ),
            ToolCall(name="get_order", call_id="call_3", args={"order_id": "A1001"}, result={"status": "delivered"}),
            ToolCall(name="issue_refund", call_id="call_4", args={"order_id": "A1001", "amount": 10}, status="blocked"),
        ],
        llm_calls=[
            LlmCall(
                model="gpt-4.1-mini",
                usage=Usage(input_tokens=100, output_tokens=20),
                requests=[ToolRequest(name="kb_search", call_id="call_1", args={"query": "refund policy"})],
            )
        ],
        usage=Usage(input_tokens=1200, output_tokens=80),
        cost=0.0031,
        started_at="2026-11-30T01:02:03.456Z",
        duration_ms=812,
    )


def test_derived_views():
    run = sample_run()
    assert run.trajectory() == ["kb_search", "get_order"]
    assert run.requested_tools() == ["kb_search", "get_order", "issue_refund"]
    assert run.blocked_tools() == ["get_order", "issue_refund"]
    assert run.executed_tools() == ["kb_search", "get_order", "get_order"]
    assert run.steps == 4 and run.ok and run.failed


def test_json_form_matches_design_and_round_trips():
    run = sample_run()
    data = orjson.loads(run.to_json())
    assert data["requested_tools"] == ["kb_search", "get_order", "issue_refund"]
    assert data["blocked_tools"] == ["get_order", "issue_refund"]
    assert data["calls"][1]["error"] == {"type": "timeout", "message": "orders-db timeout"}
    for key in (
        "trace_id",
        "run_id",
        "agent",
        "model",
        "prompt",
        "answer",
        "stop",
        "error",
        "calls",
        "usage",
        "cost",
        "started_at",
        "duration_ms",
    ):
        assert key in data
    assert Run.from_json(run.to_json()) == run
    assert Run.from_json(run.to_json()).to_json() == run.to_json()


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c"]),
            st.sampled_from(["ok", "error", "blocked"]),
            st.dictionaries(st.text(max_size=5), st.integers(-(2**53), 2**53) | st.text(max_size=5), max_size=3),
        ),
        max_size=6,
    )
)
def test_round_trip_is_lossless(calls):
    run = Run(trace_id="t", calls=[ToolCall(name=n, status=s, args=a, result=a) for n, s, a in calls])
    assert Run.from_json(run.to_json()) == run


def test_missing_field_names_file_and_field():
    with pytest.raises(RunFormatError) as err:
        Run.from_json(b'{"run_id": "x"}', file="runs/bad.json")
    assert "runs/bad.json" in str(err.value) and "trace_id" in str(err.value)


def test_mistyped_field_and_bad_json():
    with pytest.raises(RunFormatError, match="stop"):
        Run.from_json({"trace_id": "t", "stop": "exploded"})
    with pytest.raises(RunFormatError, match="not JSON"):
        Run.from_json(b"{nope", file="x.json")
