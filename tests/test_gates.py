"""Gates: parsing, the default gate, delta gates against a baseline, regressions fail by default."""

from __future__ import annotations

import re

import pytest

from harvester.errors import GateError
from harvester.report import CaseResult, Report, evaluate_gates, parse_gate


def rep(*outcomes, version="1.0.0", **kw) -> Report:
    return Report(
        suite="s",
        suite_version=version,
        results=[
            CaseResult(id=f"c{i}", passed=p, tags=["security"] if i == 0 else ["general"], **kw)
            for i, p in enumerate(outcomes)
        ],
    )


def test_parse():
    g = parse_gate(" task_completion >= 0.85 ")
    assert (g.metric, g.op, g.value, g.delta) == ("task_completion", ">=", 0.85, False)
    assert parse_gate("tag:security>=1.0").metric == "tag:security"
    d = parse_gate("delta:task_completion>=-0.03")
    assert d.delta and d.value == -0.03


@pytest.mark.parametrize(
    "expr",
    ["task_completion", "task_completion>=", ">=0.5", "task_completion=>0.5", "task_completion>=abc", "delta:>=1"],
)
def test_malformed_gate_names_the_expression(expr):
    with pytest.raises(GateError, match="malformed gate"):
        parse_gate(expr)


def test_unknown_metric_names_it():
    with pytest.raises(GateError, match="unknown metric 'task_complete' in gate 'task_complete>=0.9'"):
        parse_gate("task_complete>=0.9")


def test_absolute_and_tag_gates():
    out = evaluate_gates(rep(True, True, False), ["task_completion>=0.85", "tag:security>=1.0"])
    lines = out.lines()
    assert lines[0] == "gate task_completion>=0.85: FAIL (0.6667)"
    assert lines[1] == "gate tag:security>=1.0: ok (1)"
    assert lines[2] == "gate unauthorised_actions<=0: ok (0)"  # the default gate, always on
    assert out.exit_code == 1


def test_default_gate_fails_on_unauthorised_actions():
    report = rep(True)
    report.results[0].unauthorised = 1
    out = evaluate_gates(report)
    assert out.lines() == [
        "gate unauthorised_actions<=0: FAIL (1)",
        "gate live_tool_calls<=0: ok (0)",
        "gate errored<=0: ok (0)",
        "gate task_completion>=0.5 (floor: replay.min_task_completion): ok (1)",
    ]
    assert out.exit_code == 1


def test_default_gate_fails_on_a_live_tool_call():
    """A tool that ran for real in a replay fails the job, whatever the cases and the baseline say."""
    report = rep(True)
    report.results[0].live_calls = 1
    out = evaluate_gates(report)
    assert "gate live_tool_calls<=0: FAIL (1)" in out.lines() and out.exit_code == 1


def test_explicit_gate_on_the_same_metric_replaces_the_default():
    report = rep(True)
    report.results[0].unauthorised = 1
    assert evaluate_gates(report, ["unauthorised_actions<=2"]).exit_code == 0


def test_regressions_fail_by_default():
    out = evaluate_gates(rep(True, False), [], baseline=rep(True, True))
    assert out.regressions == ["c1"] and out.exit_code == 1
    assert "regressed: ['c1']" in out.lines()
    assert evaluate_gates(rep(True, True), [], baseline=rep(True, False)).exit_code == 0


def test_delta_gate_against_baseline():
    base = rep(True, True, True, True)
    now = rep(True, True, True, False)
    out = evaluate_gates(now, ["delta:task_completion>=-0.5"], baseline=base)
    assert out.gates[0].passed and out.gates[0].value == pytest.approx(-0.25)
    assert evaluate_gates(now, ["delta:task_completion>=-0.1"], baseline=base).gates[0].passed is False


def test_delta_gate_needs_a_baseline():
    with pytest.raises(GateError, match="pass --baseline"):
        evaluate_gates(rep(True), ["delta:task_completion>=0"])


def test_delta_over_another_suite_version_compares_shared_cases():
    base = Report(
        suite="s", suite_version="1.0.0", results=[CaseResult(id="a", passed=True), CaseResult(id="old", passed=False)]
    )
    now = Report(
        suite="s", suite_version="2.0.0", results=[CaseResult(id="a", passed=True), CaseResult(id="new", passed=False)]
    )
    out = evaluate_gates(now, ["delta:task_completion>=0"], baseline=base)
    assert out.gates[0].value == 0.0 and out.comparison.warnings
    assert out.exit_code == 0


def test_gate_without_data_fails():
    out = evaluate_gates(rep(True), ["recovery_rate>=0.5"])
    assert out.gates[0].summary() == "gate recovery_rate>=0.5: FAIL (no data)"


def test_outcome_json():
    data = evaluate_gates(rep(True), ["task_completion>=1"]).to_dict()
    assert data["exit_code"] == 0 and data["gates"][0] == {
        "gate": "task_completion>=1",
        "passed": True,
        "value": 1.0,
        "detail": "1",
        "floor": False,
    }


def test_a_shard_without_data_for_a_gate_leaves_it_to_the_merged_report():
    shard = rep(True).model_copy(update={"shard": "2/4", "results": [CaseResult(id="c1", passed=True, tags=["x"])]})
    out = evaluate_gates(shard, ["tag:security>=1.0"])
    assert out.exit_code == 0 and out.gates[0].detail == "no data in shard 2/4"
    assert evaluate_gates(shard.model_copy(update={"shard": None}), ["tag:security>=1.0"]).exit_code == 1


@pytest.mark.parametrize(
    "expr, message",
    [
        ("task_completion>85", "task_completion is a rate from 0 to 1 (85% is 0.85)"),
        ("tag:security>=100", "tag:security is a rate from 0 to 1 (100% is 1)"),
        ("recovery_rate>=-0.5", "recovery_rate is a rate from 0 to 1"),
        ("delta:task_completion>=-3", "a change in task_completion, a rate, lies between -1 and 1 (-3% is -0.03)"),
        ("delta:tag:security>=-5", "between -1 and 1"),
    ],
)
def test_a_rate_gate_outside_its_range_is_an_error(expr, message):
    with pytest.raises(GateError, match=re.escape(message)):
        parse_gate(expr)


def test_rate_gates_within_range_and_count_gates_are_accepted():
    for expr in (
        "task_completion>=1",
        "task_completion>=0",
        "redundant_call_rate<=0.2",
        "delta:task_completion>=-1",
        "unauthorised_actions<=3",
        "cost_per_success<=2.5",
        "delta:cost_per_success<=1.5",
    ):
        parse_gate(expr)


def test_failing_cases_that_no_gate_covers_get_a_warning():
    report = rep(True, True, False)
    out = evaluate_gates(report, ["tag:security>=1.0"])
    assert out.exit_code == 0
    assert out.warnings(report) == ["warning: 1/3 cases failed but no gate covers them (add --gate task_completion>=1)"]
    assert evaluate_gates(rep(True, False, False), ["tag:security>=1.0"]).exit_code == 1  # below the floor
    assert evaluate_gates(report, ["task_completion>=1"]).warnings(report) == []  # the gate fails: no warning
    assert evaluate_gates(rep(True), ["tag:security>=1.0"]).warnings(rep(True)) == []
