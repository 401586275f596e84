"""Capture under a busy app (issue 32, item 4): the capture process, and a queue that drops whole traces.

By default the processor assembles, redacts and writes in a process of its own, fed span records by the
app's threads; a full queue refuses a span's whole trace, so no run is stored cut in two. Real SDK
``TracerProvider``, real processor, real child process and store.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from harvester import HarvestingSpanProcessor, seam
from harvester.model import Run
from harvester.store import TraceStore
from tests.builders.capture import agent_run, fork_child_capturing, setup, stored

DEADLINE_MS = 20_000  # only so that a broken guarantee fails instead of hanging
ROOT = Path(__file__).resolve().parent.parent


def _whole(run: Run) -> bool:
    return len(run.llm_calls) == 2 and run.trajectory() == ["kb_search"] and run.answer == "Yes."


def test_the_default_writes_from_a_process_of_its_own_and_a_flush_means_stored(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path)
    assert proc.capture_pid not in (None, os.getpid())
    for i in range(20):
        agent_run(tracer, prompt=f"run {i}")
    assert proc.force_flush(DEADLINE_MS)  # every run ended so far is stored: no shutdown needed
    assert sorted(r.prompt for r in stored(path)) == sorted(f"run {i}" for i in range(20))
    st = proc.stats()
    assert st["captured"] == 80 and st["deferred"] == 20 and st["traces_written"] == 20 and st["dropped"] == {}
    agent_run(tracer, prompt="last")
    proc.shutdown()
    assert len(stored(path)) == 21 and proc.stats()["lost_traces"] == 0
    assert "capture_process" not in proc.stats()  # told to stop: not an error


def test_secrets_are_redacted_by_the_capture_process_before_the_store(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path)
    key = "sk-proj-" + "Zq8" * 16
    agent_run(tracer, prompt=f"my key is {key}", result=f"stored {key}")
    proc.shutdown()
    assert key.encode() not in b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    (run,) = stored(path)
    assert key not in run.prompt


def test_a_keep_predicate_or_capture_process_false_capture_on_a_thread(tmp_path: Path) -> None:
    for i, kw in enumerate(({"keep": lambda run: True}, {"capture_process": False})):
        proc, tracer, path = setup(tmp_path / str(i), **kw)  # type: ignore[arg-type]
        assert proc.capture_pid is None
        agent_run(tracer)
        proc.shutdown()
        assert len(stored(path)) == 1


@pytest.mark.parametrize("in_process", [True, False], ids=["capture-process", "worker-thread"])
def test_a_full_queue_drops_whole_traces_and_the_losses_add_up(tmp_path: Path, in_process: bool) -> None:
    threads, runs = 8, 60
    proc, tracer, path = setup(tmp_path, max_queue=64, batch_size=16, capture_process=in_process)
    halfway = threading.Barrier(threads + 1)

    def produce(t: int) -> None:
        for i in range(runs):
            agent_run(tracer, prompt=f"t{t} run {i}")
            if i == runs // 10:
                halfway.wait()

    # Nothing leaves the queue for the first tenth: drops are certain, not left to timing.
    stall = proc._process._lock if proc._process is not None else proc._flush_lock
    workers = [threading.Thread(target=produce, args=(t,)) for t in range(threads)]
    with stall:
        for th in workers:
            th.start()
        halfway.wait()
    for th in workers:
        th.join()
    proc.shutdown()
    stored_runs = stored(path)
    st = proc.stats()
    assert st["dropped"]["queue_full"] > 0  # in traces
    assert all(r.incomplete is None and _whole(r) for r in stored_runs)  # whole, never cut by the queue
    assert len({r.prompt for r in stored_runs}) == len(stored_runs)
    assert st["lost_traces"] == st["dropped"]["queue_full"]
    assert len(stored_runs) + st["lost_traces"] == threads * runs


def test_the_capture_process_writes_what_it_holds_and_leaves_when_the_app_is_killed(tmp_path: Path) -> None:
    store = tmp_path / "t.db"
    code = (
        f"import sys, time; sys.path.insert(0, {str(ROOT)!r})\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from harvester.intake import HarvestingSpanProcessor\n"
        "from tests.builders.capture import agent_run\n"
        f"proc = HarvestingSpanProcessor({str(store)!r}, flush_interval_s=3600)\n"
        "provider = TracerProvider(); provider.add_span_processor(proc)\n"
        "tracer = provider.get_tracer('t')\n"
        "for i in range(5): agent_run(tracer, prompt=f'run {i}')\n"
        "proc._process.send(wait=10)\n"  # in the pipe: the app's kill -9 must not lose them
        "print(proc.capture_pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    app = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert app.stdout is not None
        child = int(app.stdout.readline())
        os.kill(app.pid, signal.SIGKILL)
        app.wait(30)
        deadline = time.monotonic() + 30
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child)
    finally:
        if app.poll() is None:
            app.kill()
    with TraceStore(str(store)) as s:
        assert sorted(r.prompt for r in s.runs()) == [f"run {i}" for i in range(5)]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"  # a zombie has left: only its exit code waits
    except FileNotFoundError:
        return False


def test_a_forked_app_captures_through_a_capture_process_of_its_own(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path)
    parent_child = proc.capture_pid
    agent_run(tracer, prompt="parent")
    pid = fork_child_capturing(proc, tracer)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
    assert proc.capture_pid == parent_child
    proc.shutdown()
    assert sorted(r.prompt for r in stored(path)) == ["child", "parent"]


def test_flush_and_shutdown_honour_timeouts_while_the_store_is_locked_and_nothing_is_lost(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path)
    agent_run(tracer, prompt="stored first")
    assert proc.force_flush(DEADLINE_MS)
    lock = sqlite3.connect(path, isolation_level=None)  # another process's writer, holding the store
    lock.execute("BEGIN IMMEDIATE")
    try:
        agent_run(tracer, prompt="waits for the lock")
        assert proc.force_flush(timeout_millis=50) is False
        for _ in range(100):  # a serverless handler flushing at the end of every request
            assert proc.force_flush(timeout_millis=1) is False
        proc.shutdown(timeout_millis=50)  # returns: the capture process finishes its write on its own
        child = proc.capture_pid
        assert child is not None and _alive(child)
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    deadline = time.monotonic() + 60
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sorted(r.prompt for r in stored(path)) == ["stored first", "waits for the lock"]


def test_a_replay_process_starts_no_capture_process(tmp_path):
    """A process that replays stores nothing, and a sealed replay refuses process starts: a processor
    built there (an app's tracing set up in its agent factory) keeps to the thread, starting no child."""
    before = seam.STATE.harness
    seam.STATE.harness = True
    try:
        processor = HarvestingSpanProcessor(str(tmp_path / "t.db"))
        assert processor.capture_pid is None
        processor.shutdown()
    finally:
        seam.STATE.harness = before


def test_an_app_embedded_in_a_server_binary_captures_on_a_thread(tmp_path: Path, monkeypatch) -> None:
    """Under uWSGI or mod_wsgi ``sys.executable`` can be the server's binary: run with ``-c`` it would
    start another server, so the processor keeps its thread, and still stores the run."""
    monkeypatch.setattr(sys, "executable", "/bin/sh")  # exists, and is no Python
    proc, tracer, path = setup(tmp_path)
    assert proc.capture_pid is None
    agent_run(tracer)
    proc.shutdown()
    assert len(stored(path)) == 1
