"""Threads the agent starts and leaves running, as production has them. A case runs on a daemon thread
of harvester's (a hung agent is abandoned), and a thread takes its daemon flag from the thread that
made it: a plain ``threading.Thread(...)`` the agent started was a daemon only in the replay, so the
``harvester`` program never waited for it, its connection was never tried, and the replay passed with
exit 0 where production makes the connection. The program now waits for it, names what its seal
refused, and exits 1; a hung one still lets the program end."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harvester.case import AgentCase, save_case
from harvester.replay import replay
from tests.builders.backends import Listener, payments_listener
from tests.builders.cli import program


@pytest.fixture
def payments(monkeypatch: pytest.MonkeyPatch) -> Iterator[Listener]:
    with payments_listener(monkeypatch) as listener:
        yield listener


def _case() -> AgentCase:
    return AgentCase.model_validate(
        {"id": "refund", "status": "accepted", "prompt": "Refund order A1001", "recorded": {"stop": "answered"}}
    )


def _program(tmp_path: Path, how: str, *options: str) -> tuple[subprocess.CompletedProcess[str], float]:
    (tmp_path / "pyproject.toml").write_text("[tool.harvester]\n")
    save_case(_case(), tmp_path / "cases")
    started = time.monotonic()
    done = program(
        tmp_path, "replay", "--agent", "tests.apps.posts_late_plain:build", *options, env={"LATE_THREAD": how}
    )
    return done, time.monotonic() - started


@pytest.mark.parametrize("how", ["plain", "nested"])
def test_a_plain_thread_the_agent_leaves_running_is_waited_for_and_its_refusal_fails_the_program(
    payments, tmp_path: Path, how: str
):
    done, _ = _program(tmp_path, how)
    output = done.stdout + done.stderr
    assert payments.accepted == 0, output
    assert "release gate: PASS" in done.stdout, output  # the verdict, printed before the thread tried
    assert f"warning: after the replay ended, the seal refused connect to 127.0.0.1:{payments.port}" in done.stderr
    assert done.returncode == 1, output


def test_a_daemon_the_agent_made_is_cut_off_at_exit_as_in_production(payments, tmp_path: Path):
    done, took = _program(tmp_path, "daemon")
    assert (done.returncode, done.stderr) == (0, ""), done.stdout + done.stderr
    assert payments.accepted == 0


def test_a_hung_case_and_its_hung_thread_still_let_the_program_end(payments, tmp_path: Path):
    """The agent and the plain thread it started both hang: the case fails at ``--timeout``, and the
    program waits for the thread as for one that keeps the process alive (10 s at most), then ends."""
    done, took = _program(tmp_path, "hung", "--timeout", "1")
    output = done.stdout + done.stderr
    assert done.returncode == 1 and "ReplayTimeout" in output, output
    assert took < 60, output


def test_threads_the_agent_makes_are_not_daemons_to_it_as_in_production():
    """Read inside the agent: a plain thread is not a daemon (until it starts, where harvester makes it
    one the program waits for); the agent's own ``daemon = True`` holds; its case's thread stays one."""
    seen: dict[str, object] = {}

    def agent(prompt: str) -> str:
        plain, flagged = threading.Thread(target=time.sleep, args=(0.01,)), threading.Thread(target=time.sleep)
        flagged.daemon = True  # as Sentry's worker sets it, after making the thread
        seen.update(case=threading.current_thread().daemon, plain=plain.daemon, flagged=flagged.daemon)
        plain.start()
        plain.join()
        return "Refund queued."

    report = replay([_case()], lambda: agent)
    assert report.results[0].passed, report.results[0].reasons()
    assert seen == {"case": True, "plain": False, "flagged": True}
