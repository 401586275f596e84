"""The shadow's parts without a replay: the comparison of one run, the intervals, the stratified
allocation, its gates and the merge of shard reports."""

from __future__ import annotations

import pytest

from harvester.config import Config
from harvester.errors import GateError, ReportFormatError
from harvester.harvest import case_from_run
from harvester.report import Call, CaseResult
from harvester.shadow import ShadowReport, compare, judge, merge, parse_gates, wilson
from harvester.shadow._select import allocate
from tests.builders.runs import call, run

CONFIG = Config(mutating_tools=["issue_refund"])


def _result(*calls: Call, answer: str = "Yes, within 30 days.", **kw) -> CaseResult:
    return CaseResult(id="x", passed=True, calls=list(calls), trajectory=[c.tool for c in calls if c.status == "ok"],
                      steps=len(calls), stop="answered", answer=answer, **kw)  # fmt: skip


def test_the_same_behaviour_is_no_change():
    prod = run(call("kb_search", args={"q": "refund"}))
    change = compare(prod, case_from_run(prod, config=CONFIG), _result(Call(tool="kb_search", args='{"q":"refund"}')),
                     CONFIG)  # fmt: skip
    assert change.flags() == [] and not change.changed and not change.worse


def test_a_newly_mutating_call_other_args_and_a_dropped_call():
    prod = run(call("kb_search", args={"q": "refund"}), call("get_order", args={"id": "A1"}))
    now = _result(
        Call(tool="kb_search", args='{"q":"refunds"}'),
        Call(tool="issue_refund", args='{"id":"A1"}'),
        answer="Refunded.",
    )
    change = compare(prod, case_from_run(prod, config=CONFIG), now, CONFIG)
    assert change.new_mutating == ["issue_refund"] and change.new_calls == ["issue_refund"]
    assert change.dropped_calls == ["get_order"] and change.args_changed == ["kb_search"]
    assert change.answer_changed and change.worse
    assert change.flags()[0] == "new_mutating" and "changed" in change.flags()


def test_a_call_production_denied_is_forbidden_and_newly_mutating_when_executed():
    prod = run(call("kb_search"), call("delete_account", status="blocked"))
    now = _result(Call(tool="kb_search", args='{"q":"kb_search"}'), Call(tool="delete_account", status="ok"))
    change = compare(prod, case_from_run(prod, config=CONFIG), now, CONFIG)
    assert change.new_mutating == ["delete_account"]  # not in mutating_tools: the run's case forbids it
    assert change.kind == ("blocked_action", None) and not change.fixed  # no fix: it went through


def test_newly_failed_and_fixed_read_the_failure_kind_both_sides():
    prod = run(call("get_order", args={"id": "A1"}))
    now = _result(Call(tool="get_order", args='{"id":"A1"}', status="error"), answer="Sorry.")
    change = compare(prod, case_from_run(prod, config=CONFIG), now, CONFIG)
    assert change.kind == (None, "tool_error") and change.newly_failed and change.worse
    back = compare(run(call("get_order", status="error")), case_from_run(prod, config=CONFIG),
                   _result(Call(tool="get_order", args='{"q":"get_order"}')), CONFIG)  # fmt: skip
    assert back.fixed and not back.newly_failed


def test_wilson_intervals():
    assert wilson(0, 0) == (0.0, 1.0)
    lo, hi = wilson(0, 300)
    assert lo == 0.0 and hi == pytest.approx(0.01264, abs=1e-4)
    lo, hi = wilson(50, 300)
    assert lo == pytest.approx(0.1290, abs=1e-3) and hi == pytest.approx(0.2127, abs=1e-3)


def test_allocation_is_proportional_and_sees_every_stratum():
    sizes = {("a", False): 90, ("a", True): 9, ("b", False): 1}
    assert allocate(sizes, 10) == {("a", False): 8, ("a", True): 1, ("b", False): 1}
    assert allocate(sizes, 1000) == sizes  # never more than a stratum holds
    assert sum(allocate(sizes, 2).values()) == 2
    assert allocate({("a", False): 900, ("a", True): 100}, 100) == {("a", False): 90, ("a", True): 10}


def test_gates_take_shadow_metrics_only():
    gates = parse_gates(["new_mutating<=0", "same>=0.9", "mean_cost_delta<=0.01"])
    report = ShadowReport()
    assert [g.passed for g in judge(report, gates)] == [True, False, False]  # no runs: same is 0, cost unknown
    for bad, needle in [
        ("task_completion>=1", "unknown metric 'task_completion'"),
        ("tag:security>=1", "unknown metric 'tag:security'"),
        ("delta:same>=0", "compares with a baseline"),
        ("newly_failed<=5", "a rate from 0 to 1"),
    ]:
        with pytest.raises(GateError, match=needle):
            parse_gates([bad])


def test_merge_refuses_a_missing_shard_and_a_run_twice():
    prod = run(call("kb_search"))
    change = compare(prod, case_from_run(prod, config=CONFIG), _result(answer="other"), CONFIG)
    one = ShadowReport(shard="1/2")
    one.add(change, _result(), "kb_search")
    with pytest.raises(ReportFormatError, match="missing shard 2/2"):
        merge([one])
    two = ShadowReport(shard="2/2")
    two.add(change, _result(), "kb_search")
    with pytest.raises(ReportFormatError, match="appears in two reports"):
        merge([one, two])


def test_redaction_keeps_the_runs_ids_and_redacts_their_text():
    """A trace id's digits can read as a card number: the ids must survive, the prompt's card must not."""
    from harvester.redact import Redactor, redaction_for
    from harvester.shadow import RunChange

    key = "2d379c5c940a373b405943e776230217-42912919ac518d83"
    report = ShadowReport()
    report.changes.append(RunChange(id=key, trace_id=key[:32], run_id=key[33:], prompt="card 4111 1111 1111 1111"))
    redactor = Redactor.from_option(redaction_for(Config()))
    assert redactor is not None and redactor.redact_value(key) != key  # the hazard is real
    shown = report.redacted(redactor).changes[0]
    assert (shown.id, shown.trace_id, shown.run_id) == (key, key[:32], key[33:])
    assert "4111" not in shown.prompt
