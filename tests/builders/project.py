"""A user's project for the whole-loop tests (capture, incident or harvest, accept, replay): a config
naming ``issue_refund`` mutating, the CLI run in it, and one production request of an app from
``tests/apps`` captured as production captures it."""

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


def enter_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variant: str) -> Path:
    """``tmp_path`` as the current project, its apps scripted as ``variant``, their live counts at 0."""
    (tmp_path / "harvester.toml").write_text(CONFIG)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("HARVESTER_CASES", raising=False)
    monkeypatch.delenv("HARVESTER_STORE", raising=False)
    monkeypatch.setenv(shop.VARIANT_ENV, variant)
    shop.LIVE.clear()
    return tmp_path


def capture_production(app: Any, store: Path) -> Run:
    """One real request through ``app.serve``, captured into ``store``; the run stored (the only one)."""
    provider = TracerProvider(resource=Resource({"service.name": "support"}))
    processor = HarvestingSpanProcessor(str(store), redact=False)
    provider.add_span_processor(processor)
    app.serve(provider)
    processor.shutdown()
    with TraceStore(str(store)) as ts:
        (run,) = ts.runs()
    return run
