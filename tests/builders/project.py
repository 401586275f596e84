"""A project folder for the whole-loop tests (capture, harvest, accept, replay through the CLI): its
config, a clean environment, the CLI, and a replay of an app under one of the shop's variants."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from harvester.cli import main
from harvester.report import Report
from tests.apps import shop

CONFIG = 'store = "traces.db"\ncases_dir = "cases"\nmutating_tools = ["issue_refund"]\n'


def cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def open_project(path: Path, monkeypatch: pytest.MonkeyPatch, config: str = CONFIG) -> Path:
    """``path`` as the current project: ``config`` as its harvester.toml, the shop at its baseline."""
    (path / "harvester.toml").write_text(config)
    monkeypatch.chdir(path)
    monkeypatch.delenv("HARVESTER_CASES", raising=False)
    monkeypatch.delenv("HARVESTER_STORE", raising=False)
    monkeypatch.setenv(shop.VARIANT_ENV, "baseline")
    shop.LIVE.clear()
    return path


def replay(target: str, variant: str, monkeypatch: pytest.MonkeyPatch, json_out: str) -> tuple[int, Report]:
    """``harvester replay --agent target`` with the shop's model scripted as ``variant``."""
    monkeypatch.setenv(shop.VARIANT_ENV, variant)
    out = cli("replay", "--agent", target, "--report", json_out)
    return out.exit_code, Report.load(json_out)


def harvest_and_accept(project: Path) -> dict[str, Any]:
    """``harvester harvest`` of the one stored run, then ``accept`` of its case as harvest wrote it (no
    review note may stop it); returns the case file's JSON."""
    assert cli("harvest").exit_code == 0
    (case_file,) = (project / "cases" / "pending").glob("*.json")
    case = orjson.loads(case_file.read_bytes())
    accepted = cli("accept", case["id"])
    assert accepted.exit_code == 0, accepted.output
    return case
