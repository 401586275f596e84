"""``harvester shadow``: a candidate on production's stored traffic, compared run by run.

One store holds a few hundred production runs of the demo agent and of a real pydantic-ai agent
(``tests/apps/shadow_app.py``, on a ``FunctionModel``), captured as production captures them. Each
candidate changes behaviour on a known subset: the demo's widened allowlist on the gift-card question
(its poisoned article asks for a refund), the pydantic-ai agent's changed prompt on damaged orders
(it refunds them) and on shipping questions (other words). Shadow must report exactly that subset,
newly mutating runs first, propose cases only for those, and fail the gates; production's own agent
must come out unchanged. No tool body runs: the seal and the fixtures hold as in ``replay``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from harvester.cli import main
from harvester.demo import agent as support
from harvester.shadow import ShadowReport, run_key, wilson
from harvester.store import TraceStore
from tests.apps import shadow_app, shop
from tests.builders import shadow as traffic
from tests.builders.cli import one_line_error

pytestmark = pytest.mark.slow  # hundreds of runs captured, then replayed

DEMO_RUNS, PYDANTIC_RUNS = 300, 200
CONFIG = 'store = "traces.db"\ncases_dir = "cases"\nmutating_tools = ["issue_refund"]\n' + (
    "[prices.scripted-support-1]\ninput = 0.0004\noutput = 0.0016\n"
)
DEMO = ("--agent-filter", "support_agent")
PYDANTIC = ("--agent-filter", "pydantic_support")


@pytest.fixture(scope="module")
def production(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of both agents' production traffic (made once: the tests copy it)."""
    root = tmp_path_factory.mktemp("production")
    traffic.capture(root / "traces.db", traffic.serve_demo, traffic.demo_traffic(DEMO_RUNS))
    traffic.capture(root / "traces.db", traffic.serve_pydantic, shadow_app.traffic(PYDANTIC_RUNS))
    return root / "traces.db"


@pytest.fixture()
def project(production: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "harvester.toml").write_text(CONFIG)
    with TraceStore(str(production)) as src, TraceStore(str(tmp_path / "traces.db")) as dst:
        for run in src.runs():
            dst.add(run)
    monkeypatch.chdir(tmp_path)
    for env in ("HARVESTER_CASES", "HARVESTER_STORE"):
        monkeypatch.delenv(env, raising=False)
    shop.LIVE.clear()
    support.REFUNDS.clear()
    return tmp_path


def shadow(*args: str) -> Any:
    return CliRunner().invoke(main, ["shadow", *args], catch_exceptions=False)


def keys(project: Path, agent: str, where: Any) -> set[str]:
    with TraceStore(str(project / "traces.db")) as store:
        return {run_key(r) for r in store.runs(agent=agent) if where(r.prompt or "")}


def load(path: Path) -> ShadowReport:
    return ShadowReport.from_data(orjson.loads(path.read_bytes()))


def test_demo_widened_allowlist_is_exactly_the_gift_card_runs_mutating_first(project):
    out = shadow(
        "--agent", "harvester.demo.agent:build_widened", *DEMO, "--report", "r.json",
        "--gate", "new_mutating<=0", "--gate", "newly_failed<=0.02",
    )  # fmt: skip
    assert out.exit_code == 1, out.output
    report = load(project / "r.json")
    gift = keys(project, "support_agent", lambda p: p == traffic.GIFT_CARDS)
    assert len(gift) == DEMO_RUNS // len(traffic.DEMO_PROMPTS)
    assert report.total.runs == DEMO_RUNS
    assert {c.id for c in report.changes} == gift
    assert all(c.new_mutating == ["issue_refund"] and c.divergence is not None for c in report.changes)
    assert report.total.count("same") == DEMO_RUNS - len(gift)
    assert report.proposed == []  # nothing written without --propose
    assert not (project / "cases").exists()
    lines = out.stdout.splitlines()
    assert lines[0].startswith(f"newly mutating: {len(gift)} (") and "issue_refund" in lines[0]
    assert "called a mutating tool more often than production did" in lines[0]  # twice where it ran once too
    assert lines[1].split(":")[0].strip() in gift  # the newly mutating runs are listed right under it
    assert "gate new_mutating<=0: FAIL" in out.stdout and "gate newly_failed<=0.02: ok" in out.stdout
    assert support.REFUNDS == []  # sealed: the refund tool's body never ran


def test_demo_identical_candidate_reports_nothing_changed(project):
    out = shadow("--agent", "harvester.demo.agent:build", *DEMO, "--report", "r.json", "--gate", "new_mutating<=0",
                 "--gate", "same>=1")  # fmt: skip
    assert out.exit_code == 0, out.output
    report = load(project / "r.json")
    assert report.total.runs == DEMO_RUNS and report.changes == [] and report.total.count("changed") == 0
    assert out.stdout.splitlines()[0].startswith("newly mutating: 0 (0.0%, 95% CI 0.0%-1.3%)")
    assert report.metrics()["cost_delta"] == pytest.approx(0.0, abs=1e-12)


def test_demo_recorded_model_identical_candidate_is_unchanged(project):
    """``--model recorded``: each run's own model calls answer the candidate's, as its tools' do."""
    out = shadow("--agent", "harvester.demo.agent:build", *DEMO, "--model", "recorded", "--report", "r.json")
    assert out.exit_code == 0, out.output
    report = load(project / "r.json")
    assert report.model == "recorded" and report.total.runs == DEMO_RUNS and report.changes == []


def test_propose_writes_a_pending_case_for_each_newly_mutating_run_and_only_those(project):
    out = shadow("--agent", "harvester.demo.agent:build_widened", *DEMO, "--propose", "--report", "r.json")
    gift = keys(project, "support_agent", lambda p: p == traffic.GIFT_CARDS)
    written = [orjson.loads(p.read_bytes()) for p in sorted((project / "cases" / "pending").glob("*.json"))]
    assert len(written) == len(gift) == len(load(project / "r.json").proposed)
    assert {f"{c['source']['trace_id']}-{c['source']['run_id']}" for c in written} == gift
    for case in written:
        assert case["status"] == "pending" and "shadow" in case["tags"] and "new_mutating" in case["tags"]
        assert case["review_notes"][0].startswith("note: proposed by harvester shadow")
        assert "issue_refund" in case["review_notes"][0] and "issue_refund" in case["forbidden_tools"]
    assert f"proposed {len(gift)} pending case(s)" in out.stdout
    # Runs that are cases now are no longer shadowed: their review decides.
    again = shadow("--agent", "harvester.demo.agent:build_widened", *DEMO, "--report", "r2.json")
    assert again.exit_code == 0, again.output
    assert load(project / "r2.json").total.runs == DEMO_RUNS - len(gift) and load(project / "r2.json").changes == []


def test_pydantic_ai_changed_prompt_is_exactly_its_subset(project):
    out = shadow(
        "--agent", "tests.apps.shadow_app:build_candidate", *PYDANTIC, "--report", "r.json", "--propose",
        "--gate", "new_mutating<=0",
    )  # fmt: skip
    assert out.exit_code == 1, out.output
    report = load(project / "r.json")
    damaged = keys(project, "pydantic_support", lambda p: shadow_app.changed(p) == "mutating")
    reworded = keys(project, "pydantic_support", lambda p: shadow_app.changed(p) == "answer")
    assert damaged and reworded and report.total.runs == PYDANTIC_RUNS
    assert {c.id for c in report.changes} == damaged | reworded
    ids = [c.id for c in report.changes]
    assert set(ids[: len(damaged)]) == damaged  # newly mutating first
    assert all(c.new_mutating == ["issue_refund"] and c.new_calls == ["issue_refund"] for c in report.changes[:6])
    assert all(c.answer_changed and not c.new_mutating and c.divergence is None for c in report.changes[len(damaged) :])
    proposed = list((project / "cases" / "pending").glob("*.json"))
    assert len(proposed) == len(damaged)  # a reworded answer is a change, not one for the worse
    assert shop.LIVE == {}  # no tool body ran


def test_pydantic_ai_identical_candidate_reports_nothing_changed(project):
    out = shadow("--agent", "tests.apps.shadow_app:build", *PYDANTIC, "--json", "--gate", "same>=1")
    assert out.exit_code == 0, out.output
    report = ShadowReport.from_data(orjson.loads(out.stdout))  # --json: the report alone on stdout
    assert report.total.runs == PYDANTIC_RUNS and report.changes == []
    assert "newly mutating: 0" in out.stderr and "gate same>=1: ok" in out.stderr
    assert report.groups["agent"].keys() == {"pydantic_support"}


def test_groups_and_intervals_per_agent_failure_kind_and_tool_path(project):
    out = shadow("--agent", "harvester.demo.agent:build_widened", *DEMO, "--report", "r.json")
    report = load(project / "r.json")
    gift = DEMO_RUNS // len(traffic.DEMO_PROMPTS)
    blocked = report.groups["failure_kind"]["blocked_action"]  # production denied the gift-card refund
    assert blocked.runs == gift and blocked.count("new_mutating") == gift and blocked.rate("same") == 0
    assert report.groups["failure_kind"]["ok"].count("changed") == 0
    assert report.groups["tool_path"]["kb_search"].count("new_mutating") == gift
    lo, hi = report.total.interval("new_mutating")
    assert (lo, hi) == wilson(gift, DEMO_RUNS) and lo < gift / DEMO_RUNS < hi
    assert report.total.metrics()["new_mutating"] == pytest.approx(gift / DEMO_RUNS)
    assert out.exit_code == 0  # no gate: shadow informs


def test_sample_is_stratified_by_outcome_and_shards_merge_into_it(project):
    failed = sum(1 for p in traffic.demo_traffic(DEMO_RUNS) if p in traffic.DEMO_PROMPTS[2:4])  # denied, timeout
    opts = ("--agent", "harvester.demo.agent:build_widened", *DEMO, "--sample", "30")
    whole = shadow(*opts, "--report", "whole.json")
    assert whole.exit_code == 0, whole.output
    report = load(project / "whole.json")
    kinds = report.groups["failure_kind"]
    assert report.total.runs == 30 and sum(t.runs for k, t in kinds.items() if k != "ok") == 30 * failed // DEMO_RUNS
    for i in (1, 2):
        assert shadow(*opts, "--shard", f"{i}/2", "--report", f"s{i}.json").exit_code == 0
    shards = [load(project / f"s{i}.json") for i in (1, 2)]
    assert all(0 < s.total.runs < 30 for s in shards) and [s.shard for s in shards] == ["1/2", "2/2"]
    merged = CliRunner().invoke(
        main, ["merge", "s1.json", "s2.json", "-o", "m.json", "--html", "m.html", "--gate", "new_mutating<=0"]
    )
    assert merged.exit_code == 1, merged.output  # gated like the shadow run
    both = load(project / "m.json")
    assert (both.total.runs, both.total.counts) == (report.total.runs, report.total.counts)
    assert both.total.cost_candidate == pytest.approx(report.total.cost_candidate)
    assert {c.id for c in both.changes} == {c.id for c in report.changes}
    missing = CliRunner().invoke(main, ["merge", "s1.json", "-o", "m2.json"])
    one_line_error(missing, "missing shard 2/2")


def test_html_is_one_page_with_the_summary_rates_and_each_changed_run(project):
    out = shadow("--agent", "harvester.demo.agent:build_widened", *DEMO, "--html", "r.html", "--gate",
                 "new_mutating<=0")  # fmt: skip
    assert out.exit_code == 1
    page = (project / "r.html").read_text()
    gift = keys(project, "support_agent", lambda p: p == traffic.GIFT_CARDS)
    assert page.count("data-case-id=") == len(gift)
    assert page.count('data-first-divergence="2"') == len(gift)  # the replay report's step alignment, reused
    assert "newly mutating: 50" in page and "new_mutating&lt;=0" in page and "data-exit-code=1" in page
    assert "by failure kind" in page and "95% CI" in page
    assert "<script src" not in page and "http" not in page.split("<body>")[1].split("<script>")[0]


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (("--since", "2999-01-01T00:00"), ("--since", "in the future")),
        (("--since", "yesterday-ish"), ("--since", "cannot read time")),
        (("--gate", "new_mutatnig<=0"), ("--gate", "unknown metric 'new_mutatnig'", "new_mutating")),
        (("--gate", "task_completion>=0.9"), ("--gate", "unknown metric 'task_completion'")),
        (("--gate", "newly_failed<=2"), ("--gate", "a rate from 0 to 1")),
        (("--gate", "delta:same>=0"), ("--gate", "delta:")),
    ],
)
def test_bad_input_is_one_line_naming_the_option(project, args, needles):
    one_line_error(shadow("--agent", "harvester.demo.agent:build", *args), *needles)


def test_failed_only_an_unknown_agent_filter_and_several_agents(project):
    out = shadow("--agent", "harvester.demo.agent:build", "--failed", "--report", "r.json")
    failed = sum(1 for p in traffic.demo_traffic(DEMO_RUNS) if p in traffic.DEMO_PROMPTS[2:4])
    assert out.exit_code == 0 and load(project / "r.json").total.runs == failed  # the pydantic runs all went fine
    assert "warning" not in out.stderr
    mixed = shadow("--agent", "harvester.demo.agent:build", "--sample", "20", "--report", "m.json")
    assert load(project / "m.json").groups["agent"].keys() == {"support_agent", "pydantic_support"}
    assert "warning: runs of 2 agents (pydantic_support, support_agent)" in mixed.stderr
    none = shadow("--agent", "harvester.demo.agent:build", "--agent-filter", "nobody", "--report", "n.json")
    assert none.exit_code == 0 and load(project / "n.json").total.runs == 0


def test_shards_on_each_store_engine_merge_into_the_whole(production, store_url, tmp_path, monkeypatch):
    """On SQLite and on the shared PostgreSQL store alike: two shards, merged, are the whole shadow."""
    (tmp_path / "harvester.toml").write_text(CONFIG)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARVESTER_STORE", raising=False)
    with TraceStore(str(production)) as src, TraceStore(store_url) as dst:
        runs = list(src.runs(agent="support_agent", limit=36))
        for run in runs:
            dst.add(run)
    gift = {run_key(r) for r in runs if r.prompt == traffic.GIFT_CARDS}
    opts = ("--agent", "harvester.demo.agent:build_widened", "--store", store_url)
    for i in (1, 2):
        assert shadow(*opts, "--shard", f"{i}/2", "--report", f"s{i}.json").exit_code == 0
    merged = CliRunner().invoke(main, ["merge", "s1.json", "s2.json", "-o", "m.json", "--gate", "new_mutating<=0"])
    assert merged.exit_code == 1, merged.output
    both = load(tmp_path / "m.json")
    assert both.total.runs == len(runs) and {c.id for c in both.changes} == gift and len(gift) == 6
