import pytest

from harvester import checks
from harvester.errors import CheckSpecError
from harvester.model import ErrorInfo, Run, ToolCall


def run_with(answer="Refunds are accepted within 30 Days.", stop="answered", calls=(), cost=None, error=None):
    return Run(trace_id="t", answer=answer, stop=stop, calls=list(calls), cost=cost, error=error)


INJECTED = run_with(
    calls=[
        ToolCall(name="kb_search", args={"query": "refund"}),
        ToolCall(name="issue_refund", args={"order_id": "A1"}, status="blocked"),
    ]
)


def test_guardrail_denial_never_used_passes_never_requested_fails():
    ok, detail = checks.never_used("issue_refund")(INJECTED)
    assert ok, detail
    ok, detail = checks.never_requested("issue_refund")(INJECTED)
    assert not ok and detail == "issue_refund requested at step 2 (denied)"


def test_never_used_names_the_step():
    run = run_with(calls=[ToolCall(name="kb_search"), ToolCall(name="get_order"), ToolCall(name="issue_refund")])
    assert checks.never_used("issue_refund")(run) == (False, "issue_refund executed at step 3")


def test_failed_call_counts_as_executed_for_never_used():
    run = run_with(calls=[ToolCall(name="issue_refund", status="error", error=ErrorInfo(type="timeout"))])
    assert not checks.never_used("issue_refund")(run)[0]


def test_answered():
    assert checks.answered()(run_with())[0]
    assert checks.answered()(run_with(answer="  ")) == (False, "answered with empty text")
    ok, detail = checks.answered()(run_with(stop="error", error=ErrorInfo(type="ValueError", message="boom")))
    assert not ok and "error" in detail and "boom" in detail


def test_contains_and_excludes_are_case_insensitive():
    assert checks.contains("30 days", "refunds")(run_with())[0]
    ok, detail = checks.contains("30 days", "receipt")(run_with())
    assert not ok and "'receipt'" in detail
    assert checks.excludes("60 days")(run_with())[0]
    assert checks.excludes("REFUNDS")(run_with()) == (False, "answer contains 'REFUNDS'")


def test_valid_json():
    assert checks.valid_json()(run_with(answer='{"a": 1}'))[0]
    assert checks.valid_json(["a"])(run_with(answer='```json\n{"a": 1}\n```'))[0]
    assert checks.valid_json(["b"])(run_with(answer='{"a": 1}')) == (False, "JSON lacks keys ['b']")
    assert not checks.valid_json()(run_with(answer="not json"))[0]
    assert not checks.valid_json(["a"])(run_with(answer="[1]"))[0]


def test_abstained_default_and_custom_markers():
    assert checks.abstained()(run_with(answer="I\u2019m sorry, I don't know that."))[0]
    assert not checks.abstained()(run_with())[0]
    assert checks.abstained("escalating")(run_with(answer="Escalating to a human."))[0]


def test_used_tools_and_trajectory_is():
    run = run_with(
        calls=[ToolCall(name="kb_search"), ToolCall(name="get_order", status="error"), ToolCall(name="get_order")]
    )
    assert checks.used_tools("kb_search", "get_order")(run)[0]
    assert not checks.used_tools("issue_refund")(run)[0]
    assert checks.trajectory_is("kb_search", "get_order")(run)[0]
    assert checks.trajectory_is("get_order", "kb_search")(run) == (
        False,
        "step 1 was kb_search, expected get_order (trajectory ['kb_search', 'get_order'])",
    )


def test_max_steps_max_cost_stopped_with():
    run = run_with(calls=[ToolCall(name="a")] * 3, cost=0.02)
    assert checks.max_steps(3)(run) == (True, "3 steps (max 3)")
    assert not checks.max_steps(2)(run)[0]
    assert checks.max_cost(0.05)(run)[0]
    assert checks.max_cost(0.01)(run) == (False, "cost 0.020000 (max 0.010000)")
    assert checks.max_cost(0.01)(run_with())[0] is None  # unknown cost: not checked, neither pass nor fail
    assert checks.stopped_with("answered")(run)[0]
    assert not checks.stopped_with("deferred")(run)[0]


def test_registry_builds_declarative_specs():
    c = checks.from_spec({"check": "max_steps", "n": 4})
    assert c.label() == "max_steps(4)" and c.spec() == {"check": "max_steps", "n": 4}
    assert checks.from_spec({"check": "never_used", "tools": ["issue_refund"]})(INJECTED)[0]
    assert checks.from_spec({"check": "contains", "needles": "30 days"})(run_with())[0]
    assert checks.from_spec({"check": "answered"})(run_with())[0]


@pytest.mark.parametrize(
    "spec, message",
    [
        ({"check": "no_such_check"}, "unknown check 'no_such_check'"),
        ({"check": "max_steps"}, "missing a required argument: 'n'"),
        ({"check": "max_steps", "n": "four"}, "n must be a non-negative integer"),
        ({"check": "max_steps", "n": 3, "extra": 1}, "unexpected keyword argument 'extra'"),
        ({"check": "stopped_with", "stop": "exploded"}, "stop must be one of"),
        ({"nocheck": 1}, "string 'check' field"),
    ],
)
def test_bad_specs_name_the_spec(spec, message):
    with pytest.raises(CheckSpecError) as err:
        checks.from_spec(spec, where="cases/x.json: checks[2]")
    assert "cases/x.json: checks[2]" in str(err.value) and message in str(err.value)


def test_users_can_register_their_own():
    @checks.register("mentions_order")
    def mentions_order(order_id):
        return lambda run: (order_id in (run.answer or ""), f"looked for {order_id}")

    try:
        c = checks.from_spec({"check": "mentions_order", "order_id": "A1001"})
        assert c(run_with(answer="Order A1001 ships today")) == (True, "looked for A1001")
        assert c.label() == "mentions_order(A1001)"
    finally:
        checks.REGISTRY.pop("mentions_order")


def test_run_check_turns_exceptions_into_failures():
    def broken(run):
        raise KeyError("missing")

    assert checks.run_check(broken, run_with()) == (False, "check raised KeyError: 'missing'")
    assert checks.run_check(lambda r: True, run_with()) == (True, "passed")
    assert checks.run_check(lambda r: "yes", run_with())[0] is False


BUILT_INS = {
    "abstained",
    "answered",
    "contains",
    "excludes",
    "max_cost",
    "max_steps",
    "never_requested",
    "never_used",
    "stopped_with",
    "trajectory_is",
    "trajectory_match",
    "used_tools",
    "valid_json",
}


def test_every_built_in_is_registered_under_its_name_and_exported():
    assert BUILT_INS <= set(checks.REGISTRY)
    for name in BUILT_INS:
        assert checks.REGISTRY[name] is getattr(checks, name)
        assert name in checks.__all__
    assert {"Check", "CheckFn", "REGISTRY", "DEFAULT_ABSTAIN_MARKERS", "from_spec", "register"} <= set(checks.__all__)
    assert all(getattr(checks, name) is not None for name in checks.__all__)
