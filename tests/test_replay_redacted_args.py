"""A tool argument capture redacted (an e-mail address becomes ``<email:...>`` in the fixture) still
replays: the agent sends the address again, and the executor matches it as capture's redaction writes
it (docs/redaction.md: "a redacted fixture still replays")."""

from __future__ import annotations

from pathlib import Path

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from harvester.intake import HarvestingSpanProcessor
from tests.apps import mailer_app
from tests.builders import project as user


def test_an_argument_capture_redacted_is_served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    project = user.enter_project(tmp_path, monkeypatch)
    provider = TracerProvider(resource=Resource({"service.name": "mailer"}))
    processor = HarvestingSpanProcessor(str(project / "traces.db"))  # redaction on, as by default
    provider.add_span_processor(processor)
    mailer_app.build(provider)(mailer_app.PROMPT)
    processor.shutdown()
    assert mailer_app.SENT == ["bob@example.com"]
    mailer_app.SENT.clear()
    case = user.harvest_and_accept(project)
    (fixture,) = case["fixtures"]
    assert fixture["args"]["to"].startswith("<email:"), fixture  # the address never reached the case

    code, report = user.replay("tests.apps.mailer_app:build", "baseline", monkeypatch, "r.json")
    (r,) = report.results
    assert code == 0 and r.passed and r.no_fixture == 0 and r.live_calls == 0, r.reasons()
    assert mailer_app.SENT == []
