"""harvester: turn production AI-agent traces into deterministic regression tests.

Public names are loaded lazily so ``from harvester import HarvestingSpanProcessor`` costs only the
production hook, never the CLI, the replay runner or the report code.
"""

from __future__ import annotations

from ._lazy import lazy

__version__ = "0.1.0"

_PUBLIC = {
    "HarvestingSpanProcessor": "intake",
    "TraceStore": "store",
    "runs_from_spans": "conventions",
    "Run": "model",
    "ToolCall": "model",
    "Stop": "model",
    "AgentCase": "case",
    "Case": "case",
    "Suite": "replay",
    "case_from_run": "harvest",
    "load_cases": "case",
    "save_case": "case",
    "FixtureTools": "fixtures",
    "replay": "replay",
    "Report": "report",
    "Redactor": "redact",
    "redaction_for": "redact",
    "load_config": "config",
    "tool": "instrument",
    "agent_run": "instrument",
    "checks": None,
}

__all__ = sorted(_PUBLIC)


__getattr__ = lazy(__name__, _PUBLIC, globals())


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
