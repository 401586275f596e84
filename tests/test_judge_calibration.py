"""Human labels and calibration: the agreement figures against hand-worked examples, ``label`` and
``review`` storing labels, ``judge calibrate`` through the CLI, the uncalibrated-gate warning (and the
config flag that makes it an error), ``--no-judges``, and bad input as one line, exit 2."""

from __future__ import annotations

import orjson
import pytest
from click.testing import CliRunner

from harvester.case import AgentCase, CaseFolder, load_case, save_case
from harvester.checks import Agreement, wilson
from harvester.cli import main
from harvester.config import load_config
from harvester.model import Run
from harvester.pytest_plugin._runner import CaseRunner, Settings
from harvester.report import Report
from harvester.store import TraceStore
from tests.builders import judges
from tests.builders.agents import case, made_up
from tests.builders.cli import one_line_error

CONFIG = """cases_dir = "cases"
store = "traces.db"
default_judge = "policy"

[judges.policy]
function = "tests.builders.judges:says_30_days"
"""


def cli(*args: str, input: str | None = None):
    return CliRunner().invoke(main, list(args), input=input, catch_exceptions=False)


@pytest.fixture()
def project(tmp_path, monkeypatch):
    (tmp_path / "harvester.toml").write_text(CONFIG)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARVESTER_CASES", raising=False)
    monkeypatch.delenv("HARVESTER_STORE", raising=False)
    save_case(case("policy", required_elements=[], expected="Within 30 days.", judges=["policy"]), tmp_path / "cases")
    judges.CALLS.clear()
    return tmp_path


# -- the figures, worked by hand ------------------------------------------------------------------
def test_agreement_figures_match_a_hand_worked_table():
    # 40 labels: 25 good (judge passed 20, failed 5), 15 bad (judge passed 3, failed 12).
    a = Agreement("j", "f", 0.6, 30, pass_good=20, fail_good=5, pass_bad=3, fail_bad=12)
    # po = 32/40 = 0.8; pe = (23*25 + 17*15) / 40^2 = 830/1600 = 0.51875; kappa = 0.28125/0.48125
    assert a.accuracy == 0.8 and a.kappa == pytest.approx(0.584416, abs=1e-6)
    # se = sqrt(0.8*0.2 / (40 * 0.48125^2)) = 0.131420; kappa +- 1.96 se
    assert a.kappa_interval() == pytest.approx((0.32684, 0.84199), abs=1e-4)
    f = a.figures()
    assert f["false_pass_rate"] == 0.2 and f["false_fail_rate"] == 0.2  # 3 of 15 bad; 5 of 25 good
    # Wilson, z = 1.96: 32/40 -> centre 0.77372, half 0.12130; 3/15 -> (0.0705, 0.4519); 5/25 -> (0.0886, 0.3913)
    assert f["accuracy_ci"] == pytest.approx((0.6524, 0.8950), abs=1e-4)
    assert f["false_pass_ci"] == pytest.approx((0.0705, 0.4519), abs=1e-4)
    assert f["false_fail_ci"] == pytest.approx((0.0886, 0.3913), abs=1e-4)
    assert not a.calibrated  # 40 labels, but kappa 0.58 < 0.6
    assert "kappa 0.58 [0.33, 0.84] on 40 labels: NOT calibrated" in a.lines()[0]


def test_wilson_keeps_an_upper_bound_on_zero_failures():
    # 0 of 30: the upper bound is z^2 / (n + z^2) = 3.8415 / 33.8415, not 0
    assert wilson(0, 30) == pytest.approx((0.0, 0.11351), abs=1e-5)
    assert wilson(0, 0) is None


def test_a_judge_that_passes_everything_is_not_calibrated():
    constant = Agreement("j", "f", 0.6, 30, pass_good=30, pass_bad=5)  # 30/35 right, all by chance
    assert constant.accuracy == pytest.approx(0.857, abs=1e-3) and constant.kappa == 0.0
    assert not constant.calibrated
    all_good = Agreement("j", "f", 0.6, 30, pass_good=40)  # the labels cannot tell it from a constant
    assert all_good.kappa is None and not all_good.calibrated
    perfect = Agreement("j", "f", 0.6, 30, pass_good=18, fail_bad=12)
    assert perfect.kappa == 1.0 and perfect.calibrated


# -- labels, calibration, gating through the CLI ----------------------------------------------------
def label_lines(good: int, bad: int, wrong: int) -> bytes:
    """``good`` good answers stating 30 days, ``bad`` bad ones that do not, and ``wrong`` bad ones that do
    state it (which the function judge passes: its disagreements)."""
    lines = [{"case": "policy", "verdict": "good", "answer": f"Returns within 30 days (#{i}).", "reason": "ok"}
             for i in range(good)]  # fmt: skip
    lines += [{"case": "policy", "verdict": "bad", "answer": f"Any time (#{i}).", "reason": "wrong window"}
              for i in range(bad)]  # fmt: skip
    lines += [{"case": "policy", "verdict": "bad", "answer": f"30 days, but I refunded it (#{i}).",
               "reason": "refunded without approval"} for i in range(wrong)]  # fmt: skip
    lines.append({"case": "policy", "verdict": "skip"})
    return b"\n".join(orjson.dumps(line) for line in lines) + b"\n"


def test_label_calibrate_and_gate(project):
    first = cli("replay", "--agent", "tests.builders.agents:good", "--report", "r1.json", "--html", "r1.html")
    warning = "warning: judge policy gated cases but is not calibrated: never calibrated"
    assert first.exit_code == 0 and warning in first.output
    assert "judges: 1 call, 0 cache hits" in first.output
    assert Report.load(project / "r1.json").judging.judges[0].uncalibrated.startswith("never calibrated")
    page = (project / "r1.html").read_text()
    assert "<section id=judges>" in page and "never calibrated" in page

    (project / "labels.jsonl").write_bytes(label_lines(good=18, bad=12, wrong=2))
    labelled = cli("label", "labels.jsonl")
    assert labelled.exit_code == 0 and labelled.output.strip() == "labelled 32 answers on 1 case (1 skipped)"
    stored = load_case(project / "cases" / "policy.json")
    assert len(stored.labels) == 32 and stored.labels[-1].reason == "refunded without approval"

    out = cli("judge", "calibrate", "policy", "--html", "cal.html")
    assert out.exit_code == 0, out.output
    # 18 good passed, 12 bad failed, 2 bad passed: po = 30/32, pe = (20*18 + 12*14)/32^2 = 528/1024
    assert "on 32 labels: calibrated (floor kappa >= 0.6 on >= 30)" in out.output
    assert "kappa 0.87" in out.output  # (0.9375 - 0.515625) / 0.484375 = 0.8710
    assert "(2 of 14 bad answers passed)" in out.output
    assert (
        "~ policy '30 days, but I refunded it (#0).': human bad (refunded without approval); "
        "judge pass (states the 30-day window)"
    ) in out.output
    assert out.output.strip().splitlines()[-1].startswith("judge calls 32, cache hits 0")
    assert "calibrated" in (project / "cal.html").read_text()
    kept = orjson.loads((project / "judges.calibration.json").read_bytes())["policy"]
    assert (kept["labels"], round(kept["kappa"], 4)) == (32, 0.871)

    as_json = orjson.loads(cli("judge", "calibrate", "policy", "--json").output)
    assert as_json["confusion"] == {"pass_good": 18, "pass_bad": 2, "fail_good": 0, "fail_bad": 12}
    assert as_json["kappa"] == pytest.approx(0.870968, abs=1e-6) and as_json["calibrated"] is True
    assert (as_json["calls"], as_json["cache_hits"]) == (0, 32)  # every verdict from the cache

    judges.CALLS.clear()
    again = cli("replay", "--agent", "tests.builders.agents:good", "--report", "r2.json")
    assert again.exit_code == 0 and "not calibrated" not in again.output
    assert "judges: 0 calls, 1 cache hit" in again.output and judges.CALLS == []


def test_no_judges_skips_them_and_says_so(project):
    out = cli("replay", "--agent", "tests.builders.agents:good", "--report", "r.json", "--no-judges")
    assert out.exit_code == 0 and "judges: skipped (--no-judges)" in out.output
    assert judges.CALLS == []
    assert not any(c.name.startswith("judge:") for c in Report.load(project / "r.json").results[0].checks)


def test_a_failing_judge_fails_the_job(project):
    out = cli("replay", "--agent", "tests.builders.agents:made_up", "--report", "r.json")
    assert out.exit_code == 1 and "judge:policy: does not state the 30-day window" in out.output


def test_the_pytest_plugin_runs_a_cases_judges(project):
    config = load_config()
    runner = CaseRunner(Settings(config, CaseFolder.for_project(config), 1, 10.0, False), made_up)
    result = runner.run(load_case(project / "cases" / "policy.json"), None)
    assert not result.passed and result.failed_checks()[0].name == "judge:policy"


def test_require_calibration_refuses_an_uncalibrated_judge(project):
    (project / "harvester.toml").write_text(CONFIG.replace('default_judge = "policy"\n', "") +
                                            "\n[calibration]\nrequire = true\n")  # fmt: skip
    out = cli("replay", "--agent", "tests.builders.agents:good", "--report", "r.json")
    one_line_error(out, "harvester.toml", "calibration.require", "judge policy is not calibrated")
    assert judges.CALLS == []


def test_review_labels_the_answer_and_accept_expected_gives_the_default_judge(project):
    pending = case("pend", status="pending", recorded={"trajectory": ["kb_search"], "answer": "Within 30 days."})
    save_case(pending, project / "cases")
    out = cli("review", "pend", input="l\ng\nright window\nq\n")
    assert out.exit_code == 0, out.output
    (labelled,) = load_case(project / "cases" / "pending" / "pend.json").labels
    assert (labelled.answer, labelled.verdict, labelled.reason) == ("Within 30 days.", "good", "right window")
    assert "judges:            -  (labels: 1 good, 0 bad)" in out.output  # shown again after labelling
    accepted = cli("accept", "pend", "--expected", "Within 30 days of delivery.")
    assert accepted.exit_code == 0, accepted.output
    assert load_case(project / "cases" / "pend.json").judges == ["policy"]


def test_review_setting_expected_gives_the_default_judge(project):
    save_case(case("pend", status="pending"), project / "cases")
    out = cli("review", "pend", input="e\nexpected\nWithin 30 days of delivery.\nq\n")
    assert out.exit_code == 0, out.output
    edited = load_case(project / "cases" / "pending" / "pend.json")
    assert (edited.expected, edited.judges) == ("Within 30 days of delivery.", ["policy"])


def test_bulk_accept_with_expected_gives_the_default_judge_to_cases_naming_none(project):
    save_case(case("p1", status="pending"), project / "cases")
    save_case(case("p2", status="pending", judges=["other"]), project / "cases")
    out = cli("accept", "p1", "p2", "--expected", "Within 30 days.")
    assert out.exit_code == 0, out.output
    assert [load_case(project / "cases" / f"{c}.json").judges for c in ("p1", "p2")] == [["policy"], ["other"]]


def test_calibrating_without_labels_says_how_to_get_them(project):
    out = cli("judge", "calibrate", "policy")
    assert out.exit_code == 0 and "on 0 labels: NOT calibrated" in out.output
    assert "no labelled answers yet" in out.output


def test_label_reads_a_stored_runs_answer(project):
    with TraceStore(str(project / "traces.db")) as store:
        store.add(Run(trace_id="e" * 32, prompt="Can I return A1001?", answer="Sure, any time.", stop="answered"))
    (project / "l.jsonl").write_text(f'{{"case": "policy", "verdict": "bad", "trace_id": "{"e" * 32}"}}\n')
    assert cli("label", "l.jsonl").exit_code == 0
    (stored,) = load_case(project / "cases" / "policy.json").labels
    assert (stored.answer, stored.trace_id) == ("Sure, any time.", "e" * 32)


@pytest.mark.parametrize(
    ("line", "needles"),
    [
        ('{"case": "policy", "verdict": "meh"}', ["l.jsonl", "line 1: verdict", "not good, bad or skip"]),
        ("not json", ["l.jsonl", "line 1", "not JSON"]),
        ('{"case": "nope", "verdict": "good", "answer": "x"}', ["l.jsonl", "line 1: case"]),
        ('{"case": "policy", "verdict": "good", "colour": 1}', ["l.jsonl", "line 1", "unknown key 'colour'"]),
    ],
)
def test_a_bad_label_line_is_one_error(project, line, needles):
    (project / "l.jsonl").write_text(line + "\n")
    one_line_error(cli("label", "l.jsonl"), *needles)
    assert load_case(project / "cases" / "policy.json").labels == []


def test_a_missing_label_file_is_one_error(project):
    one_line_error(cli("label", "missing.jsonl"), "missing.jsonl", "cannot read")


@pytest.mark.parametrize(
    ("judge", "needles"),
    [
        ('function = "no_such_mod_q:fn"', ["harvester.toml", "judges.policy.function", "does not import"]),
        ('function = "tests.builders.judges:one_argument"', ["judges.policy.function", "must take (case, run)"]),
        ('model = "nosuchprovider:m"', ["harvester.toml", "judges.policy.model", "Unknown model"]),
        ('model = "test"\nrubric_file = "missing.md"', ["judges.policy.rubric_file", "no such file"]),
        ('function = "a:b"\nmodel = "test"', ["judges.policy", "exactly one of function or model"]),
        ('function = "nocolon"', ["judges.policy", "function 'nocolon' is not module:callable"]),
        ('function = "a:b"\nrubric = "x"\nrubric_file = "y"', ["judges.policy", "rubric or rubric_file, not both"]),
    ],
)
def test_a_bad_judge_in_the_config_is_one_error(project, judge, needles):
    (project / "harvester.toml").write_text(f'cases_dir = "cases"\n\n[judges.policy]\n{judge}\n')
    one_line_error(cli("replay", "--agent", "tests.builders.agents:good", "--report", "r.json"), *needles)


def test_an_undefined_default_judge_is_one_error(project):
    (project / "harvester.toml").write_text(CONFIG.replace('default_judge = "policy"', 'default_judge = "nope"'))
    one_line_error(cli("judge", "calibrate", "policy"), "harvester.toml", "default_judge", "'nope' is not a judge")


def test_a_case_naming_an_undefined_judge_is_one_error(project):
    save_case(AgentCase.model_validate({**case("other").model_dump(by_alias=True), "judges": ["nope"]}),
              project / "cases")  # fmt: skip
    one_line_error(
        cli("replay", "--agent", "tests.builders.agents:good", "--report", "r.json"),
        "other.json",
        "judges[0]",
        "no judge 'nope' (defined: policy)",
    )
    one_line_error(cli("judge", "calibrate", "nope"), "no judge 'nope'")
