"""``--confirm`` and the seal: a case the seal refused something in, in any trial or rerun, fails. A
rerun that passes makes a failing case flaky (passed), but an attempt to leave the process is not
flakiness: the headline, the JSON report and JUnit all call such a case failed, and it is not rerun."""

from __future__ import annotations

import threading
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from harvester.case import save_case
from harvester.replay import replay
from harvester.report import Report
from harvester.report._html import case_verdict
from tests.apps.starts_at_import import post
from tests.builders.agents import GOOD, case, scripted
from tests.builders.backends import Listener, payments_listener
from tests.builders.cli import program


@pytest.fixture
def payments(monkeypatch: pytest.MonkeyPatch) -> Iterator[Listener]:
    with payments_listener(monkeypatch) as listener:
        yield listener


def _leaking(runs: dict[str, int], leak_on: int, bad_on: tuple[int, ...] = ()):
    """A factory whose agent tries to post on its ``leak_on``-th run (and goes on when refused), and
    answers wrongly on the runs in ``bad_on``; right otherwise."""
    bad = scripted(("kb_search", {"query": "refund policy"}), answer="no idea")
    lock = threading.Lock()

    def build():
        with lock:
            runs["n"] += 1
            n = runs["n"]

        def agent(prompt: str) -> str:
            if n == leak_on:
                try:
                    post()
                except OSError:
                    pass
            return (bad if n in bad_on else GOOD)(prompt)

        return agent

    return build


def test_a_case_sealed_on_its_first_run_fails_and_is_not_rerun(payments):
    runs = {"n": 0}
    report = replay([case("c1")], _leaking(runs, leak_on=1), confirm=2)
    (c1,) = report.results
    assert runs["n"] == 1  # not rerun: no rerun can undo a refusal
    assert (c1.passed, c1.confirmation, c1.trials, c1.passes) == (False, None, 1, 0)
    assert [c.name for c in c1.failed_checks()] == ["sealed"]
    assert f"connect to 127.0.0.1:{payments.port}" in c1.failed_checks()[0].detail
    assert report.headline().startswith("0/1 passed")
    assert payments.accepted == 0


def test_a_rerun_the_seal_refused_something_in_confirms_the_failure(payments):
    runs = {"n": 0}
    report = replay([case("c1")], _leaking(runs, leak_on=2, bad_on=(1,)), confirm=3)
    (c1,) = report.results
    assert runs["n"] == 2  # the sealed rerun ended the reruns: a third, passing one would not undo it
    assert (c1.passed, c1.confirmation, c1.trials, c1.passes) == (False, "confirmed", 2, 0)
    assert c1.live_calls == 1
    assert payments.accepted == 0


def test_with_trials_one_sealed_trial_fails_the_case_and_confirm_does_not_rerun_it(payments):
    runs = {"n": 0}
    report = replay([case("c1")], _leaking(runs, leak_on=2), trials=3, confirm=2)
    (c1,) = report.results
    assert runs["n"] == 3
    assert (c1.passed, c1.confirmation, c1.trials, c1.passes) == (False, None, 3, 2)
    assert payments.accepted == 0
    assert not c1.flaky and case_verdict(c1) == "failed"  # trying to leave the process is no flakiness
    assert "flaky []" in report.summary()


def test_the_program_with_confirm_reports_the_sealed_case_failed_everywhere(payments, tmp_path: Path):
    """The probe's run: ``harvester replay --confirm 2 --junit --report`` on an agent that leaks on its
    first run only. It printed ``1/1 passed (100%)``, wrote ``passed: true, confirmation: flaky`` and a
    JUnit file with no failure."""
    (tmp_path / "pyproject.toml").write_text("[tool.harvester]\n")
    save_case(case("c1"), tmp_path / "cases")
    command = ["replay", "--agent", "tests.apps.leaks_once:build", "--confirm", "2"]
    done = program(tmp_path, *command, "--report", "r.json", "--junit", "junit.xml")
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "0/1 passed  (0%)" in done.stdout, output
    assert "FAIL c1" in done.stdout and f"sealed: refused connect to 127.0.0.1:{payments.port}" in done.stdout
    (c1,) = Report.load(tmp_path / "r.json").results
    assert (c1.passed, c1.confirmation) == (False, None)
    suites = ET.parse(tmp_path / "junit.xml").getroot()
    assert suites.get("failures") == "1", ET.tostring(suites).decode()
    assert payments.accepted == 0
