"""Verdicts that more trials never weaken: regressions whatever the trial counts, inconclusive drops
(exit 3, with the trials that would decide them), the --inconclusive policy, flips and step changes."""

from __future__ import annotations

import orjson
import pytest
from click.testing import CliRunner

from harvester.cli import main as cli
from harvester.report import CaseResult, Report, evaluate_gates
from harvester.report._verdict import verdict


def res(id: str, passes: int, trials: int, steps: int = 1, **kw) -> CaseResult:
    return CaseResult(id=id, passed=passes == trials, passes=passes, trials=trials, steps=steps, **kw)


def rep(*results: CaseResult, trials: int = 1) -> Report:
    return Report(suite="s", suite_version="1.0.0", trials=trials, results=list(results))


def test_every_trial_failing_after_every_trial_passed_is_a_regression_whatever_the_counts():
    base = rep(*[res(f"c{i}", 1, 1) for i in range(13)])
    now = rep(*[res(f"c{i}", 0 if i < 7 else 4, 4) for i in range(13)], trials=4)
    outcome = evaluate_gates(now, [], base)
    assert outcome.regressions == [f"c{i}" for i in range(7)] and outcome.exit_code == 1
    assert any("the baseline ran 1 trial per case, this run 4" in w for w in outcome.comparison.warnings)
    assert "release gate: FAIL (7 cases regressed, 1 gate failed)" == outcome.summary()  # 6/13: below the floor
    improved = evaluate_gates(rep(res("c", 4, 4), trials=4), [], rep(res("c", 0, 1))).comparison
    assert improved.improved == ["c"] and improved.pass_to_fail == [] and improved.fail_to_pass == ["c"]


def test_a_drop_the_trials_cannot_decide_is_inconclusive_and_exits_3():
    base, now = rep(res("c1", 1, 1)), rep(res("c1", 2, 4), trials=4)
    outcome = evaluate_gates(now, [], base)
    assert outcome.regressions == [] and outcome.inconclusive == ["c1"] and outcome.exit_code == 3
    detail = outcome.comparison.decides["c1"]
    assert detail == "passed 1/1 trials, now 2/4: 8 trials on each side would decide it"
    assert "inconclusive: c1 (passed 1/1 trials, now 2/4: 8 trials on each side would decide it)" in outcome.lines()
    assert outcome.summary() == "release gate: INCONCLUSIVE (1 case inconclusive: more trials would decide; exit 3)"
    assert evaluate_gates(now, [], base, inconclusive="fail").exit_code == 1
    assert evaluate_gates(now, [], base, inconclusive="pass").exit_code == 0
    assert evaluate_gates(now, [], base, inconclusive="pass").summary().startswith("release gate: PASS (1 case")


def test_partial_drops_are_tested_when_the_trials_can_reach_alpha():
    assert verdict((10, 10), (3, 10), 0.05).kind == "regressed"
    changed = verdict((4, 4), (2, 4), 0.05)  # could be significant, is not: no verdict change
    assert changed.kind == "changed" and changed.p == pytest.approx(3 / 14)
    assert verdict((4, 4), (2, 4), 0.5).kind == "regressed"  # alpha is the user's
    more = verdict((5, 5), (4, 5), 0.05)
    assert more.kind == "changed"  # 5 vs 5 can reach 0.05 (all vs none): tested, not significant
    ask = verdict((3, 3), (2, 3), 0.05)
    assert ask.kind == "inconclusive" and ask.needed is not None
    assert verdict((1, 1), (1, 1), 0.05).kind == "same" and verdict((2, 4), (1, 2), 0.05).kind == "same"


def test_flips_and_step_changes_are_listed_beside_the_aggregates():
    base = rep(res("a", 1, 1, steps=2), res("b", 0, 1), res("c", 1, 1))
    now = rep(res("a", 1, 1, steps=3), res("b", 1, 1), res("c", 0, 1))
    comparison = now.compare(base)
    assert (comparison.pass_to_fail, comparison.fail_to_pass) == (["c"], ["b"])
    assert comparison.steps == {"a": (2, 3)}
    lines = comparison.lines()
    assert "flips: pass -> fail ['c']   fail -> pass ['b']" in lines and "  steps: a 2 -> 3" in lines
    data = comparison.to_dict()
    assert data["flips"] == {"pass_to_fail": ["c"], "fail_to_pass": ["b"]}
    assert data["steps_changed"] == {"a": {"baseline": 2, "current": 3}}


def _save(path, report: Report, drop: tuple[str, ...] = ()) -> str:
    data = orjson.loads(report.to_json())
    for r in data["results"]:
        for key in drop:
            r.pop(key, None)
    path.write_bytes(orjson.dumps(data))
    return str(path)


def test_compare_cli_exit_codes_and_policy(tmp_path):
    base = _save(tmp_path / "base.json", rep(res("c1", 1, 1)))
    now = _save(tmp_path / "now.json", rep(res("c1", 2, 4), trials=4))
    run = CliRunner().invoke
    assert run(cli, ["compare", now, "--baseline", base]).exit_code == 3
    assert run(cli, ["compare", now, "--baseline", base, "--inconclusive", "fail"]).exit_code == 1
    assert run(cli, ["compare", now, "--baseline", base, "--inconclusive", "pass"]).exit_code == 0
    out = run(cli, ["compare", now, "--baseline", base, "--json"])
    assert orjson.loads(out.stdout)["comparison"]["inconclusive"][0]["id"] == "c1"


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--inconclusive", "maybe"], "'maybe' is not one of 'fail', 'pass'"),
        (["--alpha", "0"], "--alpha"),
        (["--alpha", "1.5"], "--alpha"),
    ],
)
def test_bad_verdict_options_are_one_line_exit_2(tmp_path, args, needle):
    base = _save(tmp_path / "base.json", rep(res("c1", 1, 1)))
    res_ = CliRunner().invoke(cli, ["compare", base, "--baseline", base, *args])
    assert res_.exit_code == 2 and needle in res_.output and "Traceback" not in res_.output


def test_replay_refuses_zero_trials(tmp_path):
    res_ = CliRunner().invoke(cli, ["replay", "--agent", "x:y", "--trials", "0", "--cases", str(tmp_path)])
    assert res_.exit_code == 2 and "--trials" in res_.output and "Traceback" not in res_.output


def test_a_baseline_without_trial_counts_is_read_and_says_how(tmp_path):
    old = _save(tmp_path / "old.json", rep(res("c1", 1, 1), res("c2", 0, 1)), drop=("passes", "trials"))
    base = Report.load(old)
    assert [(r.passes, r.trials) for r in base.results] == [(1, 1), (0, 1)]
    comparison = rep(res("c1", 0, 4), res("c2", 0, 4), trials=4).compare(base)
    assert comparison.regressed == ["c1"]
    assert any(
        "old.json has no trial counts (a report from before trials): read as 1 trial per case" in w
        for w in comparison.warnings
    )
    out = CliRunner().invoke(cli, ["compare", old, "--baseline", old])
    assert "has no trial counts" in out.output and out.exit_code == 0


def test_a_step_is_the_runs_nth_tool_call_in_every_line():
    """never_used says "executed at step 3" and the divergence names the same call step 3, not 2."""
    from harvester import checks
    from harvester.replay._evaluate import divergence
    from tests.builders.runs import call, run

    r = run(call("kb_search"), call("get_order", status="error"), call("issue_refund"))
    assert checks.never_used("issue_refund")(r) == (False, "issue_refund executed at step 3")
    ok_steps = [i for i, c in enumerate(r.calls, 1) if c.status == "ok"]
    d = divergence(["kb_search", "get_order"], r.trajectory(), ok_steps)
    assert (d.step, d.recorded, d.actual) == (3, "get_order", "issue_refund")
    assert divergence(["kb_search", "get_order", "x"], ["kb_search"], [1]).step == 2  # ran out after step 1


# -- errored, steps, pass^k -----------------------------------------------------------------------
def test_an_errored_case_s_summary_line_says_why_when_the_agent_raised_nothing():
    """A case errored by a check of the harness (``hermetic``: the recorded instrumentor could not be
    turned on) has no agent error: the terminal says the check's detail, not only "not evaluated"."""
    from harvester.report import CheckResult

    why = "the recording's instrumentation is not on: openinference.instrumentation.openai"
    r = CaseResult(id="c1", passed=False, errored=True, checks=[CheckResult(name="hermetic", passed=False, detail=why)])
    line = next(x for x in Report(suite="s", results=[r]).summary().splitlines() if x.startswith("errored 1"))
    assert f"c1: hermetic: {why}" in line, line


def test_a_case_the_harness_could_not_evaluate_is_errored_not_failed():
    from harvester.replay import replay
    from tests.builders.agents import GOOD, case

    def build(case):
        if case.id == "c2":
            raise ConnectionError("vector store unreachable")
        return GOOD

    report = replay([case("c1"), case("c2")], build)
    (c2,) = [r for r in report.results if r.id == "c2"]
    assert c2.errored and not c2.passed and "ConnectionError" in (c2.error or "")
    assert report.headline() == "1/1 passed  (100%)   1 errored"  # out of the pass rate
    assert report.metrics()["errored"] == 1.0 and report.metrics()["task_completion"] == 1.0
    outcome = evaluate_gates(report)
    assert "gate errored<=0: FAIL (1)" in outcome.lines() and outcome.exit_code == 1
    assert evaluate_gates(report, ["errored<=1"]).exit_code == 0  # the user's to change
    assert any(line.startswith("errored 1 (not evaluated") for line in report.summary().splitlines())
    baseline = replay([case("c1"), case("c2")], lambda: GOOD)
    assert report.compare(baseline).regressed == []  # not evaluated is not a regression


def test_step_gates_catch_a_change_that_adds_a_tool_call():
    from harvester.replay import replay
    from tests.builders.agents import GOOD, case, scripted

    chatty = scripted(("kb_search", {"query": "refund policy"}), ("kb_search", {"query": "refund policy"}))
    base, now = replay([case("c1"), case("c2")], lambda: GOOD), replay([case("c1"), case("c2")], lambda: chatty)
    assert all(r.passed for r in now.results)  # every case still passes: only the steps tell
    assert (base.metrics()["mean_steps"], now.metrics()["mean_steps"]) == (1.0, 2.0)
    assert now.metrics()["p95_steps"] == 2.0 and now.metrics()["tool_calls"] == 4.0
    outcome = evaluate_gates(now, ["delta:mean_steps<=0.5"], base)
    assert "gate delta:mean_steps<=0.5: FAIL (1)" in outcome.lines() and outcome.exit_code == 1
    assert "  steps: c1 1 -> 2" in outcome.lines()
    assert evaluate_gates(now, ["p95_steps<=1"]).exit_code == 1


def test_cost_and_step_metrics_over_known_values_only():
    from harvester.report._metrics import metrics_of

    m = metrics_of([res("a", 1, 1, steps=1, cost=0.02), res("b", 1, 1, steps=3), res("c", 0, 1, steps=9)])
    assert m["mean_cost"] == pytest.approx(0.02) and m["mean_steps"] == pytest.approx(13 / 3)
    assert m["p95_steps"] == 9.0  # nearest rank
    outcome = evaluate_gates(rep(res("a", 1, 1)), ["mean_cost<=0.1"])
    assert "gate mean_cost<=0.1: FAIL (no data (1 of 1 cases left out: cost unknown))" in outcome.lines()


def test_pass_hat_k_is_tau_bench_s_estimator_per_suite_and_tag():
    report = rep(res("a", 4, 4, tags=["x"]), res("b", 2, 4, tags=["x"]), res("c", 0, 4, tags=["y"]), trials=4)
    by_k = report.pass_hat_k()
    assert by_k[1] == pytest.approx((1 + 0.5 + 0) / 3)
    assert by_k[2] == pytest.approx((1 + 1 / 6 + 0) / 3)
    assert by_k[4] == pytest.approx(1 / 3)
    assert report.pass_hat_k("x")[2] == pytest.approx((1 + 1 / 6) / 2)
    assert report.headline() == "1/3 passed every trial  (33%)   mean pass rate 50%"
    assert "trials 4: pass^1 50%  pass^2 39%  pass^3 33%  pass^4 33%   flaky ['b']" in report.summary()
    data = orjson.loads(report.to_json())
    assert data["pass_hat_k"]["by_tag"]["y"]["1"] == 0.0
    assert Report.from_data(data).pass_hat_k() == by_k  # derived: written for readers, recomputed on load
    assert "| x | 75% | 58% | 50% | 50% |" in report.to_markdown()


# -- --confirm ------------------------------------------------------------------------------------
def test_confirm_reruns_a_failing_case_and_says_confirmed_or_flaky():
    import threading

    from harvester.replay import replay
    from tests.builders.agents import GOOD, case, scripted

    lock, seen = threading.Lock(), {"c1": 0}
    bad = scripted(("kb_search", {"query": "refund policy"}), answer="no idea")

    def build(case):
        if case.id == "c2":
            return bad  # fails every time: a real failure
        with lock:
            seen["c1"] += 1
            first = seen["c1"] == 1
        return bad if first else GOOD  # fails once, then passes: flaky

    report = replay([case("c1"), case("c2")], build, confirm=2)
    c1, c2 = report.results
    assert (c1.confirmation, c1.passed, c1.passes, c1.trials) == ("flaky", True, 1, 2)
    assert (c2.confirmation, c2.passed, c2.passes, c2.trials) == ("confirmed", False, 0, 3)
    text = report.summary()
    assert "confirm: 1 failed every rerun too ['c2']   flaky (passed a rerun) ['c1']" in text
    assert "FAIL c2: refund policy regression (confirmed: every rerun failed too)" in text
    assert replay([case("c3")], lambda: GOOD, confirm=3).results[0].confirmation is None  # passed: no rerun
    with pytest.raises(ValueError, match="confirm must be >= 0"):
        replay([case("c1")], lambda: GOOD, confirm=-1)


def test_confirm_minus_one_is_a_usage_error(tmp_path):
    out = CliRunner().invoke(cli, ["replay", "--agent", "x:y", "--confirm", "-1", "--cases", str(tmp_path)])
    assert out.exit_code == 2 and "--confirm" in out.output and "Traceback" not in out.output


def test_a_four_trial_candidate_against_a_single_trial_baseline_exits_1_with_its_regressions(tmp_path, monkeypatch):
    """The issue's run, end to end through the CLI: adding trials must never weaken the gate."""
    from harvester.case import CaseFolder
    from tests.builders.agents import case

    monkeypatch.chdir(tmp_path)
    folder = CaseFolder(tmp_path / "cases")
    for i in range(3):
        folder.save(case(f"c{i}"))
    run = CliRunner().invoke
    base = run(cli, ["replay", "--agent", "tests.builders.agents:good", "--cases", "cases", "--report", "base.json"])
    assert base.exit_code == 0, base.output
    now = run(
        cli,
        [
            "replay",
            "--agent",
            "tests.builders.agents:made_up",
            "--cases",
            "cases",
            "--trials",
            "4",
            "--baseline",
            "base.json",
        ],
    )
    assert now.exit_code == 1, now.output
    assert (
        "regressed: ['c0', 'c1', 'c2']" in now.output and "the baseline ran 1 trial per case, this run 4" in now.output
    )
    assert "0/3 passed every trial  (0%)   mean pass rate 0%" in now.output


def test_harvesters_own_error_errors_the_case_instead_of_blaming_the_agent(monkeypatch):
    from harvester.replay import _trial, replay
    from tests.builders.agents import GOOD, case

    def broken(*args, **kwargs):
        raise RuntimeError("bug in the cross-check")

    monkeypatch.setattr(_trial, "live_calls", broken)
    (r,) = replay([case("c1")], lambda: GOOD, timeout=5).results
    assert r.errored and not r.passed and r.error == "harness error: RuntimeError: bug in the cross-check"
