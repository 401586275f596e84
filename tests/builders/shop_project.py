"""A project folder for the shop apps' whole loop (tests/apps): capture, incident, accept, replay, all
through the CLI, in a fresh folder with its own config and no live tool run counted yet."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from harvester.cli import main
from tests.apps import shop

CONFIG = 'store = "traces.db"\ncases_dir = "cases"\nmutating_tools = ["issue_refund"]\n'


def cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def shop_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: str = CONFIG) -> Path:
    """``tmp_path`` made the current project: ``config`` as its harvester.toml, the shop at its baseline."""
    (tmp_path / "harvester.toml").write_text(config)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARVESTER_CASES", raising=False)
    monkeypatch.delenv("HARVESTER_STORE", raising=False)
    monkeypatch.setenv(shop.VARIANT_ENV, "baseline")
    shop.LIVE.clear()
    return tmp_path
