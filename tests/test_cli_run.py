"""harvester replay / compare / merge through click's CliRunner."""

from __future__ import annotations

import sys
import textwrap
import xml.etree.ElementTree as ET

import orjson
import pytest
from click.testing import CliRunner

from harvester.canonical import fixture_key
from harvester.case import AgentCase, save_case
from harvester.cli import main
from harvester.report import CaseResult, Report

AGENT = textwrap.dedent("""
    def build(tools):
        def agent(prompt):
            return "Answer: " + str(tools.execute("kb_search", {"query": "refund policy"}))
        return agent

    def garbage():
        return lambda prompt: 42

    NOT_CALLABLE = 3
""")


@pytest.fixture()
def project(tmp_path, monkeypatch):
    (tmp_path / "cli_agent_mod.py").write_text(AGENT)
    (tmp_path / "broken_agent_mod.py").write_text("raise RuntimeError('bad import')\n")
    (tmp_path / "harvester.toml").write_text('cases_dir = "cases"\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARVESTER_CASES", raising=False)
    for mod in ("cli_agent_mod", "broken_agent_mod"):
        sys.modules.pop(mod, None)
    for cid, result in (("refund-ok", "Refunds within 30 days."), ("refund-bad", "No article found.")):
        save_case(
            AgentCase.model_validate(
                {
                    "id": cid,
                    "status": "accepted",
                    "prompt": "Can I return A1001?",
                    "why": "policy",
                    "required_elements": ["30 days"],
                    "appropriate_tools": ["kb_search"],
                    "tags": ["refunds"],
                    "fixtures": [
                        {
                            "key": fixture_key("kb_search", {"query": "refund policy"}),
                            "tool": "kb_search",
                            "args": {"query": "refund policy"},
                            "result": result,
                        }
                    ],
                    "recorded": {"trajectory": ["kb_search"]},
                }
            ),
            tmp_path / "cases",
        )
    return tmp_path


def run(*args):
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_help():
    for cmd in ("replay", "compare", "merge"):
        result = run(cmd, "--help")
        assert result.exit_code == 0 and "Usage:" in result.output


def test_replay_writes_every_report_and_exits_1_when_a_case_fails(project):
    result = run(
        "replay",
        "--agent",
        "cli_agent_mod:build",
        "--report",
        "out/r.json",
        "--junit",
        "out/r.xml",
        "--markdown",
        "out/r.md",
    )
    assert result.exit_code == 1, result.output
    assert "1/2 passed  (50%)" in result.output and "FAIL refund-bad: policy" in result.output
    assert "gate task_completion>=1: FAIL (0.5)" in result.output
    assert "gate unauthorised_actions<=0: ok (0)" in result.output
    report = Report.load(project / "out/r.json")
    assert {r.id: r.passed for r in report.results} == {"refund-ok": True, "refund-bad": False}
    assert ET.parse(project / "out/r.xml").getroot().find("testsuite").get("failures") == "1"
    assert "### Failing cases" in (project / "out/r.md").read_text()


def test_replay_gates_and_baseline(project):
    assert run("replay", "--agent", "cli_agent_mod:build", "--gate", "task_completion>=0.5").exit_code == 0
    Report(
        suite="cases", results=[CaseResult(id="refund-bad", passed=True), CaseResult(id="refund-ok", passed=True)]
    ).save(project / "base.json")
    result = run(
        "replay", "--agent", "cli_agent_mod:build", "--baseline", "base.json", "--gate", "task_completion>=0.5"
    )
    assert result.exit_code == 1 and "regressed: ['refund-bad']" in result.output
    assert "gate task_completion>=0.5: ok" in result.output  # every gate passes: the regression alone fails it
    assert result.output.rstrip().splitlines()[-1] == "release gate: FAIL (1 case regressed)"
    assert "warning: baseline is cases (unversioned)" in result.output  # another suite version: warn, compare


@pytest.mark.parametrize("spelling", [["--json"], ["--report", "-"]])
def test_replay_json_to_stdout_is_a_report(project, spelling):
    """``--json`` means what it means on every command: JSON for machines on stdout; the summary and
    the gate lines go to stderr, so the stdout is the report alone."""
    result = CliRunner().invoke(
        main, ["replay", "--agent", "cli_agent_mod:build", *spelling, "--gate", "task_completion>=0"]
    )
    assert result.exit_code == 0, result.output
    assert orjson.loads(result.stdout)["schema"] == "harvester.report/1"
    assert "release gate: PASS" in result.stderr


def test_replay_refuses_two_different_report_paths(project):
    result = CliRunner().invoke(main, ["replay", "--agent", "cli_agent_mod:build", "--json", "--report", "b.json"])
    assert result.exit_code == 2 and "--report and --json both name the report" in result.output
    assert not (project / "a.json").exists() and not (project / "b.json").exists()


def test_replay_inject_trials_shard(project):
    result = run(
        "replay",
        "--agent",
        "cli_agent_mod:build",
        "--inject",
        "--trials",
        "2",
        "--shard",
        "1/1",
        "--report",
        "r.json",
        "--gate",
        "task_completion>=0",
    )
    report = Report.load(project / "r.json")
    assert len(report.results) == 2 * 8 and report.trials == 2 and report.shard == "1/1"
    assert "recovery" in result.output


@pytest.mark.parametrize(
    "spec, message",
    [
        ("no_such_mod_qq:build", "cannot import no_such_mod_qq"),
        ("broken_agent_mod:build", "RuntimeError: bad import"),
        ("cli_agent_mod:missing", "has no attribute 'missing'"),
        ("cli_agent_mod:NOT_CALLABLE", "not a callable"),
    ],
)
def test_bad_agent_is_one_line_exit_2(project, spec, message):
    result = run("replay", "--agent", spec)
    assert result.exit_code == 2 and message in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def test_agent_returning_garbage_fails_its_cases_and_keeps_the_report(project):
    result = run("replay", "--agent", "cli_agent_mod:garbage", "--report", "r.json")
    assert result.exit_code == 1 and "agent returned int" in result.output
    assert len(Report.load(project / "r.json").results) == 2


def test_corrupt_fixtures_are_a_one_line_error(project):
    path = project / "cases" / "refund-ok.json"
    data = orjson.loads(path.read_bytes())
    data["fixtures"][0]["args"] = {"query": "edited by hand"}
    path.write_bytes(orjson.dumps(data))
    result = run("replay", "--agent", "cli_agent_mod:build")
    assert result.exit_code == 2 and "refund-ok.json" in result.output and "fixtures.0.key" in result.output


@pytest.mark.parametrize(
    "gate, message",
    [
        ("task_complete>=1", "unknown metric 'task_complete'"),
        ("task_completion=>1", "malformed gate"),
        ("delta:task_completion>=0", "pass --baseline"),
    ],
)
def test_bad_gate_fails_before_running(project, gate, message):
    result = run("replay", "--agent", "cli_agent_mod:build", "--gate", gate)
    assert result.exit_code == 2 and message in result.output


def test_bad_shard_is_a_usage_error(project):
    result = CliRunner().invoke(main, ["replay", "--agent", "cli_agent_mod:build", "--shard", "3/2"])
    assert result.exit_code == 2 and "expected I/N" in result.output


def _report(path, **passed):
    Report(suite="s", results=[CaseResult(id=k, passed=v) for k, v in passed.items()]).save(path)


def test_compare(tmp_path):
    _report(tmp_path / "base.json", a=True, b=True, c=False)
    _report(tmp_path / "now.json", a=True, b=False, c=True)
    result = run("compare", str(tmp_path / "now.json"), "--baseline", str(tmp_path / "base.json"))
    assert result.exit_code == 1
    assert "regressed: ['b']" in result.output and "improved: ['c']" in result.output
    assert result.output.rstrip().splitlines()[-1] == "release gate: FAIL (1 case regressed)"
    data = orjson.loads(
        run("compare", str(tmp_path / "now.json"), "--baseline", str(tmp_path / "base.json"), "--json").output
    )
    assert data["regressions"] == ["b"] and data["comparison"]["improved"] == ["c"]
    same = run("compare", str(tmp_path / "now.json"), "--baseline", str(tmp_path / "now.json"))
    last = same.output.rstrip().splitlines()[-1]
    assert same.exit_code == 0 and last == "release gate: PASS (1 case failed in the baseline too)"


def test_compare_bad_report_is_exit_2(tmp_path):
    (tmp_path / "x.json").write_text("{}")
    result = run("compare", str(tmp_path / "x.json"), "--baseline", str(tmp_path / "x.json"))
    assert result.exit_code == 2 and "not a harvester report" in result.output


def test_merge(tmp_path):
    _report(tmp_path / "s1.json", a=True)
    _report(tmp_path / "s2.json", b=True)
    result = run(
        "merge",
        str(tmp_path / "s1.json"),
        str(tmp_path / "s2.json"),
        "-o",
        str(tmp_path / "all.json"),
        "--junit",
        str(tmp_path / "all.xml"),
    )
    assert result.exit_code == 0 and "2/2 passed" in result.output
    assert [r.id for r in Report.load(tmp_path / "all.json").results] == ["a", "b"]
    assert (tmp_path / "all.xml").exists()
    dup = run("merge", str(tmp_path / "s1.json"), str(tmp_path / "s1.json"), "-o", str(tmp_path / "x.json"))
    assert dup.exit_code == 2 and "appears in two reports" in dup.output


def test_an_agent_module_in_the_working_directory_imports(project, monkeypatch):
    # the console script's sys.path starts at its bin folder, not the cwd (unlike pytest's)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(project))])
    result = run("replay", "--agent", "cli_agent_mod:build")
    assert "cannot import" not in result.output and "1/2 passed" in result.output


def test_compare_and_merge_apply_the_config_gates(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "harvester.toml").write_text('gates = ["tag:security>=1.0"]\n')
    Report(suite="s", results=[CaseResult(id="a", passed=True, tags=["security"])]).save(tmp_path / "base.json")
    Report(suite="s", shard="1/2", results=[CaseResult(id="a", passed=False, tags=["security"])]).save(
        tmp_path / "s1.json"
    )
    Report(suite="s", shard="2/2", results=[CaseResult(id="b", passed=True, tags=["general"])]).save(
        tmp_path / "s2.json"
    )
    merged = run("merge", "s1.json", "s2.json", "-o", "all.json")
    assert merged.exit_code == 1 and "gate tag:security>=1.0: FAIL (0)" in merged.output
    compared = run("compare", "s2.json", "--baseline", "s2.json")
    assert "gate tag:security>=1.0: ok (no data in shard 2/2)" in compared.output and compared.exit_code == 0
    compared = run("compare", "all.json", "--baseline", "base.json", "--config", "harvester.toml")
    assert compared.exit_code == 1 and "gate tag:security>=1.0: FAIL (0)" in compared.output
    (tmp_path / "bad.toml").write_text("gatez = []\n")
    bad = run("compare", "all.json", "--baseline", "base.json", "--config", "bad.toml")
    assert bad.exit_code == 2 and "unknown key 'gatez'" in bad.output


# -- outputs that cannot be written ---------------------------------------------------------------
def test_a_directory_as_output_is_one_line_exit_2_before_the_run(project):
    (project / "reports").mkdir()
    for opt in ("--report", "--junit", "--markdown"):
        result = CliRunner().invoke(main, ["replay", "--agent", "cli_agent_mod:build", opt, "reports"])
        assert result.exit_code == 2, result.output
        assert "is a directory" in result.output and "'reports'" in result.output.replace("reports:", "'reports'")
        assert "Traceback" not in result.output
    assert not (project / "reports.tmp").exists()


@pytest.mark.skipif(not __import__("os").path.isdir("/proc/self"), reason="needs /proc")
@pytest.mark.parametrize("opt", ["--report", "--junit", "--markdown"])
def test_an_unwritable_output_fails_alone_with_exit_2(project, opt):
    others = [o for o in ("--report", "--junit", "--markdown") if o != opt]
    args = ["replay", "--agent", "cli_agent_mod:build", "--gate", "task_completion>=0", opt, "/proc/x"]
    for other, name in zip(others, ("a", "b")):
        args += [other, f"out/{name}"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert "error: /proc/x: cannot write" in result.output
    assert [ln for ln in result.output.splitlines() if ln.startswith("error:")] == [
        ln for ln in result.output.splitlines() if "/proc/x" in ln
    ]
    assert "1/2 passed" in result.output  # the summary and gates are still shown
    assert (project / "out/a").stat().st_size and (project / "out/b").stat().st_size  # the others were written


@pytest.mark.skipif(not __import__("os").path.isdir("/proc/self"), reason="needs /proc")
def test_merge_to_an_unwritable_output_is_exit_2(tmp_path):
    _report(tmp_path / "s1.json", a=True)
    for opt in ("-o", "--junit", "--markdown"):
        args = ["merge", str(tmp_path / "s1.json"), "-o", str(tmp_path / "all.json")]
        args += [opt, "/proc/x"]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        assert "error: /proc/x: cannot write" in result.output


def test_merge_with_a_missing_shard_fails_with_exit_2(tmp_path):
    Report(suite="s", shard="1/2", results=[CaseResult(id="a", passed=True)]).save(tmp_path / "s1.json")
    result = run("merge", str(tmp_path / "s1.json"), "-o", str(tmp_path / "all.json"))
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert (
        result.output.strip() == "error: missing shard 2/2 (got 1/2): a shard that did not finish must not "
        "pass the gate"
    )
    assert not (tmp_path / "all.json").exists()


def test_a_rate_gate_above_1_is_exit_2(project):
    result = run("replay", "--agent", "cli_agent_mod:build", "--gate", "task_completion>85")
    assert result.exit_code == 2 and "task_completion is a rate from 0 to 1 (85% is 0.85)" in result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "config_file, table, field",
    [
        ("harvester.toml", "", "gates"),
        ("pyproject.toml", "[tool.harvester]\n", "tool.harvester.gates"),
    ],
)
def test_a_bad_gate_from_the_config_names_the_file(project, config_file, table, field):
    (project / "harvester.toml").unlink()
    (project / config_file).write_text(f'{table}gates = ["task_completion>85"]\n')
    result = run("replay", "--agent", "cli_agent_mod:build")
    assert result.exit_code == 2
    assert f"{config_file}: {field}: gate 'task_completion>85'" in result.output, result.output
    merged = run("merge", "nothing.json", "-o", "all.json")
    assert merged.exit_code == 2 and config_file in merged.output
    (project / config_file).write_text(f'{table}gates = ["task_completion>=0.5"]\n')
    cli = run("replay", "--agent", "cli_agent_mod:build", "--gate", "task_complete>=1")
    assert cli.exit_code == 2 and cli.output.startswith("error: unknown metric")  # from --gate: no file named


def test_config_gates_apply_at_replay(project):
    (project / "harvester.toml").write_text('cases_dir = "cases"\ngates = ["task_completion>=0.5"]\n')
    assert run("replay", "--agent", "cli_agent_mod:build").exit_code == 0


def test_a_failing_case_no_gate_covers_is_warned_about(project):
    result = run("replay", "--agent", "cli_agent_mod:build", "--gate", "task_completion>=0.5")
    assert result.exit_code == 0
    assert "warning: 1/2 cases failed but no gate covers them (add --gate task_completion>=1)" in result.output
    assert "warning" not in run("replay", "--agent", "cli_agent_mod:build").output  # the default gate fails


def test_no_accepted_cases_is_one_line_exit_2(project):
    for path in (project / "cases").glob("*.json"):
        if path.name != "suite.json":
            data = orjson.loads(path.read_bytes())
            data["status"] = "pending"
            (project / "cases" / "pending").mkdir(exist_ok=True)
            (project / "cases" / "pending" / path.name).write_bytes(orjson.dumps(data))
            path.unlink()
    result = run("replay", "--agent", "cli_agent_mod:build")
    assert result.exit_code == 2
    assert result.output == "error: no accepted cases in cases/ (2 pending: run harvester review)\n"
    for path in (project / "cases" / "pending").glob("*.json"):
        path.unlink()
    empty = run("replay", "--agent", "cli_agent_mod:build")
    assert empty.exit_code == 2 and empty.output.startswith("error: no accepted cases in cases/ (harvest some")


FACTORIES = textwrap.dedent("""
    def needs_config(config):
        return lambda prompt: "x"

    def raises():
        raise RuntimeError("no API key")

    def raises_while_running():
        def agent(prompt):
            raise RuntimeError("model exploded")
        return agent
""")


@pytest.mark.parametrize(
    "attr, error",
    [
        ("needs_config", "TypeError: needs_config() missing 1 required positional"),
        ("raises", "RuntimeError: no API key"),
    ],
)
def test_a_broken_agent_factory_is_one_line_exit_2(project, attr, error):
    (project / "factories_mod.py").write_text(FACTORIES)
    sys.modules.pop("factories_mod", None)
    result = run("replay", "--agent", f"factories_mod:{attr}", "--report", "r.json")
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: the agent factory factories_mod:{attr} failed: {error}")
    assert len(result.output.strip().splitlines()) == 1
    running = run("replay", "--agent", "factories_mod:raises_while_running")
    assert running.exit_code == 1 and "agent error: RuntimeError: model exploded" in running.output  # a case failure


def test_config_ignore_args_apply_at_replay(project):
    (project / "rid_agent_mod.py").write_text(
        textwrap.dedent("""
        import itertools
        ids = itertools.count()

        def build(tools):
            return lambda prompt: str(tools.execute("kb_search", {"query": "refund policy",
                                                                  "request_id": f"r{next(ids)}"}))
    """)
    )
    sys.modules.pop("rid_agent_mod", None)
    for path in (project / "cases").glob("refund-*.json"):
        data = orjson.loads(path.read_bytes())
        args = {"query": "refund policy", "request_id": "recorded"}
        data["fixtures"][0].update(args=args, key=fixture_key("kb_search", args))
        path.write_bytes(orjson.dumps(data))
    before = run("replay", "--agent", "rid_agent_mod:build", "--report", "r.json")
    assert before.exit_code == 1 and "0/2 passed" in before.output
    assert "differs at request_id" in before.output
    (project / "harvester.toml").write_text('cases_dir = "cases"\n[ignore_args]\nkb_search = ["request_id"]\n')
    after = run("replay", "--agent", "rid_agent_mod:build", "--gate", "task_completion>=0.5")
    assert after.exit_code == 0 and "1/2 passed" in after.output, after.output
