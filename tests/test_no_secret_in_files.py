"""No secret reaches a file harvester writes: secrets planted in a run's prompt, answer and tool payloads
go through each write path (the processor, deferred and eager; ingest; incident --file; harvest; traces
export; a replay's report), and every file written is grepped for them."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from harvester.cli import main as cli
from harvester.spans import to_otlp
from tests.builders.capture import agent_run, setup
from tests.builders.files import readable
from tests.builders.store import agent_trace

SECRETS = (
    "sk-proj-4f9aQ2mZ8kL1pX7vB3nR6tY0wE5uI2oA9sD",
    "AKIAIOSFODNN7EXAMPLE",
    "alice.smith@example.com",
    "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
)
PROMPT = f"Refund order A1001, my key is {SECRETS[0]}"


def files_under(root: Path) -> dict[Path, bytes]:
    return {p: readable(p) for p in root.rglob("*") if p.is_file()}  # the store's rows inflated


def assert_clean(root: Path) -> None:
    found = [(p.name, s) for p, data in files_under(root).items() for s in SECRETS if s.encode() in data]
    assert found == [], found


def _otlp_file(tmp_path: Path) -> Path:
    spans = agent_trace("a" * 32, secret=f"{SECRETS[0]} {SECRETS[2]}", tool_result=f"token {SECRETS[1]} {SECRETS[3]}")
    path = tmp_path / "trace.json"
    path.write_bytes(orjson.dumps(to_otlp(spans)))
    return path


@pytest.mark.parametrize("defer", [True, False])
def test_the_processor_writes_no_secret(tmp_path, defer):
    (tmp_path / "out").mkdir()
    proc, tracer, _ = setup(tmp_path / "out", defer_normalize=defer)
    agent_run(
        tracer,
        prompt=PROMPT,
        args=orjson.dumps({"query": SECRETS[2]}).decode(),
        result=f"here: {SECRETS[1]}",
        answer=f"done, {SECRETS[3]}",
    )
    proc.shutdown()
    assert (tmp_path / "out" / "t.db").stat().st_size > 0
    assert_clean(tmp_path / "out")


def test_ingest_incident_file_harvest_export_and_reports_write_no_secret(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HARVESTER_STORE", str(tmp_path / "out" / "traces.db"))
    (tmp_path / "out").mkdir()
    source = _otlp_file(tmp_path)
    run = CliRunner().invoke
    cases = ["--cases", "out/cases"]
    # incident straight from the file: the case is made from the redacted run
    res = run(cli, ["incident", "a" * 32, "--why", "leaked", "--file", str(source), *cases])
    assert res.exit_code == 0, res.output
    assert all(s not in res.output for s in SECRETS)
    # ingest, harvest from the store, export the store
    assert run(cli, ["ingest", str(source)]).exit_code == 0
    assert run(cli, ["harvest", *cases]).exit_code == 0
    assert run(cli, ["traces", "export", "a" * 32, "-o", "out/export.json"]).exit_code == 0
    assert run(cli, ["traces", "export", "--lines", "-o", "out/export.jsonl"]).exit_code == 0
    written = files_under(tmp_path / "out")
    assert any(p.suffix == ".json" and "pending" in p.parts for p in written)  # the case files were written
    assert_clean(tmp_path / "out")


def test_a_replays_report_holds_no_secret_the_agent_echoed(tmp_path, monkeypatch):
    from harvester.case import CaseFolder
    from tests.builders.agents import case

    monkeypatch.chdir(tmp_path)
    CaseFolder(tmp_path / "cases").save(case("c1"))
    (tmp_path / "out").mkdir()
    args = [
        "replay",
        "--agent",
        "tests.builders.agents:leaky",
        "--cases",
        "cases",
        "--report",
        "out/r.json",
        "--junit",
        "out/r.xml",
        "--markdown",
        "out/r.md",
    ]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 1, res.output  # the leaky answer lacks "30 days": a failing case, details quoted
    assert_clean(tmp_path / "out")
    assert all(s not in res.output for s in SECRETS)
    assert "<api_key:" in (tmp_path / "out" / "r.json").read_text()
