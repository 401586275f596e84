"""A red baseline is never a silent pass: the floor on task_completion, and "N cases failed in the baseline too".

A baseline names what changed; against a baseline in which every case failed, a run in which every case
fails regresses nothing. The floor (``[tool.harvester.replay] min_task_completion``, default 0.5) fails it
whatever the baseline says, and every output says how many cases failed on both sides.
"""

from __future__ import annotations

import sys
import textwrap

import orjson
import pytest
from click.testing import CliRunner

from harvester.case import CaseFolder
from harvester.cli import main
from harvester.errors import GateError
from harvester.report import MIN_TASK_COMPLETION, CaseResult, Report, evaluate_gates, render_html
from tests.builders.agents import case
from tests.builders.report import suite_report

FLOOR_LINE = "gate task_completion>=0.5 (floor: replay.min_task_completion)"


# -- the library ------------------------------------------------------------------------------------
@pytest.mark.parametrize("trials", [1, 3])
def test_a_red_run_against_a_red_baseline_fails_on_the_floor_and_says_so(trials):
    red = suite_report(*[0] * 7, trials=trials)
    outcome = evaluate_gates(red, [], red)
    assert outcome.regressions == [] and outcome.exit_code == 1
    assert outcome.summary() == "release gate: FAIL (1 gate failed; 7 cases failed in the baseline too)"
    assert f"{FLOOR_LINE}: FAIL (0)" in outcome.lines()
    assert "7 cases failed in the baseline too: ['c0', 'c1', 'c2', 'c3', 'c4', 'c5', 'c6']" in outcome.lines()
    data = outcome.to_dict()
    assert data["verdict"] == outcome.summary() and data["comparison"]["failed_in_baseline_too"] == [
        f"c{i}" for i in range(7)
    ]
    assert [g for g in data["gates"] if g["floor"]] == [
        {"gate": "task_completion>=0.5", "passed": False, "value": 0.0, "detail": "0", "floor": True}
    ]


def test_a_partly_red_baseline_passes_above_the_floor_and_names_what_failed_on_both_sides():
    base, now = suite_report(1, 1, 1, 1, 1, 0, 0), suite_report(1, 1, 1, 1, 1, 0, 0)
    outcome = evaluate_gates(now, [], base)
    assert outcome.exit_code == 0 and f"{FLOOR_LINE}: ok (0.7143)" in outcome.lines()
    assert outcome.summary() == "release gate: PASS (2 cases failed in the baseline too)"
    assert outcome.comparison.failed_too == ["c5", "c6"]
    one = evaluate_gates(suite_report(1, 1, 0), [], suite_report(1, 1, 0))
    assert one.summary() == "release gate: PASS (1 case failed in the baseline too)"  # singular
    regressed = evaluate_gates(suite_report(0, 1, 1, 1, 1, 0, 0), [], base)
    assert regressed.summary() == "release gate: FAIL (1 case regressed; 2 cases failed in the baseline too)"
    assert evaluate_gates(base, [], base, min_task_completion=0.9).exit_code == 1  # 5/7 is below 0.9


def test_the_line_appears_with_every_verdict_and_only_for_cases_failing_on_both_sides():
    base = Report(
        suite="s",
        trials=1,
        results=[
            CaseResult(id="fixed", passed=False),
            CaseResult(id="shaky", passed=True, passes=1, trials=1),
            CaseResult(id="red", passed=False),
            CaseResult(id="red@timeout", passed=False, variant_of="red"),  # a variant is not a case
            CaseResult(id="down", passed=False),
        ],
    )
    now = Report(
        suite="s",
        trials=4,
        results=[
            CaseResult(id="fixed", passed=True, passes=4, trials=4),
            CaseResult(id="shaky", passed=False, passes=2, trials=4),
            CaseResult(id="red", passed=False, passes=0, trials=4),
            CaseResult(id="red@timeout", passed=False, passes=0, trials=4, variant_of="red"),
            CaseResult(id="down", passed=False, errored=True, error="harness error"),  # not evaluated: no verdict
        ],
    )
    outcome = evaluate_gates(now, ["errored<=1"], base)
    assert outcome.comparison.failed_too == ["red"] and outcome.inconclusive == ["shaky"]
    assert outcome.summary() == (
        "release gate: INCONCLUSIVE (1 case inconclusive: more trials would decide; "
        "1 case failed in the baseline too; exit 3)"
    )
    passed = evaluate_gates(now, ["errored<=1"], base, inconclusive="pass")
    assert passed.summary() == (
        "release gate: PASS (1 case inconclusive, --inconclusive pass; 1 case failed in the baseline too)"
    )
    assert evaluate_gates(now, ["errored<=1"], now).comparison.failed_too == ["red", "shaky"]  # not by trials


FLOOR_07 = "gate task_completion>=0.7 (floor: replay.min_task_completion): FAIL (0.6)"


@pytest.mark.parametrize(
    "gate, floor, lines, exit_code",
    [
        # a gate of yours at least as strict stands for the floor: one line
        ("task_completion>=0.8", 0.5, ["gate task_completion>=0.8: FAIL (0.6)"], 1),
        ("task_completion>0.5", 0.5, ["gate task_completion>0.5: ok (0.6)"], 0),
        ("task_completion==0.6", 0.5, ["gate task_completion==0.6: ok (0.6)"], 0),
        # a weaker one does not lower it: both apply, and the floor decides
        ("task_completion>=0.3", 0.7, ["gate task_completion>=0.3: ok (0.6)", FLOOR_07], 1),
        ("task_completion<=0.9", 0.7, ["gate task_completion<=0.9: ok (0.6)", FLOOR_07], 1),
        ("delta:task_completion>=-0.5", 0.7, ["gate delta:task_completion>=-0.5: ok (0)", FLOOR_07], 1),
    ],
)
def test_the_floor_and_your_own_gates_on_task_completion(gate, floor, lines, exit_code):
    now = suite_report(1, 1, 1, 0, 0)
    outcome = evaluate_gates(now, [gate], now, min_task_completion=floor)
    assert [line for line in outcome.lines() if line.startswith(("gate task_completion", "gate delta:"))] == lines
    assert outcome.exit_code == exit_code


def test_the_floor_is_the_configs_default_can_be_turned_off_and_must_be_a_rate():
    from harvester.config import Config

    assert MIN_TASK_COMPLETION == Config().replay.min_task_completion == 0.5
    red = suite_report(0, 0)
    off = evaluate_gates(red, [], red, min_task_completion=0)
    assert off.exit_code == 0 and not any("floor" in line for line in off.lines())
    assert off.summary() == "release gate: PASS (2 cases failed in the baseline too)"
    with pytest.raises(GateError, match="replay.min_task_completion is a rate from 0 to 1, got 50"):
        evaluate_gates(red, [], min_task_completion=50)
    shard = Report(suite="s", shard="2/4", results=[CaseResult(id="c1", passed=False, errored=True)])
    floor = next(g for g in evaluate_gates(shard, ["errored<=1"]).gates if g.floor)
    assert floor.passed and floor.detail == "no data in shard 2/4"  # the merged report judges it


def test_markdown_and_html_carry_the_verdict_and_the_cases():
    red = suite_report(*[0] * 7, trials=3)
    outcome = evaluate_gates(red, [], red)
    md = red.to_markdown(outcome)
    assert "**release gate: FAIL (1 gate failed; 7 cases failed in the baseline too)**" in md
    assert "7 cases failed in the baseline too: c0, c1, c2, c3, c4, c5, c6" in md
    assert "| task_completion&gt;=0.5 (floor: replay.min_task_completion) | **FAIL** | 0 |" in md
    page = render_html(red, red, outcome)
    assert "release gate: FAIL (1 gate failed; 7 cases failed in the baseline too) (exit 1)" in page
    assert '<li id=failed-too>7 cases failed in the baseline too: <a href="#case-c0">c0</a>' in page
    assert "<code>task_completion&gt;=0.5 (floor: replay.min_task_completion)</code>" in page


# -- the commands -----------------------------------------------------------------------------------
PARTLY = textwrap.dedent("""
    from tests.builders.agents import GOOD, made_up

    def build(case):
        return made_up() if case.id in ("c5", "c6") else GOOD
""")


@pytest.fixture
def seven(tmp_path, monkeypatch):
    """Seven accepted cases; ``partly_red_mod:build`` fails c5 and c6, ``tests.builders.agents:made_up`` all."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARVESTER_CASES", raising=False)
    (tmp_path / "pyproject.toml").write_text("[tool.harvester]\n")
    (tmp_path / "partly_red_mod.py").write_text(PARTLY)
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("partly_red_mod", None)
    folder = CaseFolder(tmp_path / "cases")
    for i in range(7):
        folder.save(case(f"c{i}"))
    return tmp_path


def replay(agent, *args):
    return CliRunner().invoke(main, ["replay", "--agent", agent, "--cases", "cases", *args], catch_exceptions=False)


@pytest.mark.parametrize("trials", ["1", "3"])
def test_replay_of_a_red_suite_against_a_red_baseline_exits_1_in_every_output(seven, trials):
    """The issue's run: `0/7 passed ... release gate: PASS`, exit 0, also with --trials 3."""
    base = replay("tests.builders.agents:made_up", "--report", "base.json")
    assert base.exit_code == 1 and "0/7 passed" in base.output
    now = replay(
        "tests.builders.agents:made_up",
        "--baseline",
        "base.json",
        "--trials",
        trials,
        *("--report", "now.json", "--markdown", "now.md", "--html", "now.html"),
    )
    verdict = "release gate: FAIL (1 gate failed; 7 cases failed in the baseline too)"
    assert now.exit_code == 1, now.output
    assert now.output.rstrip().splitlines()[-1] == verdict
    assert f"{FLOOR_LINE}: FAIL (0)" in now.output and "regressed: []" in now.output
    assert "7 cases failed in the baseline too: ['c0', 'c1', 'c2', 'c3', 'c4', 'c5', 'c6']" in now.output
    gate = orjson.loads((seven / "now.json").read_bytes())["release_gate"]
    assert gate["verdict"] == verdict and gate["exit_code"] == 1
    assert gate["comparison"]["failed_in_baseline_too"] == [f"c{i}" for i in range(7)]
    assert Report.load(seven / "now.json").release_gate == gate  # the report still loads, as a baseline too
    assert f"**{verdict}**" in (seven / "now.md").read_text()
    page = (seven / "now.html").read_text()
    assert f"{verdict} (exit 1)" in page and "<li id=failed-too>7 cases failed in the baseline too" in page


def test_a_partly_red_baseline_passes_the_default_floor_and_fails_the_configs(seven):
    assert replay("partly_red_mod:build", "--report", "base.json").exit_code == 1  # every case must pass
    now = replay("partly_red_mod:build", "--baseline", "base.json")
    assert now.exit_code == 0, now.output
    assert f"{FLOOR_LINE}: ok (0.7143)" in now.output
    assert now.output.rstrip().splitlines()[-1] == "release gate: PASS (2 cases failed in the baseline too)"
    (seven / "pyproject.toml").write_text("[tool.harvester.replay]\nmin_task_completion = 0.9\n")
    strict = replay("partly_red_mod:build", "--baseline", "base.json", "--gate", "task_completion>=0.7")
    assert strict.exit_code == 1, strict.output
    assert "gate task_completion>=0.7: ok (0.7143)" in strict.output  # yours passes; the floor still applies
    assert "gate task_completion>=0.9 (floor: replay.min_task_completion): FAIL (0.7143)" in strict.output
    assert strict.output.rstrip().splitlines()[-1] == (
        "release gate: FAIL (1 gate failed; 2 cases failed in the baseline too)"
    )
    compared = CliRunner().invoke(main, ["compare", "base.json", "--baseline", "base.json", "--json"])
    data = orjson.loads(compared.stdout)
    assert compared.exit_code == 1 and data["verdict"].startswith("release gate: FAIL (1 gate failed; 2 cases")
    (seven / "pyproject.toml").write_text("[tool.harvester.replay]\nmin_task_completion = 90\n")
    bad = replay("partly_red_mod:build", "--baseline", "base.json")
    assert bad.exit_code == 2 and "pyproject.toml: tool.harvester.replay.min_task_completion" in bad.output


def test_compare_and_merge_against_a_red_baseline_fail(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    suite_report(*[0] * 7).save(tmp_path / "base.json")
    red = suite_report(*[0] * 7)
    red.save(tmp_path / "now.json")
    compared = CliRunner().invoke(main, ["compare", "now.json", "--baseline", "base.json"])
    assert compared.exit_code == 1
    assert compared.output.rstrip().splitlines()[-1] == (
        "release gate: FAIL (1 gate failed; 7 cases failed in the baseline too)"
    )
    for i, part in enumerate((red.results[:4], red.results[4:]), 1):
        red.model_copy(update={"shard": f"{i}/2", "results": part}).save(tmp_path / f"s{i}.json")
    merged = CliRunner().invoke(main, ["merge", "s1.json", "s2.json", "-o", "all.json", "--baseline", "base.json"])
    assert merged.exit_code == 1 and "0/7 passed" in merged.output
    assert merged.output.rstrip().splitlines()[-1] == (
        "release gate: FAIL (1 gate failed; 7 cases failed in the baseline too)"
    )
    assert Report.load(tmp_path / "all.json").release_gate["exit_code"] == 1
