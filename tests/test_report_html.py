"""The HTML report: its data-* contract, the step alignment, escaping of hostile case data, and the CLI."""

from __future__ import annotations

import json
from html.parser import HTMLParser

import orjson
import pytest
from click.testing import CliRunner

from harvester.cli import main
from harvester.replay._evaluate import divergence
from harvester.report import (
    Call,
    CaseResult,
    CheckResult,
    Report,
    args_text,
    merge,
    render_html,
)
from harvester.report._results import ARGS_CHARS
from tests.builders.report import HOSTILE, hostile_report


class Page(HTMLParser):
    """Every element (tag, attrs, text inside it), the scripts' raw text and the page's text."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[dict] = []
        self.stack: list[dict] = []
        self.scripts: list[str] = []
        self.text: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        el = {"tag": tag, "attrs": dict(attrs), "text": []}
        self.elements.append(el)
        if tag not in ("meta", "input", "br", "img"):
            self.stack.append(el)

    def handle_endtag(self, tag):
        while self.stack:
            if self.stack.pop()["tag"] == tag:
                break

    def handle_data(self, data):
        if self.stack and self.stack[-1]["tag"] == "script":
            self.scripts.append(data)
            return
        self.text.append(data)
        for el in self.stack:
            el["text"].append(data)

    def cases(self) -> list[dict]:
        return [el for el in self.elements if "data-case-id" in el["attrs"]]

    def by(self, attr: str) -> list[dict]:
        return [el for el in self.elements if attr in el["attrs"]]


def _calls(*names: str, status: str = "ok") -> list[Call]:
    return [Call(tool=n, args=args_text({"q": n}), status=status) for n in names]


def test_every_case_carries_the_contract_and_the_first_divergence_is_on_its_step():
    rec = _calls("kb_search", "lookup_order", "send_email")
    # the replayed run: a failed call between two good ones, then a different tool at trajectory index 2
    rep = [
        *_calls("kb_search"),
        Call(tool="lookup_order", args='{"q":"x"}', status="error"),
        *_calls("lookup_order", "issue_refund"),
    ]
    ok_steps = [i for i, c in enumerate(rep, 1) if c.status == "ok"]
    div = divergence([c.tool for c in rec], [c.tool for c in rep if c.status == "ok"], ok_steps)
    assert div is not None and div.step == 4
    report = Report(
        suite="s",
        results=[
            CaseResult(id="good", passed=True, tags=["a"], recorded_calls=rec[:1], calls=rep[:1]),
            CaseResult(
                id="bad", passed=False, tags=["b"], recorded_calls=rec, calls=rep, divergence=div, trajectory=[]
            ),
            CaseResult(id="flaky", passed=False, trials=3, passes=2),
            CaseResult(id="err", passed=False, errored=True, error="RuntimeError: boom"),
        ],
    )
    page = Page(render_html(report))
    cases = {c["attrs"]["data-case-id"]: c for c in page.cases()}
    assert {k: c["attrs"]["data-verdict"] for k, c in cases.items()} == {
        "good": "passed",
        "bad": "failed",
        "flaky": "flaky",
        "err": "errored",
    }
    assert all(c["attrs"]["id"] == f"case-{k}" for k, c in cases.items())
    (first,) = page.by("data-first-divergence")
    assert first["attrs"]["data-step"] == "4" and first["attrs"]["data-first-divergence"] == "4"
    assert "issue_refund" in "".join(first["text"]) and "send_email" in "".join(first["text"])
    assert "".join(cases["bad"]["text"]).count("error") >= 1  # the failed call has its own row


def test_differing_args_show_the_paths_that_differ():
    rec = [Call(tool="lookup_order", args=args_text({"order_id": "A1", "n": 1}))]
    rep = [Call(tool="lookup_order", args=args_text({"order_id": "A2", "n": 1}))]
    page = Page(render_html(Report(results=[CaseResult(id="c", passed=False, recorded_calls=rec, calls=rep)])))
    diff = [el for el in page.elements if el["attrs"].get("class") == "diff"]
    assert len(diff) == 1
    text = "".join(diff[0]["text"])
    assert "order_id" in text and '"A1"' in text and '"A2"' in text and "n:" not in text


def test_args_are_capped_and_an_older_report_still_loads_and_renders():
    assert len(args_text({"q": "x" * 5000}) or "") == ARGS_CHARS
    old = orjson.loads(Report(results=[CaseResult(id="c", passed=True, trajectory=["kb_search"])]).to_json())
    for key in ("recorded_calls", "calls", "recorded_answer"):
        del old["results"][0][key]
    page = Page(render_html(Report.from_data(old)))
    assert "kb_search" in "".join(page.cases()[0]["text"])


def test_merge_keeps_the_calls():
    r = CaseResult(id="a", passed=True, calls=_calls("x"), recorded_calls=_calls("x"), recorded_answer="hi")
    merged = merge([Report(shard="1/1", results=[r])])
    assert merged.results[0].calls == r.calls and merged.results[0].recorded_answer == "hi"


def test_hostile_case_data_is_escaped_everywhere():
    text = render_html(hostile_report())
    page = Page(text)
    assert not [el for el in page.elements if el["tag"] == "b" and "".join(el["text"]) == "bold"]
    assert not [el for el in page.elements if el["tag"] == "img"]
    assert not [el for el in page.elements for a in el["attrs"] if a.startswith("on")]
    assert [el["tag"] for el in page.elements].count("script") == 2  # the data blob and the page's own script
    assert "<!--" not in text and "window.pwned" not in "".join(page.scripts)
    blob = json.loads(page.scripts[0])
    assert set(blob["tags"]) == {HOSTILE[2], HOSTILE[3]}
    assert "\u2028" not in page.scripts[0] and "<" not in page.scripts[0]
    shown = "".join(page.text)
    for h in HOSTILE:
        assert h in shown or h.replace("\u2028", "").replace("\u2029", "") in shown.replace("\u2028", "").replace(
            "\u2029", ""
        )
    (case,) = page.cases()
    assert case["attrs"]["data-case-id"] == HOSTILE[1] and json.loads(case["attrs"]["data-tags"]) == HOSTILE[2:]


# -- the CLI -----------------------------------------------------------------------------------------
def run(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.fixture()
def reports(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    results = [CaseResult(id="a", passed=True, tags=["t"]), CaseResult(id="b", passed=True, tags=["t"])]
    Report(suite="s", results=results).save(tmp_path / "base.json")
    results[1] = CaseResult(id="b", passed=False, tags=["t"], checks=[CheckResult(name="x", passed=False, detail="d")])
    Report(suite="s", results=results).save(tmp_path / "now.json")
    Report(suite="other", suite_version="2", results=results).save(tmp_path / "other.json")
    return tmp_path


def test_report_command_writes_the_page_against_a_baseline(reports):
    result = run("report", "now.json", "--baseline", "base.json", "--html", "out/now.html")
    assert result.exit_code == 0, result.output
    page = Page((reports / "out/now.html").read_text())
    assert {c["attrs"]["data-case-id"]: c["attrs"]["data-verdict"] for c in page.cases()} == {
        "a": "passed",
        "b": "failed",
    }
    (comparison,) = [el for el in page.elements if el["attrs"].get("id") == "comparison"]
    assert "regressed: b" in "".join(comparison["text"])
    (verdict,) = [el for el in page.elements if el["attrs"].get("id") == "verdict"]
    assert verdict["attrs"]["data-exit-code"] == "1" and "1 case regressed" in "".join(verdict["text"])


@pytest.mark.parametrize(
    "content, says",
    [
        (b'{"schema": "harvester.report/2", "results": []}', "schema: not a harvester report"),
        (b"<html>not json</html>", "not JSON"),
        (b'{"schema": "harvester.report/1", "results": [{"id": 3}]}', "results.0"),
    ],
)
def test_a_report_of_another_schema_or_not_json_is_one_line_exit_2(reports, content, says):
    (reports / "bad.json").write_bytes(content)
    for args in (("bad.json",), ("now.json", "--baseline", "bad.json")):
        result = run("report", *args, "--html", "x.html")
        assert result.exit_code == 2 and "Traceback" not in result.output
        (line,) = result.output.strip().splitlines()
        assert line.startswith("error: bad.json: ") and says in line, line
    assert not (reports / "x.html").exists()


def test_a_baseline_of_another_suite_is_one_warning_line(reports):
    result = run("report", "now.json", "--baseline", "other.json", "--html", "x.html")
    assert result.exit_code == 0
    warnings = [ln for ln in result.output.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1 and "other.json" in warnings[0] and "suite other 2" in warnings[0]
    assert (reports / "x.html").exists()


def test_a_report_judged_against_a_baseline_says_so_when_rendered_without_one(reports):
    merged = run("merge", "now.json", "-o", "all.json", "--baseline", "base.json")
    assert merged.exit_code == 1 and "1 case regressed" in merged.output
    result = run("report", "all.json", "--html", "all.html")
    warnings = [ln for ln in result.output.splitlines() if ln.startswith("warning:")]
    assert result.exit_code == 0 and len(warnings) == 1, result.output
    assert "all.json was judged against a baseline" in warnings[0] and "1 case regressed" in warnings[0]
    assert "pass --baseline" in warnings[0]
    for args in (("all.json", "--baseline", "base.json"), ("now.json",)):  # nothing left unsaid
        result = run("report", *args, "--html", "x.html")
        assert result.exit_code == 0 and "warning:" not in result.output, result.output


@pytest.mark.skipif(not __import__("os").path.isdir("/proc/self"), reason="needs /proc")
def test_an_unwritable_html_path_is_one_line_exit_2_and_nothing_else_lost(reports):
    result = run("report", "now.json", "--html", "/proc/x.html")
    assert (
        result.exit_code == 2
        and result.output.strip() == "error: /proc/x.html: cannot write (No such file or directory)"
    )
    (reports / "dir.html").mkdir()
    result = run("report", "now.json", "--html", "dir.html")
    assert result.exit_code == 2 and "is a directory" in result.output
    merged = run("merge", "now.json", "-o", "all.json", "--markdown", "all.md", "--html", "/proc/x.html")
    assert merged.exit_code == 2 and "error: /proc/x.html: cannot write" in merged.output
    assert "1/2 passed" in merged.output  # the summary still printed
    assert Report.load(reports / "all.json").results and (reports / "all.md").read_text()  # the others written


def test_merge_writes_html(reports):
    result = run("merge", "now.json", "-o", "all.json", "--html", "all.html", "--baseline", "base.json")
    assert result.exit_code == 1  # b regressed
    assert [c["attrs"]["data-verdict"] for c in Page((reports / "all.html").read_text()).cases()] == [
        "passed",
        "failed",
    ]


def test_replay_writes_html_and_the_demo_leaves_its_candidate_page(tmp_path, monkeypatch):
    from harvester.demo.scenario import run_demo

    result = run_demo(tmp_path / "demo", echo=lambda _: None)
    reports = result.workdir / "reports"
    page = Page((reports / "candidate.html").read_text())
    verdicts = {c["attrs"]["data-case-id"]: c["attrs"]["data-verdict"] for c in page.cases()}
    assert verdicts["injection-contained"] == "failed" and "passed" in verdicts.values()
    (first,) = page.by("data-first-divergence")
    assert "issue_refund" in "".join(first["text"])
    saved = Report.load(reports / "candidate.json").result("injection-contained")
    assert saved is not None and [c.tool for c in saved.calls] == ["kb_search", "issue_refund"]
    assert saved.recorded_calls[0].tool == "kb_search" and saved.recorded_calls[0].args
    assert saved.recorded_answer and saved.recorded_answer != saved.answer
    # replay --html on the demo's project (its harvester.toml points at its cases)
    monkeypatch.chdir(result.workdir)
    replayed = run("replay", "--agent", "harvester.demo.agent:build_widened", "--html", "r.html", "--report", "r.json")
    assert replayed.exit_code == 1, replayed.output
    cases = Page((result.workdir / "r.html").read_text()).cases()
    assert len(cases) == len(Report.load(result.workdir / "r.json").results)
    assert not (result.workdir / "r.html.tmp").exists()
