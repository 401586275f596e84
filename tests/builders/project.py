"""A user's project for the whole-loop tests (capture, incident or harvest, accept, replay through the
CLI): a config naming ``issue_refund`` mutating, a clean environment, the CLI run in it, one production
request of an app from ``tests/apps`` captured as production captures it, and a replay of an app under
one of the shop's variants."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from harvester.cli import main
from harvester.intake import HarvestingSpanProcessor
from harvester.model import Run
from harvester.report import Report
from harvester.store import TraceStore
from tests.apps import shop

CONFIG = 'store = "traces.db"\ncases_dir = "cases"\nmutating_tools = ["issue_refund"]\n'


def cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def enter_project(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variant: str = "baseline", config: str = CONFIG
) -> Path:
    """``tmp_path`` as the current project (``config`` its harvester.toml), its apps scripted as
    ``variant``, their live counts at 0."""
    (tmp_path / "harvester.toml").write_text(config)
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


def replay(
    target: str, variant: str, monkeypatch: pytest.MonkeyPatch, json_out: str, *options: str
) -> tuple[int, Report]:
    """``harvester replay --agent target [options]`` with the shop's model scripted as ``variant``."""
    monkeypatch.setenv(shop.VARIANT_ENV, variant)
    out = cli("replay", "--agent", target, "--report", json_out, *options)
    return out.exit_code, Report.load(json_out)


def accept_incident(trace_id: str, why: str) -> str:
    """``harvester incident`` of a production run, then ``accept`` of the case it wrote; returns its id."""
    out = cli("incident", trace_id, "--why", why, "--json")
    assert out.exit_code == 0, out.output
    case_id = orjson.loads(out.output)["id"]
    assert cli("accept", case_id).exit_code == 0
    return case_id


def harvest_and_accept(project: Path) -> dict[str, Any]:
    """``harvester harvest`` of the one stored run, then ``accept`` of its case as harvest wrote it (no
    review note may stop it); returns the case file's JSON."""
    assert cli("harvest").exit_code == 0
    (case_file,) = (project / "cases" / "pending").glob("*.json")
    case = orjson.loads(case_file.read_bytes())
    accepted = cli("accept", case["id"])
    assert accepted.exit_code == 0, accepted.output
    return case
