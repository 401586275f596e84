"""Reading a CLI result the way the project promises bad input reads: one line, exit 2; and running the
``harvester`` program itself, in a process of its own (sealed until it exits, as users run it)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent  # the checkout: its ``tests`` package importable there


def program(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m harvester ARGS`` in ``cwd``, with this checkout on ``PYTHONPATH`` (the agent targets
    are ``tests.apps...``) and ``env`` added to the environment; its output captured as text."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-m", "harvester", *args],
        cwd=cwd,
        env={**os.environ, **(env or {}), "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=120,
    )


def one_line_error(result: Any, *needles: str) -> str:
    """The single ``error: ...`` line of an exit-2 result, holding every needle; returns it."""
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]
