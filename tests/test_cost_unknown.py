"""An unknown cost is not a zero cost: ``max_cost`` is "not checked", cost gates count only the cases
whose cost is known and say how many they left out, and unknown token counts price to None."""

from __future__ import annotations

import pytest

from harvester import checks
from harvester.config import Config
from harvester.instrument import agent_run
from harvester.model import Run, Usage
from harvester.replay import replay
from harvester.report import CaseResult, Report, evaluate_gates
from tests.builders.agents import GOOD, case, kb_search

PRICES = {"m1": {"input": 1.0, "output": 1.0}}  # USD per 1k tokens: GOOD's 200+20 tokens cost 0.22


def priced_run(cost):
    return Run(trace_id="t" * 32, answer="Refunds within 30 days.", stop="answered", cost=cost)


def untokened(prompt):
    """An instrumented agent whose spans carry no token counts (its framework reports none)."""
    with agent_run("support", prompt, model="m1") as run:
        text = kb_search(query="refund policy")
        run.finish(text)
    return text


# -- the check ----------------------------------------------------------------------------------
def test_max_cost_on_an_unknown_cost_is_not_checked():
    check = checks.max_cost(0.05)
    assert check(priced_run(None)) == (None, "not checked: cost unknown (token counts or prices missing)")
    assert check(priced_run(0.01)) == (True, "cost 0.010000 (max 0.050000)")
    assert check(priced_run(0.0)) == (True, "cost 0.000000 (max 0.050000)")  # a known zero is checked
    assert check(priced_run(0.08)) == (False, "cost 0.080000 (max 0.050000)")


def test_the_declarative_form_and_run_check_keep_not_checked():
    check = checks.from_spec({"check": "max_cost", "limit": 0.05})
    assert checks.run_check(check, priced_run(None)) == (
        None,
        "not checked: cost unknown (token counts or prices missing)",
    )


# -- a replayed case ----------------------------------------------------------------------------
def test_a_replayed_case_with_an_unknown_cost_passes_and_the_summary_says_not_checked():
    report = replay([case(max_cost=0.05)], lambda: untokened, prices=PRICES)
    (r,) = report.results
    assert r.passed, r.reasons()
    assert r.cost is None
    (check,) = [c for c in r.checks if c.name == "max_cost(0.05)"]
    assert check.passed is None and check.detail.startswith("not checked: cost unknown")
    lines = report.summary().splitlines()
    assert "c1: max_cost(0.05): not checked: cost unknown (token counts or prices missing)" in next(
        line for line in lines if line.startswith("not checked (1): ")
    )
    assert "total cost n/a" in report.summary()


def test_without_prices_the_cost_is_unknown_too():
    (r,) = replay([case(max_cost=0.05)], lambda: GOOD).results
    assert r.passed and r.cost is None
    assert [c.passed for c in r.checks if c.name == "max_cost(0.05)"] == [None]


def test_a_known_cost_is_still_checked():
    report = replay([case(max_cost=0.05)], lambda: GOOD, prices=PRICES)
    (r,) = report.results
    assert r.cost == pytest.approx(0.22)
    assert not r.passed and "max_cost(0.05): cost 0.220000 (max 0.050000)" in r.reasons()
    assert "not checked" not in report.summary()


# -- cost gates ---------------------------------------------------------------------------------
def rep(*costs, passed=True, **kw) -> Report:
    return Report(
        suite="s",
        results=[CaseResult(id=f"c{i}", passed=passed, cost=cost, **kw) for i, cost in enumerate(costs)],
    )


def gate(report, expr, baseline=None):
    out = evaluate_gates(report, [expr], baseline=baseline)
    (result,) = [g for g in out.gates if g.expr == expr]
    return result


def test_a_cost_gate_counts_only_the_known_costs_and_says_what_it_left_out():
    report = rep(0.01, 0.03, None)
    assert report.metrics()["cost_per_success"] == pytest.approx(0.02)  # not 0.04 / 3
    g = gate(report, "cost_per_success<=0.05")
    assert g.passed and g.value == pytest.approx(0.02)
    assert g.detail == "0.02 (1 of 3 cases left out: cost unknown)"
    assert g.summary() == "gate cost_per_success<=0.05: ok (0.02 (1 of 3 cases left out: cost unknown))"


def test_a_success_whose_cost_is_unknown_is_not_a_free_success():
    g = gate(rep(0.04, None), "cost_per_success<=0.03")
    assert not g.passed and g.value == pytest.approx(0.04)  # 0.04 / 2 would have passed
    assert g.detail == "0.04 (1 of 2 cases left out: cost unknown)"


def test_with_every_cost_known_the_detail_is_the_value():
    assert gate(rep(0.01, 0.03), "cost_per_success<=0.05").detail == "0.02"


def test_with_no_cost_known_the_gate_fails_as_no_data_and_says_why():
    g = gate(rep(None, None), "cost_per_success<=0.05")
    assert not g.passed and g.value is None
    assert g.detail == "no data (2 of 2 cases left out: cost unknown)"


def test_a_shard_without_known_costs_leaves_the_gate_to_the_merged_report():
    report = rep(None).model_copy(update={"shard": "1/2"})
    g = gate(report, "cost_per_success<=0.05")
    assert g.passed and g.detail == "no data in shard 1/2 (1 of 1 cases left out: cost unknown)"


def test_recovery_variants_are_not_counted_as_cases_left_out():
    report = rep(0.01, None)
    report.results.append(CaseResult(id="c0@timeout", passed=True, cost=None, variant_of="c0"))
    assert gate(report, "cost_per_success<=0.05").detail == "0.01 (1 of 2 cases left out: cost unknown)"


def test_other_gates_never_mention_cost():
    assert gate(rep(0.01, None), "task_completion>=1").detail == "1"


def test_a_cost_delta_compares_the_cases_priced_in_both_reports():
    """Case c1 lost its token counts: the delta must not read that as "c1 got cheaper"."""
    baseline = rep(0.01, 0.10)
    now = rep(0.01, None)
    g = gate(now, "delta:cost_per_success<=0", baseline=baseline)
    assert g.value == pytest.approx(0.0), g  # c0 alone, in both: no change
    assert g.passed and g.detail == "0 (1 of 2 cases left out: cost unknown)"
    dearer = gate(rep(0.02, None), "delta:cost_per_success<=0", baseline=baseline)
    assert not dearer.passed and dearer.value == pytest.approx(0.01)


# -- pricing unknown usage ----------------------------------------------------------------------
def test_unknown_token_counts_price_to_none():
    config = Config(prices=PRICES)
    assert Usage().input_tokens is None and Usage().output_tokens is None and Usage().total is None
    assert config.cost("m1", Usage()) is None
    assert config.cost("m1", {"input_tokens": None, "output_tokens": None}) is None
    assert config.cost("m1", Usage(input_tokens=1000)) is None  # half a count would under-price the run
    assert config.cost("m1", Usage(input_tokens=0, output_tokens=0)) == 0.0  # known zero tokens cost nothing
    assert config.cost("m1", Usage(input_tokens=1000, output_tokens=500)) == pytest.approx(1.5)
    assert Config().cost("m1", Usage(input_tokens=1000, output_tokens=500)) is None  # no price for the model


def test_unknown_usage_adds_up_to_unknown_and_prints_a_question_mark():
    total = Usage() + Usage()
    assert total.total is None and total.text() == "?+?"
    assert (Usage() + Usage(input_tokens=5, output_tokens=1)).total is None  # unknown plus known: unknown
    assert (Usage(input_tokens=1, output_tokens=2) + Usage(input_tokens=5, output_tokens=1)).total == 9


def test_a_comparisons_cost_delta_counts_only_cases_priced_in_both():
    from harvester.report import CaseResult, Report

    def rep(*results):
        return Report(suite="s", results=list(results))

    def res(id, cost):
        return CaseResult(id=id, passed=True, checks=[], cost=cost, passes=1)

    base = rep(res("a", 0.01), res("b", 0.09))
    now = rep(res("a", 0.01), res("b", None))  # b's tokens went missing: not "b got cheaper"
    was, is_ = now.compare(base).deltas["cost_per_success"]
    assert was == is_ == pytest.approx(0.01)
