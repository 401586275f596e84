"""``harvester suite stats`` (issue 35 item 5): the accepted suite's mix by kind, abstention and recovery
cases, coverage, the oldest recording, and one warning for each thing the suite cannot measure."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from harvester.case import daily_tools, save_case, suite_stats
from harvester.cli import main
from harvester.config import Config, SuiteMix, load_config
from harvester.store import TraceStore
from tests.builders.agents import case
from tests.builders.cli import one_line_error
from tests.builders.runs import call, run

DEMO = Path(__file__).resolve().parents[1] / "cases"


@pytest.fixture
def demo(tmp_path, monkeypatch):
    """A copy of the repository's demo suite, in a project folder with no trace store."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARVESTER_CASES", raising=False)
    monkeypatch.delenv("HARVESTER_STORE", raising=False)
    shutil.copytree(DEMO, tmp_path / "cases")
    return tmp_path / "cases"


def stats(*args: str) -> dict:
    result = CliRunner().invoke(main, ["suite", "stats", "--json", *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_demo_suite_has_no_unanswerable_case_and_says_so(demo):
    data = stats()
    assert data["cases"] == 3 and data["kinds"] == {"typical": 2, "edge": 0, "adversarial": 1, "regression": 0}
    assert (
        data["abstention"] == [] and data["agents"] == ["support_agent"] and data["tools"] == ["get_order", "kb_search"]
    )
    assert data["oldest"]["case"] == "order-a1002" and data["oldest"]["age_days"] > 0
    assert data["warnings"][0].startswith("no unanswerable case: the abstention rate measures nothing")
    assert [w.split(":")[0] for w in data["warnings"][1:]] == ["edge", "regression"]  # 0% of 25% and 15%
    text = CliRunner().invoke(main, ["suite", "stats"], catch_exceptions=False)
    assert "kinds:       typical 2 (67%, aim 40%)" in text.stdout
    assert sum(line.startswith("warning: ") for line in text.stderr.splitlines()) == 3


def test_an_accepted_abstention_case_silences_that_warning(demo):
    assert CliRunner().invoke(main, ["accept", "ceos-favourite-colour"]).exit_code == 0
    data = stats()
    assert data["abstention"] == ["ceos-favourite-colour"]
    assert not any("unanswerable" in w for w in data["warnings"])


def test_the_kind_mapping_and_mix_are_configurable(demo):
    (demo.parent / "harvester.toml").write_text(
        '[suite]\nkinds = { adversarial = ["security"], edge = ["policy"] }\n'  # the mapping replaces the default
        "mix = { typical = 0.3, edge = 0.3, adversarial = 0.3 }\n"
    )
    data = stats()
    assert data["kinds"] == {"typical": 1, "edge": 1, "adversarial": 1} and data["mix"]["edge"] == 0.3
    assert data["warnings"] == [data["warnings"][0]]  # only the abstention one: every kind is at its mix


def test_a_mix_share_above_one_is_one_line(demo):
    (demo.parent / "harvester.toml").write_text("[suite]\nmix = { edge = 25 }\n")
    one_line_error(CliRunner().invoke(main, ["suite", "stats"]), "suite.mix.edge")


def test_recovery_variants_and_a_daily_tool_no_case_calls(tmp_path):
    recovering = case("late", inject_failures={"kb_search": {"mode": "timeout"}}, tags=["edge"])
    failing = case(
        "db-down", fixtures=[{"key": "get_order:x", "tool": "get_order", "args": None, "error": {"type": "timeout"}}]
    )
    day = [
        run(call("kb_search"), call("send_email")).model_copy(update={"started_at": f"2026-12-0{d}T10:00:00Z"})
        for d in (1, 2, 3)
    ]
    day.append(run(call("get_weather")).model_copy(update={"started_at": "2026-12-02T11:00:00Z"}))  # not every day
    assert daily_tools(day) == ["kb_search", "send_email"]
    out = suite_stats([recovering, failing], Config(), daily=daily_tools(day), now=time.time())
    assert out.recovery == {"kb_search": 1, "get_order": 1}
    assert "no case calls send_email, which production called every day" in out.warnings


def test_the_command_reads_daily_tools_from_the_store(demo, tmp_path):
    with TraceStore(tmp_path / "traces.db") as store:
        now = time.time()
        for d in range(3):
            started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - d * 86400 - 60))
            store.add(
                run(call("get_order"), call("send_email"), trace=f"{d:032x}").model_copy(update={"started_at": started})
            )
    data = stats("--store", str(tmp_path / "traces.db"))
    assert "no case calls send_email, which production called every day" in data["warnings"]


def test_no_accepted_case_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    save_case(case("p1", status="pending"), tmp_path / "cases" / "pending")
    one_line_error(
        CliRunner().invoke(main, ["suite", "stats", "--cases", str(tmp_path / "cases")]), "no accepted cases"
    )


def test_the_documented_mapping_and_mix_are_the_defaults(tmp_path):
    page = (DEMO.parent / "docs" / "configuration.md").read_text()
    (tmp_path / "pyproject.toml").write_text(re.search(r"```toml\n(.*?)```", page, re.S).group(1))
    assert load_config(str(tmp_path / "pyproject.toml")).suite == SuiteMix()
