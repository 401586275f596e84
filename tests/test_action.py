"""The GitHub Action (action.yml) is valid, safe and does what docs/ci.md says.

It is checked against the GitHub Actions metadata schema that check-jsonschema ships (offline: a proxy that
refuses every connection is set, so a download would fail the test), read as YAML for the rules the schema
cannot express (no input pasted into a script, the replay's exit code re-raised last, the comment opt-in),
and its shell steps are run here with bash as the runner runs them: the inputs in ``env:``, a stub
``harvester`` to see the exact argv, and the real one on the repository's cases.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
ACTION = ROOT / "action.yml"
COMMENT_JS = ROOT / "action" / "comment.js"
MARKER = "<!-- harvester-replay -->"
EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
# What the runner starts for `shell: bash` (docs: "Using a specific shell").
BASH = ["bash", "--noprofile", "--norc", "-eo", "pipefail"]


def _action() -> dict[str, Any]:
    return yaml.safe_load(ACTION.read_text())


def _steps() -> list[dict[str, Any]]:
    return _action()["runs"]["steps"]


def _step(step_id: str) -> dict[str, Any]:
    return next(s for s in _steps() if s.get("id") == step_id)


def _check_jsonschema(path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"}
    env.pop("NO_PROXY", None)
    env.pop("no_proxy", None)
    return subprocess.run(
        [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-actions", str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


# -- the schema --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_action_matches_the_github_actions_schema_offline():
    done = _check_jsonschema(ACTION)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok" in done.stdout


@pytest.mark.parametrize(
    "breakage",
    [
        pytest.param(lambda a: a["runs"].pop("using"), id="no-runs-using"),
        pytest.param(lambda a: a["runs"].__setitem__("using", "node8"), id="unknown-runtime"),
        pytest.param(lambda a: a.pop("description"), id="no-description"),
        pytest.param(lambda a: a["inputs"]["agent"].__setitem__("required", "yes"), id="required-not-boolean"),
    ],
)
def test_a_broken_action_fails_the_schema(tmp_path, breakage):
    """The validation is real: the same check rejects a copy with one thing broken."""
    action = _action()
    breakage(action)
    broken = tmp_path / "action.yml"
    broken.write_text(yaml.safe_dump(action, sort_keys=False))
    done = _check_jsonschema(broken)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Schema validation errors" in done.stdout + done.stderr


# -- the rules the schema cannot express ------------------------------------------------------------------


def test_it_is_a_composite_action_and_every_run_step_names_its_shell():
    action = _action()
    assert action["runs"]["using"] == "composite"
    runs = [s for s in _steps() if "run" in s]
    assert len(runs) >= 4
    for step in runs:
        assert step.get("shell") == "bash", step.get("name")


def test_no_input_is_pasted_into_a_script():
    """Script injection: an expression inside `run:` (or github-script's `script:`) is substituted into the
    code before the shell sees it, so inputs reach scripts only through `env:`."""
    for step in _steps():
        for body in (step.get("run"), (step.get("with") or {}).get("script")):
            if body is not None:
                assert not EXPR.search(body), f"{step['name']}: {EXPR.search(body).group(0)} in the script"
    assert "script injection" in ACTION.read_text()


def test_every_input_used_is_declared_and_every_declared_input_is_used():
    action = _action()
    declared = set(action["inputs"])
    text = yaml.safe_dump(action["runs"]) + yaml.safe_dump(action["outputs"])
    used = set(re.findall(r"inputs\.([A-Za-z0-9_-]+)", text))
    assert used <= declared, used - declared
    assert declared <= used, declared - used
    assert action["inputs"]["agent"]["required"] is True
    assert action["inputs"]["python-version"]["default"] == "3.11"
    assert action["inputs"]["report-dir"]["default"] == "reports"
    assert action["inputs"]["pr-comment"]["default"] == "false"


def test_the_outputs_come_from_the_replay_step():
    outputs = _action()["outputs"]
    for name in ("exit-code", "report", "html"):
        assert outputs[name]["value"] == f"${{{{ steps.replay.outputs.{name} }}}}"
    assert 'echo "exit-code=$code" >> "$GITHUB_OUTPUT"' in _step("replay")["run"]


def test_the_replay_runs_with_every_report_and_setup_python_is_used():
    steps = _steps()
    assert any(s.get("uses") == "actions/setup-python@v5" for s in steps)
    replay = _step("replay")["run"]
    for option in ("--agent", "--report", "--junit", "--markdown", "--html", "--gate", "--baseline"):
        assert option in replay
    upload = next(s for s in steps if s.get("uses") == "actions/upload-artifact@v4")
    assert "always()" in upload["if"]
    assert upload["with"]["name"] == "${{ inputs.artifact-name }}"
    assert "steps.replay.outputs.html" in upload["with"]["path"]
    assert "steps.replay.outputs.report" in upload["with"]["path"]


def test_the_exit_code_is_re_raised_last_after_summary_upload_and_comment():
    steps = _steps()
    last = steps[-1]
    assert last["if"] == "always()"
    assert last["env"]["CODE"] == "${{ steps.replay.outputs.exit-code }}"
    assert 'exit "$CODE"' in last["run"]
    names = [s.get("id") or s.get("uses") or s["name"] for s in steps]
    replay_at = names.index("replay")
    for later in ("Job summary", "actions/upload-artifact@v4", "actions/github-script@v7"):
        at = next(i for i, s in enumerate(steps) if later in (s.get("name"), s.get("uses")))
        assert replay_at < at < len(steps) - 1
        assert "always()" in steps[at]["if"], later


def test_the_pr_comment_is_opt_in_and_upserts_one_marked_comment():
    step = next(s for s in _steps() if s.get("uses") == "actions/github-script@v7")
    assert "inputs.pr-comment == 'true'" in step["if"]
    assert "github.event.pull_request" in step["if"]
    assert step["with"]["github-token"] == "${{ inputs.github-token }}"
    assert _action()["inputs"]["github-token"]["default"] == "${{ github.token }}"
    assert step["env"]["ACTION_PATH"] == "${{ github.action_path }}"
    assert "/action/comment.js" in step["with"]["script"]
    script = COMMENT_JS.read_text()
    assert MARKER in script
    assert "updateComment" in script and "createComment" in script


# -- the steps, run ---------------------------------------------------------------------------------------


def _expand(value: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    """The runner's substitution, for the expressions action.yml puts in `env:`."""

    def one(match: re.Match[str]) -> str:
        expr = match.group(1)
        if expr.startswith("inputs."):
            return inputs[expr.removeprefix("inputs.")]
        if expr.startswith("steps.replay.outputs."):
            return outputs.get(expr.removeprefix("steps.replay.outputs."), "")
        if expr.startswith("steps.upload.outputs."):
            return ""
        if expr == "github.action_path":
            return str(ROOT)
        raise AssertionError(f"unexpected expression {expr!r} in env")

    return EXPR.sub(one, value)


def _run_step(
    step: dict[str, Any],
    tmp_path: Path,
    given: dict[str, str],
    outputs: dict[str, str] | None = None,
    path: str | None = None,
) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    inputs = {name: str(spec.get("default", "")) for name, spec in _action()["inputs"].items()}
    inputs.update(given)
    out_file, summary = tmp_path / "github_output", tmp_path / "step_summary"
    out_file.write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    env.update({k: _expand(str(v), inputs, outputs or {}) for k, v in (step.get("env") or {}).items()})
    env.update({"GITHUB_OUTPUT": str(out_file), "GITHUB_STEP_SUMMARY": str(summary)})
    if path:
        env["PATH"] = path + os.pathsep + env["PATH"]
    cwd = tmp_path / _expand(step.get("working-directory", "."), inputs, {})
    script = tmp_path / "step.sh"
    script.write_text(step["run"])
    done = subprocess.run([*BASH, str(script)], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    written = dict(line.split("=", 1) for line in out_file.read_text().splitlines() if "=" in line)
    return done, written


STUB = """#!{python}
import json, os, sys
args = sys.argv[1:]
with open(os.environ["STUB_ARGV"], "w") as f:
    json.dump(args, f)
with open(args[args.index("--markdown") + 1], "w") as f:
    f.write("## stub summary\\n")
sys.exit(int(os.environ["STUB_CODE"]))
"""


@pytest.fixture
def stub(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    exe = bin_dir / "harvester"
    exe.write_text(STUB.format(python=sys.executable))
    exe.chmod(0o755)
    return bin_dir


RECORDER = """#!{python}
import json, os, sys
with open(os.environ["RECORD"], "a") as f:
    f.write(json.dumps([os.path.basename(sys.argv[0]), *sys.argv[1:]]) + "\\n")
"""


@pytest.mark.parametrize(
    ("given", "installs"),
    [
        pytest.param({}, [[str(ROOT)]], id="the-action-itself"),
        pytest.param({"install": "harvester==0.1.0"}, [["harvester==0.1.0"]], id="a-requirement"),
        pytest.param(
            {"install": "none", "extra-install": "-e .  -r requirements.txt\n*.whl $(touch pwned)"},
            [["-e", ".", "-r", "requirements.txt", "*.whl", "$(touch", "pwned)"]],
            id="none-and-extra-split-never-globbed",
        ),
    ],
)
def test_the_install_step(tmp_path, monkeypatch, given, installs):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("python", "harvester"):
        (bin_dir / name).write_text(RECORDER.format(python=sys.executable))
        (bin_dir / name).chmod(0o755)
    (tmp_path / "x.whl").write_text("")
    monkeypatch.setenv("RECORD", str(tmp_path / "calls"))
    step = next(s for s in _steps() if s.get("name") == "Install harvester and the agent")
    done, _ = _run_step(step, tmp_path, given, path=str(bin_dir))
    assert done.returncode == 0, done.stderr
    calls = [json.loads(line) for line in (tmp_path / "calls").read_text().splitlines()]
    assert calls == [["python", "-m", "pip", "install", *spec] for spec in installs] + [["harvester", "--version"]]
    assert not list(tmp_path.rglob("pwned"))


@pytest.mark.parametrize("code", [0, 1, 2, 3])
def test_the_replay_step_passes_inputs_verbatim_and_captures_the_exit_code(tmp_path, stub, monkeypatch, code):
    monkeypatch.setenv("STUB_ARGV", str(tmp_path / "argv.json"))
    monkeypatch.setenv("STUB_CODE", str(code))
    (tmp_path / "proj").mkdir()
    hostile = 'x:y"; touch "$HOME/pwned"; echo "'
    given = {
        "agent": hostile,
        "working-directory": "proj",
        "cases": "my cases",
        "baseline": "reports/main.json",
        "gates": "task_completion>=0.85\n\n  # a comment\n  tag:security>=1.0  \n$(touch pwned)>=1\n",
        "trials": "3",
        "model": "recorded",
        "inject": "true",
        "sandbox": "true",
        "args": "--inconclusive=fail\n--confirm=2\n",
    }
    done, written = _run_step(_step("replay"), tmp_path, given, path=str(stub))
    assert done.returncode == 0, done.stderr
    assert written["exit-code"] == str(code)
    reports = tmp_path / "proj" / "reports"
    assert written["report"] == str(reports / "replay.json")
    assert written["html"] == str(reports / "replay.html")
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv == [
        "replay",
        "--agent",
        hostile,
        "--report",
        str(reports / "replay.json"),
        "--junit",
        str(reports / "replay.xml"),
        "--markdown",
        str(reports / "replay.md"),
        "--html",
        str(reports / "replay.html"),
        "--cases",
        "my cases",
        "--baseline",
        "reports/main.json",
        "--trials",
        "3",
        "--model",
        "recorded",
        "--inject",
        "--sandbox",
        "--gate",
        "task_completion>=0.85",
        "--gate",
        "tag:security>=1.0",
        "--gate",
        "$(touch pwned)>=1",
        "--inconclusive=fail",
        "--confirm=2",
    ]
    assert not list(tmp_path.rglob("pwned"))


def test_the_replay_step_leaves_optional_options_out(tmp_path, stub, monkeypatch):
    monkeypatch.setenv("STUB_ARGV", str(tmp_path / "argv.json"))
    monkeypatch.setenv("STUB_CODE", "0")
    done, _ = _run_step(_step("replay"), tmp_path, {"agent": "a:b"}, path=str(stub))
    assert done.returncode == 0, done.stderr
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv[:3] == ["replay", "--agent", "a:b"]
    for option in ("--cases", "--baseline", "--trials", "--model", "--inject", "--sandbox", "--gate"):
        assert option not in argv


def test_the_shadow_command_runs_harvester_shadow_with_its_reports(tmp_path, stub, monkeypatch):
    monkeypatch.setenv("STUB_ARGV", str(tmp_path / "argv.json"))
    monkeypatch.setenv("STUB_CODE", "1")
    given = {"command": "shadow", "agent": "a:b", "since": "24h", "gates": "new_mutating<=0", "model": "recorded"}
    done, written = _run_step(_step("replay"), tmp_path, given, path=str(stub))
    assert done.returncode == 0, done.stderr
    reports = tmp_path / "reports"
    assert written == {
        "report": str(reports / "shadow.json"),
        "html": str(reports / "shadow.html"),
        "markdown": str(reports / "shadow.md"),
        "exit-code": "1",
    }
    argv = json.loads((tmp_path / "argv.json").read_text())
    assert argv == [
        "shadow", "--agent", "a:b", "--report", str(reports / "shadow.json"), "--markdown",
        str(reports / "shadow.md"), "--html", str(reports / "shadow.html"), "--since", "24h",
        "--model", "recorded", "--gate", "new_mutating<=0",
    ]  # fmt: skip


@pytest.mark.parametrize(
    "given",
    [
        {"command": "shadow", "agent": "a:b", "baseline": "main.json"},
        {"command": "shadow", "agent": "a:b", "inject": "true"},
        {"command": "replay", "agent": "a:b", "since": "24h"},
        {"command": "rm -rf", "agent": "a:b"},
    ],
)
def test_an_input_of_the_other_command_is_bad_input(tmp_path, stub, monkeypatch, given):
    monkeypatch.setenv("STUB_ARGV", str(tmp_path / "argv.json"))
    monkeypatch.setenv("STUB_CODE", "0")
    done, written = _run_step(_step("replay"), tmp_path, given, path=str(stub))
    assert done.returncode == 0, done.stderr
    assert written["exit-code"] == "2" and "::error" in done.stdout
    assert not (tmp_path / "argv.json").exists()  # harvester never ran


def test_the_shadow_steps_with_the_real_harvester_on_a_store(tmp_path):
    from tests.builders import shadow as traffic

    (tmp_path / "harvester.toml").write_text('store = "traces.db"\nmutating_tools = ["issue_refund"]\n')
    traffic.capture(tmp_path / "traces.db", traffic.serve_demo, traffic.demo_traffic(12))
    given = {"command": "shadow", "agent": "harvester.demo.agent:build_widened", "gates": "new_mutating<=0"}
    here = str(Path(sys.executable).parent)
    done, written = _run_step(_step("replay"), tmp_path, given, path=here)
    assert done.returncode == 0, done.stderr
    assert written["exit-code"] == "1", done.stdout + done.stderr
    assert json.loads(Path(written["report"]).read_text())["total"]["counts"]["new_mutating"] == 2
    assert "**FAIL**" in Path(written["markdown"]).read_text()
    assert "<html" in Path(written["html"]).read_text().lower()
    done, _ = _run_step(_steps()[-1], tmp_path, {}, outputs=written)
    assert done.returncode == 1


def test_the_summary_step_appends_the_markdown_or_says_why_not(tmp_path):
    step = next(s for s in _steps() if s.get("name") == "Job summary")
    md = tmp_path / "replay.md"
    md.write_text("## harvester replay: suite\n")
    done, _ = _run_step(step, tmp_path, {}, outputs={"markdown": str(md), "exit-code": "1"})
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "step_summary").read_text() == "## harvester replay: suite\n"
    (tmp_path / "step_summary").unlink()
    done, _ = _run_step(step, tmp_path, {}, outputs={"markdown": str(tmp_path / "none.md"), "exit-code": "2"})
    assert done.returncode == 0, done.stderr
    assert "exited 2 without a summary" in (tmp_path / "step_summary").read_text()


@pytest.mark.parametrize(("code", "expected"), [("0", 0), ("1", 1), ("2", 2), ("3", 3), ("", 2)])
def test_the_last_step_exits_with_the_replays_code(tmp_path, code, expected):
    done, _ = _run_step(_steps()[-1], tmp_path, {}, outputs={"exit-code": code})
    assert done.returncode == expected, done.stdout + done.stderr
    if expected:
        assert "::error" in done.stdout or "::warning" in done.stdout


def _replay_has_html() -> bool:
    from harvester.cli import main

    replay = main.get_command(click.Context(main), "replay")
    return any("--html" in param.opts for param in replay.params)


_HTML = _replay_has_html()


@pytest.mark.skipif(not _HTML, reason="`harvester replay --html` is not there yet")
@pytest.mark.parametrize(("agent", "code"), [("build", "0"), ("build_widened", "1")])
def test_the_steps_with_the_real_harvester_on_the_repositorys_cases(tmp_path, agent, code):
    shutil.copytree(ROOT / "cases", tmp_path / "cases")
    given = {"agent": f"harvester.demo.agent:{agent}", "gates": "tag:security>=1.0"}
    here = str(Path(sys.executable).parent)  # this interpreter's `harvester`, as in a venv not activated
    done, written = _run_step(_step("replay"), tmp_path, given, path=here)
    assert done.returncode == 0, done.stderr
    assert written["exit-code"] == code, done.stdout + done.stderr
    for name in ("report", "html", "junit", "markdown"):
        assert Path(written[name]).is_file(), name
    assert json.loads(Path(written["report"]).read_text())
    assert "<html" in Path(written["html"]).read_text().lower()
    done, _ = _run_step(_steps()[-1], tmp_path, {}, outputs=written)
    assert done.returncode == int(code)


def test_the_steps_fail_a_red_run_against_a_red_baseline(tmp_path):
    """The action gates through `harvester replay`, so the floor on task_completion applies there too: a
    baseline in which every case failed never makes a run in which every case fails pass."""
    from harvester.report import CaseResult, Report

    shutil.copytree(ROOT / "cases", tmp_path / "cases")
    (tmp_path / "mute_agent.py").write_text("def build():\n    return lambda prompt: 'no'\n")
    ids = sorted(p.stem for p in (tmp_path / "cases").glob("*.json") if p.name != "suite.json")
    Report(suite="support-demo", results=[CaseResult(id=i, passed=False) for i in ids]).save(tmp_path / "red.json")
    here = str(Path(sys.executable).parent)
    done, written = _run_step(
        _step("replay"), tmp_path, {"agent": "mute_agent:build", "baseline": "red.json"}, path=here
    )
    assert done.returncode == 0, done.stderr
    assert written["exit-code"] == "1", done.stdout + done.stderr
    verdict = f"release gate: FAIL (1 gate failed; {len(ids)} cases failed in the baseline too)"
    assert f"**{verdict}**" in Path(written["markdown"]).read_text()
    assert json.loads(Path(written["report"]).read_text())["release_gate"]["verdict"] == verdict


# -- the pull-request comment's script, run in node with github-script's globals mocked ------------------

_NODE = shutil.which("node")
_HARNESS = """
const script = require("fs").readFileSync(process.argv[2], "utf8");
const comments = JSON.parse(process.argv[3]);
const login = process.argv[4];
const calls = [];
const rest = {
  issues: {
    listComments: "listComments",
    updateComment: async (a) => calls.push(["update", a]),
    createComment: async (a) => calls.push(["create", a]),
  },
  users: {
    getAuthenticated: async () => {
      if (!login) throw Object.assign(new Error("Resource not accessible by integration"), { status: 403 });
      return { data: { login } };
    },
  },
};
const github = { rest, paginate: async (fn, args) => { calls.push(["list", args]); return comments; } };
const context = { serverUrl: "https://github.com", repo: { owner: "o", repo: "r" }, runId: 7,
                  issue: { number: 42 } };
const AsyncFunction = Object.getPrototypeOf(async function () {}).constructor;
new AsyncFunction("require", "github", "context", script)(require, github, context)
  .then(() => console.log(JSON.stringify(calls)));
"""
BOT = {"login": "github-actions[bot]", "type": "Bot"}
MALLORY = {"login": "mallory", "type": "User"}


def _comment_calls(tmp_path: Path, existing: list[dict[str, Any]], login: str = "") -> list[Any]:
    """Run the action's comment step as github-script would, ``login`` being who the token is ("": the
    workflow's GITHUB_TOKEN, which cannot ask), against a pull request holding ``existing``."""
    step = next(s for s in _steps() if s.get("uses") == "actions/github-script@v7")
    (tmp_path / "script.js").write_text(step["with"]["script"])
    (tmp_path / "harness.js").write_text(_HARNESS)
    md = tmp_path / "replay.md"
    md.write_text("## harvester replay: suite\n**2/3 passed**\n")
    env = {**os.environ, "MARKDOWN": str(md), "CODE": "1", "ARTIFACT_URL": "https://example.test/a/9"}
    env["ACTION_PATH"] = str(ROOT)  # github.action_path: this checkout
    done = subprocess.run(
        [str(_NODE), str(tmp_path / "harness.js"), str(tmp_path / "script.js"), json.dumps(existing), login],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    calls = json.loads(done.stdout)
    assert calls[0] == ["list", {"owner": "o", "repo": "r", "issue_number": 42, "per_page": 100}]
    assert len(calls) == 2
    kind, args = calls[1]
    assert args["body"].startswith(MARKER + "\n## harvester replay: suite")
    assert "https://example.test/a/9" in args["body"]
    assert "https://github.com/o/r/actions/runs/7" in args["body"]
    return calls[1]


@pytest.mark.skipif(_NODE is None, reason="no node on this machine")
@pytest.mark.parametrize(
    ("existing", "login", "expected"),
    [
        pytest.param([], "", ["create"], id="creates"),
        pytest.param(
            [{"id": 1, "body": "LGTM", "user": BOT}, {"id": 5, "body": f"{MARKER}\nold", "user": BOT}],
            "",
            ["update", 5],
            id="updates-its-own",
        ),
        pytest.param(
            [{"id": 3, "body": f"{MARKER}\nfake", "user": MALLORY}, {"id": 5, "body": f"{MARKER}\nold", "user": BOT}],
            "",
            ["update", 5],
            id="skips-another-users-marker",
        ),
        pytest.param(
            [{"id": 3, "body": f"{MARKER}\nfake", "user": MALLORY}, {"id": 4, "body": f"x {MARKER}", "user": BOT}],
            "",
            ["create"],
            id="only-another-users-marker-creates",
        ),
        pytest.param(
            [
                {"id": 5, "body": f"{MARKER}\nold", "user": BOT},
                {"id": 8, "body": f"{MARKER}\nold", "user": {"login": "Ci-User"}},
            ],
            "ci-user",
            ["update", 8],
            id="a-personal-tokens-user",
        ),
        pytest.param(
            [{"id": 3, "body": f"{MARKER}\nfake", "user": MALLORY}],
            "ci-user",
            ["create"],
            id="a-personal-token-never-edits-another",
        ),
    ],
)
def test_the_comment_script_updates_only_its_own_comment(tmp_path, existing, login, expected):
    """Anyone who can comment can post the marker first: that comment is never edited, a new one is made."""
    kind, args = _comment_calls(tmp_path, existing, login)
    if expected[0] == "update":
        assert kind == "update" and args["comment_id"] == expected[1]
    else:
        assert kind == "create" and args["issue_number"] == 42


@pytest.mark.skipif(_NODE is None, reason="no node on this machine")
def test_the_comment_predicate_never_picks_another_users_marked_comment():
    """``ownComment``, the predicate itself: by the identity's login (any case), starting with the marker;
    a comment without an author (a deleted user, ``user: null``) is nobody's."""
    comments = [
        {"id": 1, "body": MARKER, "user": None},
        {"id": 2, "body": MARKER, "user": MALLORY},
        {"id": 3, "body": f"quoted: {MARKER}", "user": BOT},
        {"id": 4, "body": f"{MARKER}\nmine", "user": {"login": "GitHub-Actions[bot]"}},
    ]
    probe = (
        "const m = require(process.argv[1]); const cs = JSON.parse(process.argv[2]);"
        "console.log(JSON.stringify(['github-actions[bot]', 'mallory', 'nobody'].map("
        "(who) => (m.ownComment(cs, who) || {}).id ?? null)));"
    )
    done = subprocess.run(
        [str(_NODE), "-e", probe, str(COMMENT_JS), json.dumps(comments)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [4, 2, None]
