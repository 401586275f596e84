"""The whole loop on a shop app (tests/apps): a project folder the CLI runs in, and one real request
through the app captured as production captures it, into the project's store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from harvester.cli import main
from harvester.intake import HarvestingSpanProcessor
from harvester.model import Run
from harvester.store import TraceStore
from tests.apps import shop

CONFIG = 'store = "traces.db"\ncases_dir = "cases"\nmutating_tools = ["issue_refund"]\n'


def cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def open_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``tmp_path`` as the working project: its config, no environment overrides, the baseline script."""
    (tmp_path / "harvester.toml").write_text(CONFIG)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARVESTER_CASES", raising=False)
    monkeypatch.delenv("HARVESTER_STORE", raising=False)
    monkeypatch.setenv(shop.VARIANT_ENV, "baseline")
    shop.LIVE.clear()
    return tmp_path


def capture_production(app: Any, store: Path) -> Run:
    """One real request through ``app.serve``, which runs the real tools; returns the stored run."""
    provider = TracerProvider(resource=Resource({"service.name": "support"}))
    processor = HarvestingSpanProcessor(str(store), redact=False)
    provider.add_span_processor(processor)
    app.serve(provider)
    processor.shutdown()
    assert shop.LIVE, "production ran the real tools"
    shop.LIVE.clear()
    with TraceStore(str(store)) as ts:
        (run,) = ts.runs()
    assert run.trajectory() and all(c.status == "ok" for c in run.calls), run.calls
    return run
