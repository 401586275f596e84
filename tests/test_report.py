"""Reports: metrics, by_tag, baseline comparison (Fisher with trials), merge, renderers, files."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import orjson
import pytest

from harvester.errors import ReportFormatError
from harvester.report import CaseResult, CheckResult, Divergence, Injected, Report, fisher_drop_p, merge


def res(id, passed=True, tags=(), trials=1, passes=None, **kw) -> CaseResult:
    checks = kw.pop(
        "checks",
        [] if passed else [CheckResult(name="contains(30 days)", passed=False, detail="answer lacks '30 days'")],
    )
    return CaseResult(
        id=id, passed=passed, tags=list(tags), why=f"why {id}", trials=trials, passes=passes, checks=checks, **kw
    )


def rep(*results, **kw) -> Report:
    return Report(suite="s", suite_version="1.0.0", results=list(results), **kw)


def test_summary_keeps_its_shape():
    r = rep(res("a", tags=["a"], steps=1), res("b", tags=["b"], steps=2), res("c", tags=["a"], steps=2))
    assert r.summary().splitlines()[:3] == [
        "3/3 passed  (100%)",
        "mean steps 1.7   total cost n/a",
        "by tag: a=100%  b=100%",
    ]  # no case's cost is known
    priced = rep(res("a", tags=["a"], steps=1, cost=0.0002), res("b", tags=["b"], steps=2))
    assert priced.summary().splitlines()[1] == "mean steps 1.5   total cost 0.000200 (1 case n/a)"


def test_summary_lists_failures_with_why_and_details():
    r = rep(
        res("a"),
        res(
            "b", passed=False, divergence=Divergence(step=2, recorded="kb_search", actual="issue_refund"), no_fixture=1
        ),
        res("c", passed=False, error="RuntimeError: boom", checks=[]),
    )
    text = r.summary()
    assert "FAIL b: why b\n  - contains(30 days): answer lacks '30 days'" in text
    assert "  ~ b: 1 no_fixture call; diverged at step 2: recorded kb_search, actual issue_refund" in text
    assert text.count("diverged at step 2") == 1  # once, in the differs-from-the-recording list
    assert "FAIL c: why c\n  - agent error: RuntimeError: boom" in text


def test_an_error_with_line_breaks_is_one_line_in_the_summary():
    r = rep(res("c", passed=False, error="OperationalError: connection failed:\n\tIs the server running?", checks=[]))
    r.results.append(res("d", passed=False, errored=True, error="ValueError: bad\nvalue"))
    text = r.summary()
    assert "  - agent error: OperationalError: connection failed: Is the server running?" in text
    assert "d: ValueError: bad value" in text and "\tIs" not in text


def test_by_tag_exposes_compensating_movement():
    r = rep(
        res("e1", tags=["easy"]),
        res("e2", tags=["easy"]),
        res("h1", False, tags=["hard"]),
        res("h2", False, tags=["hard"]),
    )
    assert r.by_tag() == {"easy": 1.0, "hard": 0.0}
    assert r.pass_rate == 0.5


def test_regression_names_the_broken_case_and_the_reverse_names_nothing():
    before = rep(res("a"), res("b"))
    after = rep(res("a"), res("b", passed=False))
    assert after.regressed_against(before) == ["b"]
    assert before.regressed_against(after) == []
    assert before.improved_against(after) == ["b"]


def test_fisher_exact_matches_known_values():
    # 10/10 before, 5/10 now: p = C(15,10)... computed by hand: 0.01625...
    assert fisher_drop_p(10, 0, 5, 5) == pytest.approx(0.016253869969040248)
    assert fisher_drop_p(1, 0, 0, 1) == pytest.approx(0.5)
    assert fisher_drop_p(5, 5, 5, 5) == pytest.approx(0.67186, abs=1e-4)


def test_with_trials_only_significant_drops_regress():
    before = rep(res("big", trials=10, passes=10), res("small", trials=10, passes=10), trials=10)
    after = rep(res("big", False, trials=10, passes=4), res("small", False, trials=10, passes=8), trials=10)
    c = after.compare(before)
    assert c.regressed == ["big"] and c.changed == ["small"]
    assert "changed, not significant: ['small']" in c.lines()


def test_baseline_from_another_suite_version_warns_and_compares_what_matches():
    before = Report(suite="s", suite_version="1.0.0", results=[res("a"), res("gone")])
    after = Report(suite="s", suite_version="1.1.0", results=[res("a", False), res("new")])
    c = after.compare(before)
    assert c.regressed == ["a"] and c.missing == ["gone"] and c.added == ["new"]
    assert "1.0.0" in c.warnings[0] and "1.1.0" in c.warnings[0]


def test_metrics():
    r = rep(
        res("a", cost=0.01, tool_calls=4, redundant_calls=1, divergence=Divergence(step=1, recorded="x", actual="y")),
        res("b", False, cost=0.03, tool_calls=4, unauthorised=2, abstained=True),
        res("a@timeout", variant_of="a", injected=Injected(tool="kb", mode="timeout"), tags=["recovery"]),
        res("a@empty", False, variant_of="a", injected=Injected(tool="kb", mode="empty"), tags=["recovery"]),
    )
    m = r.metrics()
    assert m["task_completion"] == 0.5 and m["recovery_rate"] == 0.5
    assert m["unauthorised_actions"] == 2 and m["redundant_call_rate"] == 1 / 8
    assert m["cost_per_success"] == pytest.approx(0.04) and m["abstention_rate"] == 0.5 and m["divergence_rate"] == 0.5
    assert r.recovery() == {"by_mode": {"empty": 0.0, "timeout": 1.0}, "by_tool": {"kb": 0.5}}
    assert r.metrics(tag="recovery")["task_completion"] is None
    assert "recovery 50%: empty=0%  timeout=100%" in r.summary()


def test_json_round_trip_is_the_next_baseline(tmp_path):
    r = rep(res("a", trials=3, passes=2, divergence=Divergence(step=1, recorded="x")), trials=3)
    r.save(tmp_path / "r.json")
    back = Report.load(tmp_path / "r.json")
    assert back == r and back.results[0].flaky


def test_old_reports_still_load():
    old = {
        "schema": "harvester.report/1",
        "suite": "s",
        "created_at": "2026-01-01T00:00:00+00:00",
        "results": [
            {
                "id": "a",
                "passed": True,
                "tags": [],
                "why": "",
                "checks": [],
                "error": None,
                "stop": "answered",
                "answer": "x",
                "trajectory": [],
                "requested": [],
                "steps": 0,
                "cost": None,
                "duration_ms": 1.0,
            }
        ],
    }
    r = Report.from_data(old)
    assert r.results[0].passes == 1 and r.results[0].trials == 1


def test_load_errors_are_one_line(tmp_path):
    with pytest.raises(ReportFormatError, match="no such file"):
        Report.load(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ReportFormatError, match="not JSON"):
        Report.load(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text('{"schema": "something/1"}')
    with pytest.raises(ReportFormatError, match="not a harvester report"):
        Report.load(tmp_path / "other.json")


def test_junit_is_valid_xml_with_one_testcase_per_case():
    r = rep(res("a"), res("b", False), res("c", False, error="RuntimeError: \x01boom <&>", checks=[]))
    root = ET.fromstring(r.to_junit())
    suite = root.find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "1", "1")
    cases = {c.get("name"): c for c in suite.findall("testcase")}
    assert cases["a"].find("failure") is None
    assert "contains(30 days): answer lacks '30 days'" in cases["b"].find("failure").text
    # the failure's type is the failed check, its message what the check saw (not the run's stop)
    assert cases["b"].find("failure").get("type") == "contains(30 days)"
    assert cases["b"].find("failure").get("message") == "answer lacks '30 days'"
    assert cases["c"].find("error").get("type") == "RuntimeError"
    assert cases["c"].find("error").get("message") == "agent error: RuntimeError: boom <&>"


def test_markdown_summary():
    text = rep(res("a", tags=["x"]), res("b|c", False)).to_markdown()
    assert text.startswith("## harvester replay: s 1.0.0")
    assert "| task_completion | 0.5 |" in text and "| tag:x | 100% |" in text
    assert "- **b\\|c**: why b\\|c" in text


def test_merge_shards():
    merged = merge([rep(res("a"), trials=2), rep(res("b", False))])
    assert [r.id for r in merged.results] == ["a", "b"] and merged.trials == 2
    with pytest.raises(ReportFormatError, match="appears in two reports"):
        merge([rep(res("a")), rep(res("a"))])
    with pytest.raises(ReportFormatError, match="cannot merge"):
        merge([rep(res("a")), Report(suite="other", results=[res("b")])])
    with pytest.raises(ReportFormatError):
        merge([])


def test_comparison_json():
    c = rep(res("a", False)).compare(rep(res("a")))
    data = orjson.loads(orjson.dumps(c.to_dict()))
    assert data["regressed"] == ["a"] and data["metrics"]["task_completion"] == {
        "baseline": 1.0,
        "current": 0.0,
        "delta": -1.0,
    }


def test_summary_stays_short_when_many_cases_fail():
    crashed = [
        res(
            f"c{i:02}",
            passed=False,
            error="RuntimeError: boom",
            checks=[
                CheckResult(name="answered", passed=False, detail="stopped with error (RuntimeError: boom)"),
                CheckResult(name="contains(30 days)", passed=False, detail="answer lacks '30 days'"),
            ],
        )
        for i in range(25)
    ]
    text = rep(*crashed).summary()
    assert (
        "FAIL c00: why c00\n  - agent error: RuntimeError: boom\n  - contains(30 days): answer lacks '30 days'\n"
        in text + "\n"
    )
    assert "stopped with error" not in text and "FAIL c09" in text and "FAIL c10" not in text
    assert text.endswith("... and 15 more failing cases (all of them in --json, --junit and --markdown)")
    assert "stopped with error" in rep(*crashed).to_markdown()


def test_save_to_a_directory_or_unwritable_path_is_an_output_error(tmp_path):
    from harvester.errors import HarvesterError, OutputError

    (tmp_path / "reports").mkdir()
    with pytest.raises(OutputError, match="reports: is a directory"):
        rep(res("a")).save(tmp_path / "reports")
    (tmp_path / "file").write_text("x")
    with pytest.raises(OutputError, match="not a directory"):
        rep(res("a")).save(tmp_path / "file" / "r.json")
    assert issubclass(OutputError, HarvesterError)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "reports"]  # no stray .tmp


def test_a_failed_atomic_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    import os

    from harvester.errors import OutputError

    def refuse(src, dst):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(os, "replace", refuse)  # the rename that would publish the file
    with pytest.raises(OutputError, match=r"r.json: cannot write \(Permission denied\)"):
        rep(res("a")).save(tmp_path / "r.json")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "shards, message",
    [
        (["1/2"], "missing shard 2/2 (got 1/2)"),
        (["1/3", "3/3"], "missing shard 2/3"),
        (["1/2", "1/2", "2/2"], "shard 1/2 given more than once"),
        (["1/2", "2/3", "3/3"], "different splits"),
        (["1/2", None], "whole-suite reports with shard reports"),
    ],
)
def test_merge_requires_every_shard_exactly_once(shards, message):
    reports = [rep(res(f"c{k}"), shard=s) for k, s in enumerate(shards)]
    with pytest.raises(ReportFormatError, match=re.escape(message)):
        merge(reports)


def test_merge_of_complete_shards_is_a_whole_report():
    merged = merge([rep(res("b"), shard="2/2"), rep(res("a"), shard="1/2")])
    assert merged.shard is None and [r.id for r in merged.results] == ["b", "a"]
    assert len(merge([rep(res("a")), rep(res("b"))]).results) == 2  # unsharded reports: as before


def test_differing_cases_are_listed_compactly_passing_or_failing():
    from harvester.report import NoFixtureCall

    many = [res(f"p{i}", divergence=Divergence(step=1, recorded="x", actual="y")) for i in range(12)]
    calls = [NoFixtureCall(tool="get_order", reason="no_match", differs=["order_id"])]
    r = rep(
        res(
            "order-a1002",
            False,
            no_fixture=1,
            no_fixture_calls=calls,
            divergence=Divergence(step=2, recorded="get_order", actual="kb_search"),
        ),
        *many,
        res(
            "v@timeout",
            variant_of="v",
            injected=Injected(tool="kb", mode="timeout"),
            divergence=Divergence(step=1, recorded="kb"),
        ),
    )  # a variant diverges by design: not listed
    lines = r.summary().splitlines()
    assert (
        "  ~ order-a1002: 1 no_fixture call (get_order: no_match, differs at order_id); diverged at step 2: "
        "recorded get_order, actual kb_search" in lines
    )
    assert sum(line.startswith("  ~ ") for line in lines) == 10 and "  ... and 3 more" in "\n".join(lines)
    assert not any("v@timeout" in line for line in lines)
    md = r.to_markdown()
    assert md.count("- ~ **") == 10 and "(failed): 1 no_fixture call" in md


def test_old_reports_without_no_fixture_calls_still_load(tmp_path):
    data = orjson.loads(rep(res("a", no_fixture=2)).to_json())
    del data["results"][0]["no_fixture_calls"]
    back = Report.from_data(data)
    assert back.results[0].no_fixture_calls == [] and back.results[0].differences() == "2 no_fixture calls"


def test_total_cost_counts_the_cases_not_the_injected_variants():
    r = rep(res("a", cost=0.001), res("a@huge", cost=0.8, variant_of="a"))
    assert r.total_cost == 0.001 and "total cost 0.001000" in r.summary()


def test_float_noise_is_not_a_metric_change():
    before = rep(res("a", cost=0.1 + 0.2), res("b", cost=0.3))
    now = rep(res("a", cost=0.3), res("b", cost=0.1 + 0.2))
    assert not [line for line in now.compare(before).lines() if "cost_per_success" in line]
