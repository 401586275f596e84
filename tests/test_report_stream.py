"""Replay streams its results: each case to disk as it finishes (and to an ``on_case`` sink), the report
file written and read a result a line, and compare, merge and the HTML page reading it that way, with
reports in the older, pretty-printed layout still read whole."""

from __future__ import annotations

import copy
import gc
import pickle
import threading
import weakref

import orjson
import pytest

from harvester import checks
from harvester.case import Case
from harvester.errors import ReportFormatError
from harvester.replay import Finished, replay
from harvester.report import CaseResult, Report, ResultSpool, evaluate_gates, merge, render_html, render_html_chunks


def _cases(n: int, prefix: str = "c") -> list[Case]:
    return [Case(id=f"{prefix}{i}", task=str(i), checks=[checks.contains("ok")], why="w") for i in range(n)]


def _agent():
    def agent(prompt):
        return "ok" if int(prompt) % 3 else "no"

    return agent


def _report(n: int, prefix: str = "c", **kwargs) -> Report:
    return replay(_cases(n, prefix), _agent, concurrency=5, **kwargs)


def _old_layout(report: Report) -> bytes:
    """The file as reports were written before they streamed: the whole report, pretty-printed."""
    return orjson.dumps(report.model_dump(mode="json", by_alias=True), option=orjson.OPT_INDENT_2) + b"\n"


def test_replay_results_are_on_disk_in_plan_order_whatever_order_cases_finish_in():
    last_done = threading.Event()

    def build():
        def agent(prompt):
            if prompt == "0":
                last_done.wait(10)  # the first case finishes after the last one was handed on
            return "ok" if int(prompt) % 3 else "no"

        return agent

    finished: list[str] = []

    def sink(done: Finished) -> None:
        finished.append(done.result.id)
        if done.result.id == "c4":
            last_done.set()

    report = replay(_cases(5), build, concurrency=5, on_case=sink)
    assert isinstance(report.results, ResultSpool)
    assert finished[-1] == "c0" and sorted(finished) == [f"c{i}" for i in range(5)]
    assert [r.id for r in report.results] == [f"c{i}" for i in range(5)]
    assert report.passed == 3 and report.results[3].id == "c3" and not report.results[3].passed


def test_the_sink_gets_each_case_with_its_runs_and_nothing_keeps_them_after_it():
    seen: list[Finished] = []
    runs: list[weakref.ref] = []

    def sink(done: Finished) -> None:
        gc.collect()
        assert [r() for r in runs] == [None] * len(runs)  # the cases before: released once spooled
        seen.append(Finished(done.case, done.variant_of, [], done.result))  # what it keeps: not the runs
        runs.append(weakref.ref(done.outcomes[0].run))
        assert done.outcomes[0].run.answer in ("ok", "no") and done.result.id == done.case.id

    report = replay(_cases(6), _agent, concurrency=1, on_case=sink)
    assert len(seen) == 6 and {d.result.id for d in seen} == {r.id for r in report.results}


def test_confirm_reruns_reach_the_sink_and_the_spool_with_their_verdict():
    tries: dict[str, int] = {}

    def build():
        def agent(prompt):
            tries[prompt] = tries.get(prompt, 0) + 1
            return "ok" if prompt == "0" or (prompt == "1" and tries[prompt] > 1) else "no"

        return agent

    verdicts: dict[str, str | None] = {}
    report = replay(
        _cases(3), build, confirm=2, on_case=lambda d: verdicts.update({d.result.id: d.result.confirmation})
    )
    assert verdicts == {"c0": None, "c1": "flaky", "c2": "confirmed"}
    assert [(r.id, r.confirmation, r.trials) for r in report.results] == [
        ("c0", None, 1),
        ("c1", "flaky", 2),
        ("c2", "confirmed", 3),
    ]


def test_a_saved_report_is_one_result_a_line_and_reads_back_from_disk(tmp_path):
    report = _report(7)
    path = tmp_path / "r.json"
    report.save(path)
    lines = path.read_bytes().splitlines()
    assert lines[0].endswith(b'"results":[') and lines[-1] == b"]}" and len(lines) == 7 + 2
    assert orjson.loads(path.read_bytes())["schema"] == "harvester.report/1"  # still one JSON document
    back = Report.load(path)
    assert isinstance(back.results, ResultSpool) and list(back.results) == list(report.results)
    assert back.summary() == report.summary() and back.metrics() == report.metrics()
    Report().save(path)  # the file replaced after loading (--json naming the --baseline): read as loaded
    assert [r.id for r in back.results] == [f"c{i}" for i in range(7)]


def test_a_report_without_results_reads_back(tmp_path):
    Report(suite="empty").save(tmp_path / "r.json")
    back = Report.load(tmp_path / "r.json")
    assert back.suite == "empty" and list(back.results) == [] and back.headline() == "0/0 passed  (0%)"


def test_a_report_checked_out_with_crlf_line_ends_reads_the_same(tmp_path):
    report = _report(4)
    report.save(tmp_path / "r.json")
    (tmp_path / "crlf.json").write_bytes((tmp_path / "r.json").read_bytes().replace(b"\n", b"\r\n"))
    back = Report.load(tmp_path / "crlf.json")
    assert isinstance(back.results, ResultSpool) and list(back.results) == list(report.results)


def test_a_report_in_the_older_layout_reads_whole_and_compares_the_same(tmp_path):
    base, now = _report(6), _report(6)
    (tmp_path / "old.json").write_bytes(_old_layout(base))
    base.save(tmp_path / "new.json")
    old, new = Report.load(tmp_path / "old.json"), Report.load(tmp_path / "new.json")
    assert isinstance(old.results, list) and isinstance(new.results, ResultSpool)
    assert now.compare(old) == now.compare(new)
    assert evaluate_gates(now, (), old).to_dict() == evaluate_gates(now, (), new).to_dict()


def test_compare_streams_both_reports_and_finds_what_regressed(tmp_path):
    def build():
        return lambda prompt: "no" if prompt == "1" else "ok"

    replay(_cases(4), build).save(tmp_path / "base.json")
    _report(4).save(tmp_path / "now.json")
    base, now = Report.load(tmp_path / "base.json"), Report.load(tmp_path / "now.json")
    comparison = now.compare(base)
    assert comparison.regressed == ["c0", "c3"] and comparison.improved == ["c1"]


def test_merged_shards_stream_into_one_report(tmp_path):
    for i in (1, 2):
        _report(8, shard=(i, 2)).save(tmp_path / f"s{i}.json")
    merged = merge(Report.load(tmp_path / f"s{i}.json") for i in (1, 2))
    assert isinstance(merged.results, ResultSpool)
    assert sorted(r.id for r in merged.results) == [f"c{i}" for i in range(8)]
    merged.save(tmp_path / "m.json")
    assert Report.load(tmp_path / "m.json").headline() == _report(8).headline()


def test_the_html_page_is_written_a_case_at_a_time_and_stays_one_file(tmp_path):
    _report(5).save(tmp_path / "r.json")
    report = Report.load(tmp_path / "r.json")
    chunks = list(render_html_chunks(report))
    page = "".join(chunks)
    assert page == render_html(report) and len(chunks) > 5
    assert page.count("data-case-id=") == 5 and "<script src" not in page and "<link" not in page


def test_a_truncated_report_file_is_one_error_naming_it(tmp_path):
    _report(3).save(tmp_path / "r.json")
    data = (tmp_path / "r.json").read_bytes()
    (tmp_path / "cut.json").write_bytes(data[: data.rindex(b"\n]}")])
    with pytest.raises(ReportFormatError, match="cut.json.*truncated"):
        Report.load(tmp_path / "cut.json")


def test_a_bad_result_line_names_its_field(tmp_path):
    _report(3).save(tmp_path / "r.json")
    lines = (tmp_path / "r.json").read_bytes().splitlines(keepends=True)
    lines[2] = lines[2].replace(b'"passed":false', b'"passed":"maybe"').replace(b'"passed":true', b'"passed":"maybe"')
    (tmp_path / "bad.json").write_bytes(b"".join(lines))
    with pytest.raises(ReportFormatError, match=r"results\.1\.passed"):
        Report.load(tmp_path / "bad.json")


def test_a_spool_reads_back_what_it_was_given_in_the_order_asked():
    spool = ResultSpool()
    for i in (2, 0, 1):
        spool.add(CaseResult(id=f"r{i}", passed=i != 1), i)
    assert [r.id for r in spool] == ["r0", "r1", "r2"] and len(spool) == 3
    assert spool[1].id == "r1" and [r.id for r in spool[1:]] == ["r1", "r2"]
    assert [r.id for r in spool.where(lambda r: r.passed)] == ["r0", "r2"]
    report = Report()
    report.results = spool
    for copied in (copy.deepcopy(report), pickle.loads(pickle.dumps(report))):
        assert copied == report and isinstance(copied.results, list)
