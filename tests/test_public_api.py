"""The public names docs/api.md teaches resolve, and the production hook stays light."""

import subprocess
import sys

import harvester

PUBLIC = {
    "HarvestingSpanProcessor",
    "TraceStore",
    "runs_from_spans",
    "Run",
    "ToolCall",
    "Stop",
    "AgentCase",
    "Suite",
    "Case",
    "case_from_run",
    "load_cases",
    "save_case",
    "FixtureTools",
    "replay",
    "Report",
    "tool",
    "agent_run",
    "checks",
    "Redactor",
    "redaction_for",
    "load_config",
}


def test_every_public_name_resolves():
    assert set(harvester.__all__) == PUBLIC
    for name in PUBLIC:
        assert getattr(harvester, name) is not None


def test_importing_the_hook_loads_no_cli_case_or_replay_code():
    code = (
        "import sys; from harvester import HarvestingSpanProcessor; "
        "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in ('click', 'harvester'))))"
    )
    loaded = set(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    )
    assert "harvester.intake._processor" in loaded
    heavy = {
        "click",
        "harvester.cli",
        "harvester.case",
        "harvester.harvest",
        "harvester.fixtures",
        "harvester.replay",
        "harvester.report",
        "harvester.store._copy",  # the hook never copies or exports a store
        "harvester.store._export",
    }
    assert not loaded & heavy, loaded & heavy
