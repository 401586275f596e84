"""Whether a registered framework's package is installed here.

A framework whose package pins OpenTelemetry below the version the main test environment runs (Google
ADK) is in the ``test-pinned`` extra, which ``.ci/run`` installs in the venv of the other end of the
Python range; there ``HARVESTER_REQUIRE_FRAMEWORKS=1`` makes a missing one a failure, not a skip.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import pytest

from harvester.adapters import ADAPTERS

# every registered framework's conformance app (tests/apps/<name>_app.py), with its adapter
APPS = {f"{adapter.NAME.replace('-', '_')}_app": adapter for adapter in ADAPTERS}

__all__ = ["APPS", "require", "require_app"]


def require(adapter: Any) -> None:
    """Skip the test when ``adapter``'s framework is not installed (fail when it is required here)."""
    root = adapter.ROOTS[0]
    if importlib.util.find_spec(root.split(".")[0]) is not None and importlib.util.find_spec(root) is not None:
        return
    reason = f"{adapter.NAME} is not installed (the test-pinned extra has it)"
    if os.environ.get("HARVESTER_REQUIRE_FRAMEWORKS") == "1":
        pytest.fail(f"{reason}; HARVESTER_REQUIRE_FRAMEWORKS=1 requires it")
    pytest.skip(reason, allow_module_level=True)  # a test module of the framework's own skips whole


def require_app(app_name: str) -> None:
    """``require`` for the framework of a conformance app (an app of no framework's needs nothing)."""
    if app_name in APPS:
        require(APPS[app_name])
