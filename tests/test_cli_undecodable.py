"""An id or a name holding an undecodable byte (a shell hands it to Python as a lone surrogate) is refused
in one line naming the argument, exit 2, on both stores: never an encoding traceback from the store."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner

from harvester.cli import main
from harvester.spans import to_otlp
from tests.builders.store import agent_trace

BAD = "ab\udcffcd"  # what Python makes of the bytes b"ab\xffcd" in argv

# Every argument that reaches the store, a backend or a case file, and the name the refusal gives it.
COMMANDS = [
    (["traces", "show", BAD], "TRACE_ID"),
    (["traces", "list", "--agent", BAD], "--agent"),
    (["traces", "export", BAD], "TRACE_ID"),
    (["harvest", "--agent", BAD], "--agent"),
    (["incident", BAD, "--why", "x"], "TRACE_ID"),
    (["incident", "ab", "--why", "x", "--run", BAD], "--run"),
    (["incident", "ab", "--why", BAD], "--why"),
    (["incident", "ab", "--why", "x", "--tag", BAD], "--tag"),
    (["incident", "ab", "--why", "x", "--forbid", BAD], "--forbid"),
    (["incident", "ab", "--why", "x", "--from", f"jaeger://127.0.0.1:9/{BAD}"], "--from"),
    (["rerecord", "case-1", "--trace", BAD], "--trace"),
    (["import", "jaeger://127.0.0.1:9", BAD], "TRACE_ID"),
]


@pytest.fixture
def stored(store_url: str, tmp_path: Path) -> str:
    src = tmp_path / "traces.json"
    src.write_bytes(orjson.dumps(to_otlp(agent_trace(f"ab{1:030x}"))))
    res = CliRunner().invoke(main, ["ingest", str(src), "--store", store_url])
    assert res.exit_code == 0, res.output
    return store_url


@pytest.mark.parametrize(("args", "named"), COMMANDS, ids=[" ".join(a[:2]) + f" {n}" for a, n in COMMANDS])
def test_an_undecodable_argument_is_one_line_exit_2(
    stored: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], named: str
) -> None:
    monkeypatch.chdir(tmp_path)  # the default cases folder: ./cases
    res = CliRunner().invoke(main, [*args, "--store", stored])
    assert res.exit_code == 2, res.output
    value = next(a for a in args if BAD in a)
    assert res.output.strip().splitlines() == [f"error: {named}: {value!r} is not valid UTF-8 (an undecodable byte)"]
    assert not (tmp_path / "cases").exists()


def test_a_real_shell_argument_with_a_byte_that_is_not_utf8(stored: str, tmp_path: Path) -> None:
    """The bytes as a shell passes them (``$'ab\\xffcd'``), through a real process: one line, exit 2."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    for args in ([b"traces", b"show", b"ab\xffcd"], [b"traces", b"list", b"--agent", b"ab\xffcd"]):
        done = subprocess.run(
            [sys.executable.encode(), b"-m", b"harvester", *args, b"--store", stored.encode()],
            capture_output=True,
            env=env,
            cwd=tmp_path,
            timeout=60,
        )
        assert done.returncode == 2, done.stderr
        assert len(done.stderr.splitlines()) == 1 and b"Traceback" not in done.stderr
        assert b"is not valid UTF-8" in done.stderr
