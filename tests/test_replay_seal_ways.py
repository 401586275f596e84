"""The seal on the less common ways out of a replay: a Python child given an environment of its own (as an
MCP client starts its server), multiprocessing's workers and the programs it starts, name lookups other
than ``getaddrinfo``, a local socket named by a bytearray, and a connection the agent's module opens when
``harvester replay`` imports it. Each is refused, named in the case, and the service receives nothing."""

from __future__ import annotations

import contextlib
import copy
import errno
import multiprocessing
import os
import pickle
import queue
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from harvester import seam
from harvester.case import AgentCase, save_case
from harvester.cli import main
from harvester.errors import Sealed
from harvester.replay import replay
from harvester.report import Report
from tests.apps import leaky_app, starts_at_import
from tests.builders.backends import Loopback, loopback, routes
from tests.builders.cli import one_line_error, program


@pytest.fixture
def payments(monkeypatch: pytest.MonkeyPatch) -> Iterator[Loopback]:
    """The payments service on 127.0.0.1: every request that reaches it is in ``seen``."""
    with loopback(routes({"/refund": {"refunded": "A1001"}})) as server:
        monkeypatch.setenv(leaky_app.URL_ENV, f"{server.origin}/refund")
        yield server


def refund_case() -> AgentCase:
    return AgentCase.model_validate(
        {
            "id": "refund",
            "status": "accepted",
            "prompt": "Refund order A1001",
            "recorded": {"trajectory": ["issue_refund"], "stop": "answered"},
        }
    )


def refused(report: Report) -> str:
    (result,) = report.results
    return refused_detail(result)


def refused_detail(result: Any) -> str:
    check = next((c for c in result.checks if c.name == "sealed" and c.passed is False), None)
    assert check is not None, f"nothing refused: {[(c.name, c.detail) for c in result.checks]}"
    return check.detail or ""


def test_a_python_child_given_its_own_environment_still_seals_itself(payments, monkeypatch, capfd):
    """The MCP client starts a stdio server with only HOME, PATH, SHELL and TERM: the seal passes itself
    into that environment, so the allowed command runs and what it tries is refused."""
    monkeypatch.setenv(leaky_app.CLIENT_ENV, "own-env")
    report = replay([refund_case()], leaky_app.build, timeout=60, allow_commands=[f"{sys.executable} -c"])
    assert payments.seen == []
    assert f"connect to 127.0.0.1:{payments.port} during process {sys.executable} -c" in refused(report)
    assert "Error in sitecustomize" not in capfd.readouterr().err  # the stand-in leaves the child quietly


def _python_for(user: str) -> str | None:
    """A Python ``user`` may run (this one may sit in root's home), or None."""
    for python in filter(None, (sys.executable, shutil.which("python3"), "/usr/bin/python3")):
        with contextlib.suppress(OSError):
            if subprocess.run([python, "-c", "pass"], user=user, capture_output=True, check=False).returncode == 0:
                return python
    return None


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="starting a process as another user")
def test_a_python_child_started_as_another_user_reports_its_refusal(payments):
    """A code-execution helper drops privileges (``subprocess.run(..., user="nobody")``): the child is
    sealed, and its refusal reaches the case through the log it may append to but not read."""
    python = _python_for("nobody")
    assert python is not None, "no Python the user nobody may run"
    code = f"import socket; socket.create_connection(('127.0.0.1', {payments.port}), timeout=5)"

    def build() -> Any:
        def agent(prompt: str) -> str:
            done = subprocess.run([python, "-c", code], user="nobody", capture_output=True, text=True, check=False)
            return f"Refund: {done.returncode}"

        return agent

    (result,) = replay([refund_case()], build, timeout=60, allow_commands=[f"{python} -c"]).results
    assert payments.seen == [] and result.live_calls == 1
    assert f"connect to 127.0.0.1:{payments.port} during process {python} -c" in refused_detail(result)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="starting a process as another user")
def test_a_python_child_that_cannot_reach_the_log_does_not_run(tmp_path: Path):
    """A child whose refusals could not come back would let its case pass: it does not run (exit 70),
    saying why. Its setting is a replay's, with the log in a folder closed to the child's user."""
    from harvester.replay import _seal
    from harvester.replay._policy import Policy

    python = _python_for("nobody")
    assert python is not None, "no Python the user nobody may run"
    with _seal.sealing(Policy()):
        setting, path = orjson.loads(os.environ[_seal.CHILD_ENV]), os.environ["PYTHONPATH"]
    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    (closed / "refusals.jsonl").touch(mode=0o622)
    setting["log"] = str(closed / "refusals.jsonl")
    env = {**os.environ, _seal.CHILD_ENV: orjson.dumps(setting).decode(), "PYTHONPATH": path}
    done = subprocess.run(
        [python, "-c", "print('ran')"], user="nobody", env=env, capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stdout) == (70, ""), done.stderr
    assert "could not seal this process" in done.stderr and "cannot report its refusals" in done.stderr


@pytest.mark.parametrize("start", ["mp-spawn", "mp-forkserver"])
def test_a_multiprocessing_worker_is_the_process_itself_and_sealed(payments, monkeypatch, start):
    """Its workers start with no command listed (they are this interpreter) and seal themselves; the
    forkserver's own local socket is not the outside world."""
    monkeypatch.setenv(leaky_app.CLIENT_ENV, start)
    report = replay([refund_case()], leaky_app.build, timeout=90)
    assert payments.seen == []
    detail = refused(report)
    assert f"connect to 127.0.0.1:{payments.port} during process {sys.executable}" in detail
    assert "unix:" not in detail and "start" not in detail


def test_a_program_multiprocessing_starts_is_a_command_like_any(payments, monkeypatch):
    """``_posixsubprocess.fork_exec`` raises no audited event: the seal wraps it."""
    monkeypatch.setenv(leaky_app.CLIENT_ENV, "mp-program")
    report = replay([refund_case()], leaky_app.build, timeout=60)
    assert payments.seen == []
    assert f"start {shutil.which('env')} {sys.executable} -c" in refused(report)


def test_a_lookup_by_gethostbyname_is_refused_by_name_and_the_machines_own_is_not(payments, monkeypatch):
    """The query itself leaves the process; ``socket.getfqdn()`` (what logging and mail libraries ask)
    looks up the machine's own name, which is not the outside world."""
    monkeypatch.setenv(leaky_app.CLIENT_ENV, "gethostbyname")
    report = replay([refund_case()], leaky_app.build, timeout=30)
    assert "connect to payments.internal.example during issue_refund: not a model host" in refused(report)

    def build():
        def agent(prompt: str) -> str:
            return f"{socket.getfqdn()} {socket.gethostbyname('localhost')} {socket.gethostbyaddr('127.0.0.1')[0]}"

        return agent

    case = AgentCase.model_validate({"id": "fqdn", "status": "accepted", "prompt": "who am I"})
    report = replay([case], build, timeout=30)
    assert not [c for c in report.results[0].checks if c.name == "sealed"], report.summary()


def test_a_local_socket_named_by_a_bytearray_is_refused(payments, monkeypatch, tmp_path):
    path = str(tmp_path / "pay.sock")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(path)
        server.listen()
        server.settimeout(0.5)
        monkeypatch.setenv(leaky_app.CLIENT_ENV, "unix")
        monkeypatch.setenv("LEAKY_UNIX", path)
        report = replay([refund_case()], leaky_app.build, timeout=30)
        assert f"connect to unix:{path} during issue_refund" in refused(report)
        with pytest.raises(TimeoutError):
            server.accept()


def test_the_syslog_module_is_refused_as_the_local_socket_its_handler_is(payments, monkeypatch):
    """``syslog.syslog`` reaches ``/dev/log`` from C, with no socket event: its own audited event is
    refused as that socket, as ``logging.handlers.SysLogHandler`` connecting there is."""
    import logging.handlers

    monkeypatch.setenv(leaky_app.CLIENT_ENV, "syslog")
    assert "connect to unix:/dev/log during issue_refund: a local socket" in refused(
        replay([refund_case()], leaky_app.build, timeout=30)
    )
    allowed = replay([refund_case()], leaky_app.build, timeout=30, allow_hosts=["unix:/dev/log"])
    assert not [c for c in allowed.results[0].checks if c.name == "sealed"], allowed.summary()

    def build() -> Any:
        def agent(prompt: str) -> str:
            with contextlib.suppress(OSError):
                logging.handlers.SysLogHandler("/dev/log").close()
            return "Refund: queued"

        return agent

    assert "connect to unix:/dev/log: a local socket" in refused(replay([refund_case()], build, timeout=30))


def test_a_connection_the_agent_module_opens_at_import_is_refused(payments, monkeypatch, tmp_path: Path):
    """``harvester replay`` imports the agent sealed (allowing what every case may): a client connected at
    import would be open before the replay's seal, and what the tool later sends never checked."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.harvester]\n")
    save_case(refund_case(), tmp_path / "cases")
    agent = ["replay", "--agent", "tests.apps.connects_at_import:build"]
    result = CliRunner().invoke(main, agent)
    line = one_line_error(result, "tests.apps.connects_at_import", f"sealed connect to 127.0.0.1:{payments.port}")
    assert "allow it with replay.allow_hosts" in line
    assert payments.seen == []
    allowed = CliRunner().invoke(main, [*agent, "--allow-host", f"127.0.0.1:{payments.port}"])
    assert "error:" not in allowed.output, allowed.output
    deadline = time.monotonic() + 10  # the tool sends and answers at once: the server records it a moment later
    while not payments.seen and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(payments.seen) == 1


def test_a_connection_refused_at_the_agent_s_import_is_said_once_by_the_program(payments, tmp_path: Path):
    """The program's import error names the refusal; its exit does not say it again as a thread's."""
    (tmp_path / "pyproject.toml").write_text("[tool.harvester]\n")
    save_case(refund_case(), tmp_path / "cases")
    done = program(tmp_path, "replay", "--agent", "tests.apps.connects_at_import:build")
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"sealed connect to 127.0.0.1:{payments.port}" in done.stderr
    assert done.stderr.count(f"127.0.0.1:{payments.port}") == 1, done.stderr
    assert "after the replay ended" not in done.stderr and payments.seen == []


def test_a_plugin_in_the_app_package_is_imported_sealed(payments, monkeypatch, tmp_path: Path):
    """A config plugin that lives in the app's package (``myapp.checks``, as docs/checks.md lays it out)
    imports the app first: imported before the seal, its import-time connection was open, the agent's
    sealed import found the app imported already, and what the tool sent passed every case."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    package = tmp_path / "plugged_shop"
    package.mkdir()
    (package / "__init__.py").write_text((Path(__file__).parent / "apps" / "connects_at_import.py").read_text())
    (package / "checks.py").write_text('"""The project\'s own checks."""\n')
    (tmp_path / "pyproject.toml").write_text('[tool.harvester]\nplugins = ["plugged_shop.checks"]\n')
    save_case(refund_case(), tmp_path / "cases")
    try:
        result = CliRunner().invoke(main, ["replay", "--agent", "plugged_shop:build"])
        one_line_error(result, "plugin 'plugged_shop.checks'", f"sealed connect to 127.0.0.1:{payments.port}")
        assert payments.seen == []
        allowed = CliRunner().invoke(
            main, ["replay", "--agent", "plugged_shop:build", "--allow-host", f"127.0.0.1:{payments.port}"]
        )
        assert "error:" not in allowed.output, allowed.output
        deadline = time.monotonic() + 10  # the server records the request a moment after it answered
        while not payments.seen and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(payments.seen) == 1
    finally:
        for name in ("plugged_shop", "plugged_shop.checks"):
            sys.modules.pop(name, None)


def _replay_in_a_process(tmp_path: Path, agent: str, *options: str, **env: str) -> Report:
    """``harvester replay --agent`` in a process of its own (what the agent starts at import outlives
    the replay), its report read back."""
    done = program(tmp_path, "replay", "--agent", agent, "--report", "r.json", *options, env=env)
    assert done.returncode in (0, 1), done.stdout + done.stderr  # a verdict, not a usage error or a crash
    return Report.load(tmp_path / "r.json")


def test_a_refusal_after_the_replay_ended_is_said_and_fails_the_program(payments, monkeypatch, tmp_path: Path):
    """A thread the agent left running posts after the verdict was printed: the program waits for it (as
    Python would), names the refusal in a warning line and exits 1, not 0."""

    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.harvester]\n")
    save_case(refund_case().model_copy(update={"checks": []}), tmp_path / "cases")
    done = program(tmp_path, "replay", "--agent", "tests.apps.posts_late:build")
    assert payments.seen == []
    assert done.returncode == 1, done.stdout + done.stderr
    assert "release gate: PASS" in done.stdout  # the verdict, printed before the thread tried
    assert f"after the replay ended, the seal refused connect to 127.0.0.1:{payments.port}" in done.stderr


def test_a_thread_the_agent_module_starts_at_import_finds_no_moment_unsealed(payments, monkeypatch, tmp_path: Path):
    """The import's seal stays on until the replay's takes over: a thread that retries its connection every
    millisecond got in between the two, and then sent through the whole replay."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.harvester]\n")
    save_case(refund_case(), tmp_path / "cases")
    report = _replay_in_a_process(tmp_path, "tests.apps.starts_at_import:build", STARTS="thread")
    assert payments.seen == []
    assert f"connect to 127.0.0.1:{payments.port}" in refused(report)  # the case in flight owns it


@pytest.mark.parametrize("method", ["spawn", "forkserver", "fork"])
def test_a_pool_the_agent_module_starts_at_import_is_sealed_and_its_refusals_counted(
    payments, monkeypatch, tmp_path: Path, method: str
):
    """The pool's workers seal themselves with the import's seal, and write their refusals to its log:
    the replay reads that log, so what they refuse fails the case."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.harvester]\n")
    save_case(refund_case(), tmp_path / "cases")
    report = _replay_in_a_process(tmp_path, "tests.apps.starts_at_import:build", STARTS="pool", STARTS_METHOD=method)
    assert payments.seen == []
    assert f"connect to 127.0.0.1:{payments.port}" in refused(report)


def test_a_pool_the_agent_module_starts_at_import_reaches_the_cases_model_hosts(payments, monkeypatch, tmp_path):
    """The import is sealed as code without a case's context is in the replay: the cases' model hosts are
    allowed, so a pool made at import may call the model a case recorded (here a local gateway)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.harvester]\n")
    gateway = refund_case().model_copy(deep=True)
    gateway.recorded.model_hosts = [f"127.0.0.1:{payments.port}"]
    save_case(gateway, tmp_path / "cases")
    report = _replay_in_a_process(tmp_path, "tests.apps.starts_at_import:build", STARTS="pool", STARTS_METHOD="spawn")
    (r,) = report.results
    assert not any(c.name == "sealed" for c in r.checks) and len(payments.seen) == 1, r.reasons()


def test_a_refusal_made_after_its_case_ended_is_counted_in_the_replay(payments):
    """A thread the first case started outlives it and tries after it ended: its case's refusals were read,
    so the refusal is the suite's, and fails the case then in flight, saying so."""
    started, go, done = [], threading.Event(), threading.Event()

    def late() -> None:
        go.wait(10)
        try:
            starts_at_import.post()
        except PermissionError:
            pass  # refused: what the test reads in the report
        finally:
            done.set()

    def build() -> Any:
        def agent(prompt: str) -> str:
            if not started:
                started.append(threading.Thread(target=late, daemon=True))
                started[0].start()
                return "Refund: queued"
            go.set()
            done.wait(10)
            return "Refund: done"

        return agent

    first, second = (refund_case().model_copy(update={"id": f"refund-{n}"}) for n in (1, 2))
    report = replay([first, second], build, concurrency=1, timeout=30)
    assert payments.seen == []
    one, two = report.results
    assert not any(c.name == "sealed" for c in one.checks)
    detail = next(c.detail for c in two.checks if c.name == "sealed")
    assert f"connect to 127.0.0.1:{payments.port}" in detail and "after case refund-1 ended" in detail


def test_a_thread_a_case_started_reaches_the_world_again_once_the_replay_returned(payments):
    """A sender the app starts on first use, inside a case, keeps that case's context; once ``replay()``
    returned the process is unsealed, and what it sends then is the app's live work."""
    jobs: queue.Queue[str | None] = queue.Queue()
    done: queue.Queue[str] = queue.Queue()

    def sender() -> None:
        while (order := jobs.get()) is not None:
            try:
                leaky_app.issue_refund(order)
                done.put("sent")
            except OSError as exc:
                done.put(f"failed: {exc}")

    worker = threading.Thread(target=sender, daemon=True)

    def build() -> Any:
        def agent(prompt: str) -> str:
            if not worker.is_alive():
                worker.start()
            return "queued nothing"

        return agent

    replay([refund_case()], build, timeout=30)
    jobs.put("A1001")
    assert done.get(timeout=30) == "sent"
    jobs.put(None)
    assert len(payments.seen) == 1


def test_a_timed_out_case_s_refusals_are_counted_before_and_after_it_was_given_up(payments):
    """A case whose agent outlives the timeout is failed with what its seal refused so far; what its thread
    tries after that is the suite's, failing the case then in flight, and counts once."""
    tried = threading.Event()

    def build(case: Any) -> Any:
        def agent(prompt: str) -> str:
            if case.id == "refund-1":
                with contextlib.suppress(PermissionError):
                    starts_at_import.post()  # refused while its case runs
                time.sleep(1.6)  # past the timeout (0.3 s and the harness's 1 s of grace)
                with contextlib.suppress(PermissionError):
                    starts_at_import.post()  # refused after its case was given up
                tried.set()
                return "Refund: late"
            tried.wait(10)
            return "Refund: done"

        return agent

    cases = [refund_case().model_copy(update={"id": f"refund-{n}"}) for n in (1, 2)]
    one, two = replay(cases, build, concurrency=1, timeout=0.3).results
    assert payments.seen == []
    assert "ReplayTimeout" in (one.error or "") and one.live_calls == 1
    assert f"connect to 127.0.0.1:{payments.port}" in refused_detail(one)
    assert "after case refund-1 ended" in refused_detail(two) and two.live_calls == 1


def test_the_suite_seal_keeps_its_newest_refusals_and_counts_every_one(payments):
    """Code without a case's context (a worker thread started before the replay) is refused 150 times in
    the first case: the suite seal keeps the newest 100, so one refusal in the second case is still seen
    there, and the report counts the 50 no case could."""
    asked: queue.Queue[int] = queue.Queue()
    answered: queue.Queue[None] = queue.Queue()

    def worker() -> None:
        while True:
            for _ in range(asked.get()):
                with contextlib.suppress(PermissionError):
                    starts_at_import.post()
            answered.put(None)

    threading.Thread(target=worker, daemon=True).start()  # before the replay: no case's context

    def build(case: Any) -> Any:
        def agent(prompt: str) -> str:
            asked.put(150 if case.id == "refund-1" else 1)
            answered.get(timeout=30)
            return "Refund: queued"

        return agent

    cases = [refund_case().model_copy(update={"id": f"refund-{n}"}) for n in (1, 2)]
    report = replay(cases, build, concurrency=1, timeout=30)
    one, two = report.results
    assert payments.seen == []
    assert one.live_calls == 100 and two.live_calls == 1 and report.refused == 50
    assert "refused 50 calls made outside any case\n" in report.summary() + "\n"


def test_a_case_s_refusals_count_every_one_it_did_not_keep(payments):
    """A case's seal names its newest 100 refusals; its ``live_calls`` counts all of them."""

    def build() -> Any:
        def agent(prompt: str) -> str:
            for _ in range(150):
                with contextlib.suppress(PermissionError):
                    starts_at_import.post()
            return "Refund: queued"

        return agent

    (r,) = replay([refund_case()], build, timeout=30).results
    assert payments.seen == [] and r.live_calls == 150
    assert refused_detail(r).endswith(" (100 times); and 50 more")  # the same refusal, kept 100 times, once


def test_the_program_sends_its_report_to_the_otlp_endpoint_and_nothing_else_after_the_replay(
    payments, monkeypatch, tmp_path: Path
):
    """After the replay the ``harvester`` program is still sealed, with its OTLP endpoint allowed too: the
    verdicts arrive there, while a thread the agent's import started stays refused to the end, and so does
    the agent's logging handler, which the export's own logging calls (it was harvester's own work)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.harvester]\n")
    save_case(refund_case(), tmp_path / "cases")
    for starts in ("thread", "log"):
        with loopback(routes({"/v1/traces": {}})) as collector:
            _replay_in_a_process(
                tmp_path, "tests.apps.starts_at_import:build", "--otlp-endpoint", collector.origin, STARTS=starts
            )
            assert [s.path for s in collector.seen] == ["/v1/traces"], starts
        assert payments.seen == [], starts


def test_a_forkserver_pool_s_refusals_fail_every_case_not_only_the_first(payments):
    """Every case's worker comes from the forkserver the first case started, and names its seal: a later
    case's refusal is read back into the case then in flight, not into the one that has ended."""

    def build() -> Any:
        def agent(prompt: str) -> str:
            with multiprocessing.get_context("forkserver").Pool(1) as pool:
                try:
                    return "Refund: " + pool.apply(starts_at_import.post)
                except PermissionError:
                    return "Refund: refused"

        return agent

    cases = [refund_case().model_copy(update={"id": f"refund-{n}"}) for n in (1, 2)]
    report = replay(cases, build, concurrency=1, timeout=60)
    assert payments.seen == []
    for result in report.results:
        detail = next((c.detail for c in result.checks if c.name == "sealed"), "")
        assert f"connect to 127.0.0.1:{payments.port}" in detail, result.id


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_a_pool_made_in_one_case_serves_the_next_with_the_suite_s_seal(payments, method: str):
    """A module-level pool made on first use, in the first case, serves the second: its workers carry
    the suite's seal (what any case may reach), not the first case's, so the second case's model host,
    which the first case did not record, is reached."""
    pool: list[Any] = []

    def build(case: Any) -> Any:
        def agent(prompt: str) -> str:
            if not pool:
                pool.append(multiprocessing.get_context(method).Pool(1))
                return "Refund: " + str(pool[0].apply(len, ("ok",)))
            return "Refund: " + pool[0].apply(starts_at_import.post)

        return agent

    first, second = (refund_case().model_copy(update={"id": f"refund-{n}"}, deep=True) for n in (1, 2))
    first.recorded.model_hosts = ["api.openai.com"]
    second.recorded.model_hosts = [f"127.0.0.1:{payments.port}"]
    try:
        report = replay([first, second], build, concurrency=1, timeout=60)
    finally:
        pool[0].terminate()
    assert [r.passed for r in report.results] == [True, True], [r.reasons() for r in report.results]
    assert len(payments.seen) == 1


def test_in_the_harvester_program_the_progress_callback_runs_sealed(payments, monkeypatch):
    """The program's callbacks are its own progress bar, which reaches nothing: they run sealed, so a
    signal handler of the agent's that fires while the bar draws is held to the seal (a library caller's
    callbacks are its own work, and reach its dashboard)."""
    monkeypatch.setattr(seam.STATE, "harness", True)
    outcomes: list[str] = []

    def progress(done: int, total: int | None) -> None:
        try:
            starts_at_import.post()
            outcomes.append("sent")
        except PermissionError:
            outcomes.append("refused")

    replay([refund_case()], lambda: lambda prompt: "Refund: queued", timeout=30, progress=progress)
    assert outcomes == ["refused"] and payments.seen == []


def test_a_refusal_goes_back_from_a_pool_s_worker_as_itself():
    """Pickled (a process pool sends its worker's exception back so), ``Sealed`` is made again from its
    message: ``OSError``'s own pickling killed the pool's result thread, and the caller waited forever."""
    refused = Sealed("harvester replay sealed connect to 127.0.0.1:9: not a model host")
    again = pickle.loads(pickle.dumps(refused))
    assert type(again) is Sealed and str(again) == str(refused) and again.errno == errno.EACCES
    assert str(copy.copy(refused)) == str(refused)


def test_a_command_refused_in_a_path_search_counts_once(monkeypatch, tmp_path: Path):
    """``os.execvp`` catches the refusal and tries the same command in the next folder on ``PATH``, then
    raises the first refusal: one command, one refusal, not one per folder."""
    folders = [tmp_path / f"bin{n}" for n in range(3)]
    for folder in folders:
        folder.mkdir()
        (folder / "payme").write_text("#!/bin/sh\nexit 0\n")
        (folder / "payme").chmod(0o755)
    monkeypatch.setenv("PATH", os.pathsep.join([*map(str, folders), os.environ["PATH"]]))

    def build() -> Any:
        def agent(prompt: str) -> str:
            try:
                os.execvp("payme", ["payme", "--refund", "A1001"])
            except PermissionError as exc:
                return f"Refund: {exc}"
            return "unreachable"

        return agent

    (result,) = replay([refund_case()], build, timeout=30).results
    detail = next(c.detail for c in result.checks if c.name == "sealed")
    assert f"start {folders[0]}/payme --refund A1001" in detail and "more" not in detail
    assert result.live_calls == 1 and "harvester replay sealed" in (result.answer or "")


def test_a_command_refused_in_a_path_search_names_the_program_that_would_have_run(monkeypatch, tmp_path: Path):
    """The search tries every folder on ``PATH`` in turn, the first ones holding no such program: the
    refusal names the one that would have run, not the first folder's."""
    empty, holding = tmp_path / "empty", tmp_path / "bin"
    for folder in (empty, holding):
        folder.mkdir()
    (holding / "payme").write_text("#!/bin/sh\nexit 0\n")
    (holding / "payme").chmod(0o755)
    (empty / "payme").write_text("not a program\n")  # there, but it may not run
    monkeypatch.setenv("PATH", os.pathsep.join([str(tmp_path / "none"), str(empty), str(holding), os.environ["PATH"]]))

    def build() -> Any:
        def agent(prompt: str) -> str:
            with contextlib.suppress(PermissionError):
                os.spawnlp(os.P_WAIT, "payme", "payme", "--refund", "A1001")
            return "Refund: queued"

        return agent

    (result,) = replay([refund_case()], build, timeout=30).results
    detail = refused_detail(result)
    assert f"start {holding}/payme --refund A1001" in detail and "empty" not in detail and "none" not in detail
    assert result.live_calls == 1


def test_an_app_on_uvloop_is_replayed_on_loops_the_seal_sees(payments, monkeypatch, tmp_path: Path):
    """uvloop connects in C, past every audit hook: an app that installs its policy at import has its
    cases run on the standard library's event loops while sealed, so its connection is refused."""

    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.harvester]\n")
    save_case(refund_case(), tmp_path / "cases")
    done = program(tmp_path, "replay", "--agent", "tests.apps.uvloop_app:build", "--json")
    assert payments.seen == [], done.stdout + done.stderr
    assert f"sealed connect to 127.0.0.1:{payments.port}" in done.stdout, done.stdout + done.stderr


def test_a_case_whose_model_hosts_are_not_hosts_is_one_line_naming_file_and_field(monkeypatch, tmp_path: Path):
    """A provider's documented patterns load (``*`` anywhere); a URL is one line, exit 2, not a crash
    deep in the seal."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.harvester]\n")
    patterns = ["bedrock-runtime.*.amazonaws.com", "*-aiplatform.googleapis.com", "ollama_server:11434", "::1"]
    case = refund_case().model_copy(
        update={"recorded": refund_case().recorded.model_copy(update={"model_hosts": patterns})}
    )
    written = save_case(AgentCase.model_validate(case.model_dump()), tmp_path / "cases")
    assert AgentCase.model_validate_json(written.read_text()).recorded.model_hosts == patterns
    written.write_text(written.read_text().replace('"ollama_server:11434"', '"http://models.internal"'))
    result = CliRunner().invoke(main, ["replay", "--agent", "tests.apps.leaky_app:build"])
    one_line_error(result, written.name, "recorded.model_hosts", "'http://models.internal' is not a host")


@pytest.mark.parametrize(
    ("client", "named"),
    [
        ("suppressed", "during issue_refund"),  # suppress_tracing() is the agent's code, not an exporter
        ("isolated", "a Python run with -I, -E or -S skips the seal's environment"),
        ("posix-spawn-env", "a Python given an environment without the seal's"),
        ("posix-spawn-pythonpath", "a Python given an environment without the seal's"),
        ("cleared-env", "during process"),  # the seal was kept apart from os.environ: the child has it
        ("pty", "during issue_refund"),  # a pty child's refusal is read back into its case
        ("exporter", "during issue_refund"),  # only the SDK's own span processors export unsealed
    ],
)
def test_what_would_run_unsealed_is_refused(payments, monkeypatch, client, named):
    monkeypatch.setenv(leaky_app.CLIENT_ENV, client)
    report = replay([refund_case()], leaky_app.build, timeout=60, allow_commands=[sys.executable])
    assert payments.seen == []
    assert named in refused(report)


def test_a_forkserver_from_before_a_replay_is_not_its_and_one_from_it_does_not_outlive_it(payments, monkeypatch):
    """One started before forks unsealed workers; one started during would stay sealed after: as a replay
    begins and ends, the next process comes from a new one, and a pool kept open goes on."""
    import multiprocessing
    import threading
    from concurrent.futures import ProcessPoolExecutor

    forkserver = multiprocessing.get_context("forkserver")
    with ProcessPoolExecutor(1, mp_context=forkserver) as pool:  # open across the replay, as an app's is
        assert pool.submit(abs, -1).result(timeout=30) == 1
        monkeypatch.setenv(leaky_app.CLIENT_ENV, "mp-forkserver")
        got: list[Report] = []
        done = threading.Thread(target=lambda: got.append(replay([refund_case()], leaky_app.build, timeout=90)))
        done.start()
        done.join(120)  # stopping that forkserver would wait for the pool's worker: forever
        assert got, "the replay hung"
        assert payments.seen == []
        assert f"connect to 127.0.0.1:{payments.port}" in refused(got[0])
        after = forkserver.Process(target=leaky_app.issue_refund, args=("A1001",))
        after.start()
        after.join(30)
        assert after.exitcode == 0 and len(payments.seen) == 1


@pytest.mark.parametrize("how", ["connect", "connect_ex", "sendto", "sendmsg", "bind"])
def test_a_name_given_to_connect_is_refused_before_its_lookup_leaves(how):
    """CPython looks a name given to ``connect`` (``connect_ex``, ``sendto``) up before it raises the event
    the seal checks: a name that did not resolve was never refused, and its DNS query had left."""
    import socket

    def build() -> Any:
        def agent(prompt: str) -> str:
            kind = socket.SOCK_DGRAM if how in ("sendto", "sendmsg") else socket.SOCK_STREAM
            with socket.socket(socket.AF_INET, kind) as sock:
                try:
                    if how == "sendto":
                        sock.sendto(b"refund", ("refunds.exfil.invalid", 53))
                    elif how == "sendmsg":
                        sock.sendmsg([b"refund"], [], 0, ("refunds.exfil.invalid", 53))
                    elif how == "bind":  # socket.create_server binds so: the name is looked up
                        sock.bind(("refunds.exfil.invalid", 0))
                    else:
                        getattr(sock, how)(("refunds.exfil.invalid", 443))
                except OSError as exc:
                    return f"failed: {type(exc).__name__}"
            return "sent"

        return agent

    (r,) = replay([refund_case()], build, timeout=30).results
    port = {"sendto": 53, "sendmsg": 53, "bind": 0}.get(how, 443)
    assert f"connect to refunds.exfil.invalid:{port}" in refused_detail(r)
    assert r.answer == "failed: Sealed"


@pytest.mark.skipif(not hasattr(socket, "AF_PACKET") or os.geteuid() != 0, reason="a raw packet socket needs root")
def test_a_raw_packet_socket_is_refused_as_it_is_made():
    """Bound to an interface, an ``AF_PACKET`` socket sends frames with ``send()``: no address, so no event
    the seal reads; it is refused as it is made."""

    def build() -> Any:
        def agent(prompt: str) -> str:
            try:
                with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as raw:
                    raw.bind(("lo", 0))
                    raw.send(b"\xff" * 12 + b"\x08\x00" + b"refund A1001")
            except OSError as exc:
                return f"failed: {type(exc).__name__}"
            return "sent"

        return agent

    (r,) = replay([refund_case()], build, timeout=30).results
    assert f"open a socket of family {int(socket.AF_PACKET)}: not a network the seal allows" in refused_detail(r)
    assert r.answer == "failed: Sealed"
    with socket.socket(socket.AF_PACKET, socket.SOCK_RAW):  # outside a replay, as ever
        pass


def test_a_refused_shell_line_says_what_would_allow_it():
    """With no command allowed, a shell line is refused as not allowed (its redirect is beside the point);
    with commands allowed, one that is not a plain command is refused as such."""

    def build() -> Any:
        def agent(prompt: str) -> str:
            try:
                subprocess.run("echo refund >> /dev/null", shell=True, check=False)
            except PermissionError:
                return "refused"
            return "ran"

        return agent

    (r,) = replay([refund_case()], build, timeout=30).results
    assert "start /bin/sh -c echo refund >> /dev/null" in refused_detail(r)
    assert "not in replay.allow_commands" in refused_detail(r)
    (r,) = replay([refund_case()], build, timeout=30, allow_commands=["echo refund"]).results
    assert "a shell line that is not one plain command (a ';', '|', '&', '$', backquote or redirection)" in (
        refused_detail(r)
    )
