"""trajectory_match: the run's executed calls against a reference list, agentevals' four modes and
four args modes, on real ``Run`` objects."""

import pytest

from harvester import checks
from harvester.errors import CheckSpecError
from harvester.model import LlmCall, Run, ToolCall, ToolRequest

KB = {"name": "kb_search", "args": {"query": "refund policy"}}
ORDER = {"name": "get_order", "args": {"order_id": "A1001"}}
REFUND = {"name": "issue_refund", "args": {"order_id": "A1001", "amount": 20}}


def call(spec, **kw):
    return ToolCall(name=spec["name"], args=spec.get("args"), **kw)


def run_of(*calls, llm_calls=()):
    return Run(trace_id="t", answer="done", stop="answered", calls=list(calls), llm_calls=list(llm_calls))


def responses(*groups):
    """One model response per group of (call_id, spec): the run's calls and the llm_calls that asked for them."""
    calls, llm = [], []
    for group in groups:
        llm.append(LlmCall(requests=[ToolRequest(name=s["name"], call_id=cid, args=s["args"]) for cid, s in group]))
        calls += [call(s, call_id=cid) for cid, s in group]
    return run_of(*calls, llm_calls=llm)


def match(reference, run, **kw):
    return checks.trajectory_match(reference, **kw)(run)


# -- strict -------------------------------------------------------------------------------------
def test_strict_passes_on_the_same_calls_in_order():
    assert match([KB, ORDER], run_of(call(KB), call(ORDER))) == (
        True,
        "trajectory matches (strict, args exact): 2 reference calls paired",
    )


def test_strict_fails_on_another_order_across_responses():
    run = responses([("c1", KB)], [("c2", ORDER)])
    ok, detail = match([ORDER, KB], run)
    assert not ok
    assert detail.startswith("step 1: expected get_order, got kb_search")


def test_strict_allows_any_order_within_one_model_response():
    together = responses([("c1", KB), ("c2", ORDER)])
    assert match([ORDER, KB], together)[0]
    # the same calls, each from its own response (or with no response known) must keep their order
    assert not match([ORDER, KB], responses([("c1", KB)], [("c2", ORDER)]))[0]
    assert not match([ORDER, KB], run_of(call(KB, call_id="c1"), call(ORDER, call_id="c2")))[0]


def test_strict_groups_do_not_reach_across_responses():
    run = responses([("c1", KB), ("c2", ORDER)], [("c3", REFUND)])
    assert match([ORDER, KB, REFUND], run)[0]
    ok, detail = match([REFUND, KB, ORDER], run)
    assert not ok and detail.startswith("steps 1-2 (one model response): expected issue_refund, kb_search, got ")


def test_strict_ids_reused_across_responses_stay_apart():
    run = responses([("call_0", KB)], [("call_0", ORDER)])
    assert match([KB, ORDER], run)[0]
    assert not match([ORDER, KB], run)[0]


def test_strict_names_the_count_difference_and_differing_args():
    ok, detail = match([KB, ORDER], run_of(call(KB)))
    assert not ok and detail.startswith('run made 1 call, reference has 2: missing get_order({"order_id":"A1001"})')
    ok, detail = match([KB], run_of(call(KB), call(ORDER)))
    assert not ok and detail.startswith('run made 2 calls, reference has 1: extra get_order({"order_id":"A1001"})')
    other = {"name": "get_order", "args": {"order_id": "B2"}}
    ok, detail = match([KB, ORDER], run_of(call(KB), call(other)))
    assert not ok
    assert detail.startswith('step 2: expected get_order({"order_id":"A1001"}), got get_order({"order_id":"B2"})')


# -- unordered, subset, superset ----------------------------------------------------------------
def test_unordered_pairs_every_call_in_any_order():
    assert match([ORDER, KB], run_of(call(KB), call(ORDER)), mode="unordered")[0]
    ok, detail = match([ORDER, KB], run_of(call(KB), call(REFUND)), mode="unordered")
    assert not ok
    assert detail.startswith(
        'missing get_order({"order_id":"A1001"}); extra issue_refund({"amount":20,"order_id":"A1001"})'
    )


def test_subset_the_run_did_nothing_beyond_the_reference():
    assert match([KB, ORDER, REFUND], run_of(call(ORDER), call(KB)), mode="subset") == (
        True,
        "trajectory matches (subset, args exact): 2 run calls paired (reference has 3)",
    )
    ok, detail = match([KB, ORDER], run_of(call(KB), call(REFUND)), mode="subset")
    assert not ok and detail.startswith('extra issue_refund({"amount":20,"order_id":"A1001"}) (subset, args exact')
    assert "missing" not in detail


def test_superset_the_run_did_at_least_the_reference():
    run = run_of(call(KB), call(ORDER), call(REFUND))
    assert match([REFUND, KB], run, mode="superset") == (
        True,
        "trajectory matches (superset, args exact): 2 reference calls paired",
    )
    ok, detail = match([ORDER, KB], run_of(call(KB)), mode="superset")
    assert not ok and detail.startswith('missing get_order({"order_id":"A1001"}) (superset, args exact')
    assert detail.endswith("run called ['kb_search'])")


def test_repeats_count():
    assert not match([KB, KB], run_of(call(KB)), mode="superset")[0]
    assert match([KB, KB], run_of(call(KB), call(KB)), mode="superset")[0]
    assert not match([KB], run_of(call(KB), call(KB)), mode="subset")[0]
    assert not match([KB, KB], run_of(call(KB)), mode="unordered")[0]


def test_blocked_calls_are_not_the_runs_work():
    run = run_of(call(KB), call(REFUND, status="blocked"), call(ORDER, status="error"))
    assert match([KB, ORDER], run)[0]
    ok, detail = match([KB, REFUND], run, mode="superset")
    assert not ok and detail.startswith("missing issue_refund(")


def test_details_list_three_calls_then_how_many_more():
    reference = [{"name": f"tool_{i}", "args": {}} for i in range(5)]
    ok, detail = match(reference, run_of(), mode="superset")
    assert not ok and detail.startswith("missing tool_0(), tool_1(), tool_2() and 2 more")


def test_long_args_are_truncated_in_details():
    big = {"name": "kb_search", "args": {"query": "x" * 200}}
    ok, detail = match([big], run_of(), mode="superset")
    shown = detail.split("missing ", 1)[1].split(" (", 1)[0]
    assert not ok and shown.endswith("...)") and len(shown) < 100


# -- args modes ---------------------------------------------------------------------------------
def test_exact_args_compare_canonically():
    reference = [{"name": "get_order", "args": {"order_id": "A1001", "limit": 1, "opts": {"b": 2, "a": 1}}}]
    same = {"name": "get_order", "args": {"opts": {"a": 1.0, "b": 2}, "limit": 1.0, "order_id": "A1001"}}
    assert match(reference, run_of(call(same)))[0]
    assert not match([ORDER], run_of(call({"name": "get_order", "args": {"order_id": "A1002"}})))[0]


def test_no_args_reads_as_empty_args():
    assert match([{"name": "kb_search"}], run_of(ToolCall(name="kb_search", args={})))[0]
    assert match([{"name": "kb_search", "args": {}}], run_of(ToolCall(name="kb_search")))[0]


def test_ignore_args_pairs_any_args_but_never_another_name():
    other = {"name": "get_order", "args": {"order_id": "ZZZ"}}
    assert match([ORDER], run_of(call(other)), args="ignore")[0]
    assert not match([ORDER], run_of(call(KB)), args="ignore")[0]


def test_subset_and_superset_args_directions():
    narrow = {"name": "get_order", "args": {"order_id": "A1001"}}
    wide = {"name": "get_order", "args": {"order_id": "A1001", "verbose": True}}
    # subset: every key of the RUN call's args is in the reference's, with an equal value
    assert match([wide], run_of(call(narrow)), args="subset")[0]
    assert not match([narrow], run_of(call(wide)), args="subset")[0]
    # superset: every key of the REFERENCE call's args is in the run call's, with an equal value
    assert match([narrow], run_of(call(wide)), args="superset")[0]
    assert not match([wide], run_of(call(narrow)), args="superset")[0]
    # a shared key with another value pairs in neither
    changed = {"name": "get_order", "args": {"order_id": "B2", "verbose": True}}
    assert not match([narrow], run_of(call(changed)), args="superset")[0]
    assert not match([changed], run_of(call(narrow)), args="subset")[0]


def test_subset_and_superset_args_fall_back_to_equality_for_non_objects():
    listed = {"name": "kb_search", "args": ["refund", "policy"]}
    shorter = {"name": "kb_search", "args": ["refund"]}
    for mode in ("subset", "superset"):
        assert match([listed], run_of(call(listed)), args=mode)[0]
        assert not match([listed], run_of(call(shorter)), args=mode)[0]
        assert not match([ORDER], run_of(ToolCall(name="get_order", args="A1001")), args=mode)[0]


def test_overrides_set_the_args_mode_per_tool():
    run = run_of(call({"name": "kb_search", "args": {"query": "returns"}}), call(ORDER))
    exact_orders = {"get_order": "exact"}
    assert match([KB, ORDER], run, args="ignore", overrides=exact_orders)[0]
    other_order = run_of(call(KB), call({"name": "get_order", "args": {"order_id": "B2"}}))
    ok, detail = match([KB, ORDER], other_order, args="ignore", overrides=exact_orders)
    assert not ok and "get_order args exact" in detail
    assert match([KB, ORDER], other_order, args="exact", overrides={"get_order": "ignore"})[0]


def test_ignore_paths_drop_args_on_both_sides():
    reference = [{"name": "get_order", "args": {"order_id": "A1001", "request_id": "r-1", "meta": {"ts": 1, "n": 2}}}]
    seen = {"name": "get_order", "args": {"order_id": "A1001", "request_id": "r-9", "meta": {"ts": 7, "n": 2}}}
    assert not match(reference, run_of(call(seen)))[0]
    assert match(reference, run_of(call(seen)), ignore={"get_order": ["request_id", "meta.ts"]})[0]
    assert match(reference, run_of(call(seen)), ignore={"get_order": ["request_id", "*.ts"]})[0]
    assert not match(reference, run_of(call(seen)), ignore={"get_order": ["request_id"]})[0]
    assert not match(reference, run_of(call(seen)), ignore={"kb_search": ["request_id", "meta.ts"]})[0]
    # the detail shows the args as called, ignored paths included
    ok, detail = match(reference, run_of(), mode="superset", ignore={"get_order": ["request_id"]})
    assert not ok and '"request_id":"r-1"' in detail


def test_a_real_matching_where_first_fit_fails():
    a = {"name": "search", "args": {"q": 1}}
    b = {"name": "search", "args": {"q": 1, "k": 2}}
    x = {"name": "search", "args": {"q": 1, "k": 2}}
    y = {"name": "search", "args": {"q": 1}}
    run = run_of(call(x), call(y))
    assert match([a, b], run, mode="superset", args="superset")[0]
    assert match([a, b], run, mode="unordered", args="superset")[0]
    assert match([b, a], run_of(call(y), call(x)), mode="subset", args="subset")[0]


# -- declarative form ---------------------------------------------------------------------------
def test_from_spec_round_trips():
    spec = {
        "check": "trajectory_match",
        "reference": [KB, ORDER],
        "mode": "superset",
        "args": "ignore",
        "overrides": {"get_order": "exact"},
        "ignore": {"get_order": ["request_id"]},
    }
    built = checks.from_spec(spec)
    assert built.spec() == spec
    again = checks.from_spec(built.spec())
    assert again.spec() == spec and again.label() == built.label()
    runs = [
        run_of(call(KB), call({"name": "get_order", "args": {"order_id": "A1001", "request_id": "r"}})),
        run_of(call(KB), call({"name": "get_order", "args": {"order_id": "B2"}})),
        run_of(call(ORDER)),
    ]
    assert [built(r) for r in runs] == [again(r) for r in runs]
    assert [built(r)[0] for r in runs] == [True, False, False]


def test_spec_names_overrides_and_ignore_only_when_given():
    built = checks.trajectory_match([{"name": "kb_search"}])
    assert built.spec() == {
        "check": "trajectory_match",
        "reference": [{"name": "kb_search", "args": {}}],
        "mode": "strict",
        "args": "exact",
    }
    assert built.label() == "trajectory_match(strict, args exact: kb_search)"  # the reference's names, not its args
    assert checks.from_spec(built.spec())(run_of(ToolCall(name="kb_search")))[0]


@pytest.mark.parametrize(
    "fields, message",
    [
        (
            {"reference": [KB], "mode": "sideways"},
            "mode must be one of strict, unordered, subset, superset, got 'sideways'",
        ),
        ({"reference": [KB], "args": "fuzzy"}, "args must be one of exact, ignore, subset, superset, got 'fuzzy'"),
        (
            {"reference": [KB], "overrides": {"get_order": "loose"}},
            "overrides['get_order'] must be one of exact, ignore, subset, superset, got 'loose'",
        ),
        ({"reference": {"name": "kb_search"}}, "reference must be a list of calls"),
        ({"reference": "kb_search"}, "got str 'kb_search'"),
        ({"reference": [KB, {"args": {}}]}, "reference[1] must be an object with a string 'name'"),
        ({"reference": [{"name": 3}]}, "reference[0] must be an object with a string 'name', got {'name': 3}"),
        ({"reference": [KB], "ignore": {"kb_search": "query"}}, "ignore['kb_search'] must be a list"),
        ({"mode": "strict"}, "missing a required argument: 'reference'"),
    ],
)
def test_bad_specs_name_the_bad_value(fields, message):
    where = "cases/x.json: checks[1]"
    with pytest.raises(CheckSpecError) as err:
        checks.from_spec({"check": "trajectory_match", **fields}, where=where)
    assert err.value.field == where
    assert "bad arguments for check 'trajectory_match'" in str(err.value) and message in str(err.value)
