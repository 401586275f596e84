"""The pytest plugin: the demo's accepted cases run as pytest tests with the pass/fail the demo expects.

Each test runs pytest in a pytester folder holding a copy of the demo's cases and config (the demo runs
once per module). The baseline agent passes every case; the candidate (the widened allowlist) fails
``injection-contained`` by issuing a refund; ``--harvester-inject`` exposes the rate-limit retry loop.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harvester.demo.scenario import run_demo
from harvester.report import CaseResult, Report

pytest_plugins = ["pytester"]

GOOD = "--harvester-agent=harvester.demo.agent:build"
BAD = "--harvester-agent=harvester.demo.agent:build_widened"
IDS = ["injection-contained", "order-a1002", "return-order-a1001-refund-policy"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("plugin") / "demo"
    run_demo(root, echo=lambda _: None)
    return root


@pytest.fixture
def project(pytester: pytest.Pytester, demo: Path) -> pytest.Pytester:
    shutil.copytree(demo / "cases", pytester.path / "cases")
    shutil.copytree(demo / "reports", pytester.path / "reports")
    shutil.copy(demo / "harvester.toml", pytester.path / "harvester.toml")
    return pytester


# Other plugins of this environment, blocked in the runs under test: they only cost start-up time.
UNRELATED = ("cacheprovider", "randomly", "langsmith_plugin", "benchmark", "hypothesispytest", "anyio")


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    blocked = [arg for name in UNRELATED for arg in ("-p", f"no:{name}")]
    return pytester.runpytest_subprocess(*blocked, *args)


@pytest.mark.slow
def test_candidate_fails_the_security_case_with_its_checks_and_divergence(project):
    result = _run(project, BAD, "-rA")
    result.assert_outcomes(passed=2, failed=1)
    out = result.stdout.str()
    assert "FAILED cases::injection-contained" in out
    assert "PASSED cases::order-a1002" in out and "PASSED cases::return-order-a1001-refund-policy" in out
    assert "harvester case injection-contained failed (passed 0 of 1 trial)" in out
    assert "never_used(issue_refund): issue_refund executed at step 2" in out
    assert "divergence: 1 no_fixture call (issue_refund: unknown_tool); diverged at step 2" in out
    assert "Traceback" not in out and "harvester/replay" not in out and "_session.py" not in out


@pytest.mark.slow
def test_baseline_agent_passes_and_the_report_holds_every_result(project):
    result = _run(project, GOOD, "--harvester-report=out/report.json")
    result.assert_outcomes(passed=3)
    report = Report.load(project.path / "out" / "report.json")
    assert [r.id for r in report.results] == IDS and all(r.passed for r in report.results)
    assert report.suite == "support-demo" and report.trials == 1
    assert "harvester: 3 case results written to out/report.json" in result.stdout.str()


@pytest.mark.slow
def test_tags_are_markers_under_strict_markers_and_k_selects_by_id(project):
    result = _run(project, BAD, "--strict-markers", "-m", "security")
    result.assert_outcomes(failed=1, deselected=2)
    result = _run(project, BAD, "--strict-markers", "-m", "not security")
    result.assert_outcomes(passed=2, deselected=1)
    result = _run(project, BAD, "-k", "order-a1002 or refund-policy", "-v")
    result.assert_outcomes(passed=2, deselected=1)
    assert "injection-contained" not in result.stdout.str().split("deselected")[-1]


@pytest.mark.slow
def test_x_stops_at_the_first_failing_case(project):
    result = _run(project, BAD, "-x")
    result.assert_outcomes(failed=1)  # injection-contained runs first; the two others never ran
    assert "stopping after 1 failures" in result.stdout.str()


@pytest.mark.slow
def test_junitxml_names_each_case_and_carries_the_failure(project):
    result = _run(project, BAD, "--junitxml=junit.xml")
    result.assert_outcomes(passed=2, failed=1)
    cases = {c.get("name"): c for c in ET.parse(project.path / "junit.xml").iter("testcase")}
    assert sorted(cases) == IDS and {c.get("classname") for c in cases.values()} == {"cases"}
    [failure] = cases["injection-contained"].findall("failure")
    assert "never_used(issue_refund)" in (failure.text or "") + (failure.get("message") or "")
    assert not cases["order-a1002"].findall("failure")


@pytest.mark.slow
def test_xdist_workers_results_are_merged_into_one_report(project):
    result = _run(project, BAD, "-n", "2", "--harvester-report=merged.json", "--harvester-html=page.html")
    result.assert_outcomes(passed=2, failed=1)
    report = Report.load(project.path / "merged.json")
    assert [r.id for r in report.results] == IDS
    assert [r.passed for r in report.results] == [False, True, True]
    assert report.results[0].unauthorised == 1
    page = (project.path / "page.html").read_text()
    assert page.count("data-case-id=") == 3
    assert re.search(r'data-case-id="?injection-contained"?[^>]*data-verdict="?failed', page)
    assert "harvester: 3 case results written to merged.json, page.html" in result.stdout.str()


def test_an_output_that_cannot_be_written_is_a_usage_error_before_anything_runs(project):
    result = _run(project, GOOD, "--harvester-report=cases")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "ERROR: --harvester-report cases: is a directory" in result.stderr.str()
    assert "Traceback" not in result.stderr.str() and "passed" not in result.stdout.str()


@pytest.mark.slow
def test_baseline_fails_a_regression_and_xfails_what_failed_there_too(project):
    result = _run(project, BAD, "--harvester-baseline=reports/baseline.json")
    result.assert_outcomes(passed=2, failed=1)
    assert "regressed against reports/baseline.json: passed 1 of 1 there, now passed 0 of 1 trial" in (
        result.stdout.str()
    )
    # The demo's injected report: each case's rate_limit variant failed there and fails now.
    result = _run(project, GOOD, "--harvester-inject", "--harvester-baseline=reports/injected.json", "-rx")
    result.assert_outcomes(passed=21, xfailed=3)
    assert "XFAIL cases::order-a1002@rate_limit - failing in the baseline too" in result.stdout.str()


def test_the_agent_module_is_imported_sealed_and_a_connection_it_opens_is_a_usage_error(project):
    """As ``harvester replay`` does: a connection the module opens at import would be open before any
    case's seal, and what the cases send on it never checked."""
    from tests.builders.backends import loopback, routes

    with loopback(routes({"/audit": {"ok": True}})) as server:
        project.makepyfile(
            audit_at_import=f"import urllib.request\nurllib.request.urlopen('{server.origin}/audit', data=b'x')\n"
            "from harvester.demo.agent import build\n"
        )
        result = _run(project, "--harvester-agent=audit_at_import:build")
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        err = result.stderr.str()
        assert "--harvester-agent 'audit_at_import:build': cannot import audit_at_import" in err
        assert f"connect to 127.0.0.1:{server.port}" in err and "allow it with replay.allow_hosts" in err
        assert server.seen == []


def test_a_failure_s_reasons_are_one_line_each():
    from harvester.pytest_plugin._runner import failure_text

    error = "OperationalError: connection failed: Permission denied\n\tIs the server running on that host?"
    text = failure_text(CaseResult(id="c", passed=False, error=error), "harvester case c failed")
    assert "  agent error: OperationalError: connection failed: Permission denied Is the server running" in text
    assert "\t" not in text


MUTE = "def build():\n    return lambda prompt: 'no'\n"  # answers without a tool: fails every demo case


@pytest.mark.slow
def test_a_red_suite_against_a_red_baseline_fails_on_the_floor_not_xfails_silently(project):
    """Every case failing there and here xfails; the config's floor on task_completion fails the run."""
    project.makepyfile(mute_agent=MUTE)
    red = Report(suite="support-demo", results=[CaseResult(id=i, passed=False) for i in IDS])
    red.save(project.path / "red.json")
    result = _run(
        project, "--harvester-agent=mute_agent:build", "--harvester-baseline=red.json", "--harvester-html=r.html"
    )
    result.assert_outcomes(xfailed=3)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert "harvester: 3 cases failed in the baseline too (xfail)" in out
    assert "harvester: gate task_completion>=0.5 (floor: replay.min_task_completion): FAIL (0)" in out
    assert "3 cases failed in the baseline too" in (project.path / "r.html").read_text()
    with open(project.path / "harvester.toml", "a") as config:
        config.write("\n[replay]\nmin_task_completion = 0\n")  # the floor off: what xfails is the baseline's
    result = _run(project, "--harvester-agent=mute_agent:build", "--harvester-baseline=red.json")
    result.assert_outcomes(xfailed=3)
    assert result.ret == pytest.ExitCode.OK and "(floor:" not in result.stdout.str()


@pytest.mark.slow
def test_inject_adds_a_recovery_item_per_mode_and_trials_run_each_case_n_times(project):
    result = _run(project, GOOD, "--harvester-inject", "-k", "rate_limit or timeout", "--harvester-report=r.json")
    result.assert_outcomes(passed=3, failed=3, deselected=18)
    out = result.stdout.str()
    assert "FAILED cases::order-a1002@rate_limit" in out and "injected: rate_limit on " in out
    report = Report.load(project.path / "r.json")
    variants = {r.id: r for r in report.results}
    assert variants["order-a1002@timeout"].variant_of == "order-a1002"
    assert variants["order-a1002@rate_limit"].injected.mode == "rate_limit"
    result = _run(project, GOOD, "--harvester-trials=3", "-k", "order-a1002", "--harvester-report=t.json")
    result.assert_outcomes(passed=1, deselected=2)
    [only] = Report.load(project.path / "t.json").results
    assert (only.trials, only.passes) == (3, 3)


@pytest.mark.slow
def test_the_fixture_replays_one_case_for_a_hand_written_test(project):
    project.makepyfile(
        test_mine="""
        def test_refund_is_never_issued(harvester_case):
            result = harvester_case("injection-contained")
            assert not result.passed and result.unauthorised == 1
            assert "issue_refund" in result.differences()

        def test_other_agent_and_injection(harvester_case):
            assert harvester_case("order-a1002", agent="harvester.demo.agent:build").passed
            broken = harvester_case("order-a1002", inject="rate_limit", agent="harvester.demo.agent:build")
            assert not broken.passed and broken.injected.mode == "rate_limit"

        def test_unknown_case(harvester_case):
            harvester_case("order-a1020")
        """
    )
    result = _run(project, BAD, "test_mine.py", "-k", "not cases")
    result.assert_outcomes(passed=2, failed=1, deselected=3)
    assert "harvester_case('order-a1020'): no case 'order-a1020' in" in result.stdout.str()
    assert "did you mean order-a1003, order-a1002?" in result.stdout.str()
    assert "During handling" not in result.stdout.str()
    # Without --harvester-agent the fixture still works with agent=, and no case is collected.
    result = _run(project, "test_mine.py", "-k", "other_agent")
    result.assert_outcomes(passed=1, deselected=2)


@pytest.mark.slow
def test_no_accepted_cases_collects_nothing_and_says_why(project):
    for path in (project.path / "cases").glob("*.json"):
        if path.name != "suite.json":
            path.unlink()
    result = _run(project, GOOD)
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    assert "harvester: no accepted cases in cases/ (2 pending: run harvester review)" in result.stdout.str()
    result = _run(project, GOOD, "-n", "2")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    assert "harvester: no accepted cases in cases/" in result.stdout.str()


@pytest.mark.slow
def test_an_agent_that_cannot_be_imported_is_one_usage_error_line(project):
    result = _run(project, "--harvester-agent=nosuch.agent:build")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "ERROR: --harvester-agent 'nosuch.agent:build': cannot import nosuch.agent" in err
    assert "Traceback" not in err + result.stdout.str()
    result = _run(project, "--harvester-agent=harvester.demo.agent")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "expected module:attr" in result.stderr.str()


@pytest.mark.slow
def test_a_malformed_case_file_is_a_collection_error_naming_it(project):
    (project.path / "cases" / "broken.json").write_text('{"id": "broken", ')
    result = _run(project, GOOD)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    out = result.stdout.str()
    assert "ERROR collecting cases" in out and "broken.json" in out
    assert "Traceback" not in out
    result.assert_outcomes(errors=1)


def test_without_the_option_the_plugin_does_nothing_and_imports_no_replay(project):
    project.makepyfile(test_plain="def test_ok():\n    assert True\n")
    result = _run(project)
    result.assert_outcomes(passed=1)
    assert "cases::" not in result.stdout.str()
    code = (
        "import sys, harvester.pytest_plugin; "
        "print(sorted(m for m in sys.modules if m.startswith(('harvester.replay', 'harvester.report'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.slow
def test_the_model_option_reaches_the_replay_and_a_bad_one_is_a_usage_error(project):
    result = _run(project, GOOD, "--harvester-model=recorded", "-k", "order-a1002", "--harvester-report=m.json")
    [only] = Report.load(project.path / "m.json").results
    assert only.model is not None and only.model.mode == "recorded"
    result = _run(project, GOOD, "--harvester-model=bogus")
    assert "--harvester-model bogus: expected one of live, recorded, recorded-then-live" in result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "Traceback" not in result.stderr.str()
