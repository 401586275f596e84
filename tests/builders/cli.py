"""Reading a CLI result the way the project promises bad input reads: one line, exit 2."""

from __future__ import annotations

from typing import Any


def one_line_error(result: Any, *needles: str) -> str:
    """The single ``error: ...`` line of an exit-2 result, holding every needle; returns it."""
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]
