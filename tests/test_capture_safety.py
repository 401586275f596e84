"""Adversarial tests of the production hook's guarantees.

``HarvestingSpanProcessor`` runs inside customers' processes, so it must never raise into the app,
never block it, bound its memory, count what it drops, redact before writing, honour its timeouts
and survive ``fork``. Each test attacks one of those. Deadlines here only stop a broken test from
hanging; no test asserts on speed.
"""

from __future__ import annotations

import gc
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace as otel
from opentelemetry.sdk.trace import TracerProvider

from harvester.intake import HarvestingSpanProcessor
from harvester.redact import Redactor
from harvester.store import TraceStore
from tests.builders.capture import FailingStore, agent_run, fork_child_capturing, setup, stored
from tests.builders.files import readable

ROOT = Path(__file__).resolve().parent.parent
DEADLINE = 20.0  # seconds; only so that a broken guarantee fails instead of hanging


def _within(fn: Any, *args: Any, **kw: Any) -> Any:
    """Run ``fn`` in a thread and fail (not hang) if it does not return by the deadline."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn(*args, **kw)
        except BaseException as exc:
            box["error"] = exc

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(DEADLINE)
    assert not t.is_alive(), f"{getattr(fn, '__name__', fn)} blocked"
    if "error" in box:
        raise box["error"]
    return box.get("value")


class _Raising:
    """Not a span: every attribute access raises."""

    def __getattr__(self, name: str) -> Any:
        raise RuntimeError(f"no {name}")


class _BadAttrs:
    """A span-like object whose ``attributes`` raise."""

    def __init__(self, good: Any) -> None:
        self._good = good

    @property
    def attributes(self) -> Any:
        raise RuntimeError("attributes exploded")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._good, name)


def test_on_end_with_garbage_never_raises_and_is_counted(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path)
    with tracer.start_as_current_span("real") as real:
        pass
    for junk in (None, 42, "span", object(), _Raising(), _BadAttrs(real)):
        proc.on_end(junk)  # type: ignore[arg-type]
        proc.on_start(junk)  # type: ignore[arg-type]
    agent_run(tracer, prompt="still works")
    assert proc.force_flush(10_000)
    st = proc.stats()
    assert st["dropped"].get("convert_error", 0) == 6
    assert [r.prompt for r in stored(path)] == ["still works"]
    proc.shutdown()


def test_on_end_from_many_threads_while_shutdown_runs(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path)
    start = threading.Barrier(9)
    errors: list[BaseException] = []

    def emit() -> None:
        start.wait()
        try:
            for _ in range(200):
                with tracer.start_as_current_span("x"):
                    pass
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=emit) for _ in range(8)]
    for t in threads:
        t.start()
    start.wait()
    _within(proc.shutdown, timeout_millis=10_000)
    for t in threads:
        t.join(DEADLINE)
    assert not errors
    st = proc.stats()
    # Every span is accounted for: processed, or dropped and counted, none left in limbo.
    assert st["queued"] == 0
    accounted = st["captured"] + st["dropped"].get("queue_full", 0) + st["dropped"].get("after_shutdown", 0)
    assert accounted == 1600, st


def test_on_end_after_shutdown_and_provider_shut_down_twice(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(proc)
    tracer = provider.get_tracer("t")
    agent_run(tracer, prompt="before")
    provider.shutdown()
    provider.shutdown()
    proc.shutdown()
    proc.on_end(None)  # type: ignore[arg-type]
    with TracerProvider(shutdown_on_exit=False).get_tracer("u").start_as_current_span("late") as late:
        pass
    proc.on_end(late)  # type: ignore[arg-type]  # after shutdown: dropped and counted, never an error
    assert proc.stats()["dropped"]["queue_full"] == 2
    assert proc.force_flush(0) is False
    assert [r.prompt for r in stored(path)] == ["before"]


def test_drop_counts_stay_exact_while_other_threads_read_them(tmp_path: Path) -> None:
    """Drops are counted on the app's threads without a lock; reading the counts (``stats()``, from
    several threads at once) neither loses an add nor counts itself."""
    proc, _, _ = setup(tmp_path)
    proc.shutdown()  # from now on every span that ends is dropped and counted
    with TracerProvider(shutdown_on_exit=False).get_tracer("u").start_as_current_span("late") as late:
        pass

    def end() -> None:
        for _ in range(500):
            proc.on_end(late)  # type: ignore[arg-type]

    def read() -> None:
        for _ in range(200):
            proc.stats()

    threads = [threading.Thread(target=fn) for fn in (end, read) * 4]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE)
    assert proc.stats()["dropped"]["queue_full"] == proc.stats()["dropped"]["queue_full"] == 2_000


def test_timeouts_of_any_shape(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path)
    agent_run(tracer)
    assert _within(proc.force_flush, None) is True  # the SDK's signature allows None
    assert _within(proc.force_flush, -5) in (True, False)
    assert _within(proc.force_flush, 0.5) in (True, False)
    _within(proc.shutdown, None)
    assert len(stored(path)) == 1


def test_a_span_ended_after_the_last_drain_is_counted(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path, capture_process=False)  # the worker thread's own
    proc._shutdown = True  # the worker's last iteration runs and ends ...
    proc._wake.set()
    proc._worker.join(DEADLINE)
    proc._queue.append(None)  # type: ignore[arg-type]  # ... then an on_end that read the flag too early appends
    proc._shutdown = False
    proc.shutdown()
    st = proc.stats()
    assert st["queued"] == 0 and st["dropped"] == {"after_shutdown": 1}


def _lock_store(path: str) -> sqlite3.Connection:
    """Another connection (as another process would) holding the write lock on the store."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=0)
    conn.execute("BEGIN EXCLUSIVE")
    return conn


def test_flush_and_shutdown_honour_timeouts_while_the_store_is_locked(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path, capture_process=False)  # the worker thread's own
    agent_run(tracer, prompt="stored first")
    assert proc.force_flush(10_000)
    lock = _lock_store(path)
    try:
        agent_run(tracer, prompt="waits for the lock")
        assert _within(proc.force_flush, timeout_millis=0) is False
        for _ in range(200):  # a serverless handler flushing at the end of every request
            assert _within(proc.force_flush, timeout_millis=1) is False
        assert len(proc._flush_waiters) <= 2  # timed-out waiters do not pile up
        st = _within(proc.stats)  # stats never wait for the store
        assert st["deferred"] == 2
        _within(proc.shutdown, timeout_millis=50)
        _within(proc.shutdown, timeout_millis=50)
    finally:
        lock.execute("ROLLBACK")
        lock.close()
    proc._worker.join(DEADLINE)
    assert sorted(r.prompt for r in stored(path)) == ["stored first", "waits for the lock"]


def test_disk_full_is_counted_and_the_worker_recovers(tmp_path: Path) -> None:
    store = FailingStore(tmp_path / "t.db")
    proc = HarvestingSpanProcessor(store)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(proc)
    tracer = provider.get_tracer("t")
    store.fail = OSError(28, "No space left on device")
    for i in range(3):
        agent_run(tracer, prompt=f"lost {i}")
    assert proc.force_flush(10_000)
    store.fail = sqlite3.OperationalError("disk I/O error")
    agent_run(tracer, prompt="lost 3")
    assert proc.force_flush(10_000)
    store.fail = None
    agent_run(tracer, prompt="kept")
    proc.shutdown()
    assert proc._worker.is_alive() is False
    assert proc.stats()["dropped"] == {"store_error_traces": 4}
    assert proc.stats()["lost_traces"] == 4  # in traces, as the whole runs stored are
    assert [r.prompt for r in TraceStore(tmp_path / "t.db").runs()] == ["kept"]
    store.close()


@pytest.mark.slow
def test_five_megabyte_attribute_is_stored_and_redacted(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path)
    secret = "sk-proj-AAAAbbbbCCCCddddEEEEffff"
    big = "x" * (5 * 1024 * 1024) + " " + secret
    agent_run(tracer, result=big, extra={"app.payload": big})
    proc.shutdown()
    (run,) = stored(path)
    assert len(run.calls[0].result) > 5 * 1024 * 1024 and secret not in run.calls[0].result
    raw = b"".join(readable(p) for p in tmp_path.iterdir() if p.name.startswith("t.db"))
    assert secret.encode() not in raw


@pytest.mark.slow
def test_trace_without_agent_spans_memory_plateaus(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path, max_queue=200_000)

    def burst(n: int) -> None:
        for _ in range(n):
            with tracer.start_as_current_span("GET /health"):
                pass
        assert proc.force_flush(DEADLINE * 1000)

    burst(10_000)
    gc.collect()
    tracemalloc.start()
    try:
        burst(20_000)
        gc.collect()
        first, _ = tracemalloc.get_traced_memory()
        burst(20_000)
        gc.collect()
        second, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    st = proc.stats()
    assert st["dropped"]["no_agent"] == 50_000 and st["open_traces"] == 0
    assert second - first < 2 * 1024 * 1024, (first, second)
    proc.shutdown()


def test_open_traces_are_bounded_by_count_and_age(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path, max_open_traces=50, max_trace_age_s=3600, capture_process=False)
    parents = [tracer.start_span(f"never ends {i}") for i in range(500)]
    for p in parents:
        with tracer.start_as_current_span("child", context=otel.set_span_in_context(p)):
            pass
    assert proc.force_flush(10_000)
    st = proc.stats()
    assert st["open_traces"] == 50 and st["dropped"]["too_many_open_traces"] == 450
    proc._assembler.max_age = 0  # the rest age out
    assert proc.force_flush(10_000)
    st = proc.stats()
    assert st["open_traces"] == 0 and st["dropped"]["trace_too_old"] == 50
    proc.shutdown()


def test_colliding_trace_id_from_another_run(tmp_path: Path) -> None:
    from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

    proc, tracer, path = setup(tmp_path)
    open_parent = tracer.start_span("long request")
    tid = open_parent.get_span_context().trace_id
    # Another process's run arrives under the same trace id, with a remote parent.
    remote = SpanContext(trace_id=tid, span_id=0x1234, is_remote=True, trace_flags=TraceFlags(1))
    agent_run(tracer, prompt="remote child", context=otel.set_span_in_context(NonRecordingSpan(remote)))
    agent_run(tracer, prompt="local child", context=otel.set_span_in_context(open_parent))
    assert proc.force_flush(10_000)
    assert [r.prompt for r in stored(path)] == ["remote child"]
    open_parent.end()
    proc.shutdown()
    assert sorted(r.prompt for r in stored(path)) == ["local child", "remote child"]


def test_keep_predicate_that_raises_anything_never_kills_the_worker(tmp_path: Path) -> None:
    def keep(run: Any) -> bool:
        if run.prompt == "exit":
            raise SystemExit(3)
        if run.prompt == "bool":

            class Bad:
                def __bool__(self) -> bool:
                    raise ValueError("no truth")

            return Bad()  # type: ignore[return-value]
        raise KeyError("x")

    proc, tracer, path = setup(tmp_path, keep=keep, defer_normalize=False)
    for prompt in ("exit", "bool", "plain"):
        agent_run(tracer, prompt=prompt)
        assert proc.force_flush(10_000)
    assert proc._worker.is_alive()
    agent_run(tracer, prompt="after")
    proc.shutdown()
    assert sorted(r.prompt for r in stored(path)) == ["after", "bool", "exit", "plain"]
    assert proc.stats()["keep_errors"] == 4


class _ExplodingRedactor(Redactor):
    def redact_data(self, data: Any, spans: Any) -> Any:
        if "explode" in (data.get("prompt") or ""):
            raise RuntimeError("redactor bug")
        return super().redact_data(data, spans)


def test_redactor_that_raises_loses_only_its_run_and_never_writes_it_unredacted(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path, redact=_ExplodingRedactor())
    secret = "sk-proj-AAAAbbbbCCCCddddEEEEffff"
    agent_run(tracer, prompt=f"explode {secret}")
    agent_run(tracer, prompt="good one")
    # an incomplete trace that explodes at shutdown must not cost the runs waiting beside it
    parent = tracer.start_span("never ends")
    agent_run(tracer, prompt=f"explode later {secret}", context=otel.set_span_in_context(parent))
    agent_run(tracer, prompt="good two")
    _within(proc.shutdown, timeout_millis=10_000)
    assert sorted(r.prompt for r in stored(path)) == ["good one", "good two"]
    st = proc.stats()
    assert st["dropped"].get("redact_error") == 2, st
    raw = b"".join(readable(p) for p in tmp_path.iterdir() if p.name.startswith("t.db"))
    assert secret.encode() not in raw


def test_force_flush_covers_every_span_ended_before_it(tmp_path: Path) -> None:
    """A flush that the worker was already doing must not answer a later force_flush."""
    proc, tracer, path = setup(tmp_path, capture_process=False)  # the worker thread's own
    inside, release = threading.Event(), threading.Event()
    original = proc.writer.flush
    calls = [0]

    def slow_flush(**kw: Any) -> int:
        calls[0] += 1
        if calls[0] == 1:
            inside.set()
            release.wait(DEADLINE)
        return original(**kw)

    proc.writer.flush = slow_flush  # type: ignore[method-assign]
    agent_run(tracer, prompt="first")
    first = threading.Thread(target=proc.force_flush, args=(10_000,))
    first.start()
    assert inside.wait(DEADLINE)  # the worker is flushing, its queue already drained
    agent_run(tracer, prompt="second")
    result: list[bool] = []
    second = threading.Thread(target=lambda: result.append(proc.force_flush(10_000)))
    second.start()
    time.sleep(0.05)  # let the second waiter register while the first flush is in progress
    release.set()
    first.join(DEADLINE)
    second.join(DEADLINE)
    assert result == [True]
    assert sorted(r.prompt for r in stored(path)) == ["first", "second"]
    proc.shutdown()


@pytest.mark.slow
def test_redaction_caches_are_bounded(tmp_path: Path) -> None:
    r = Redactor()
    for i in range(60_000):
        r.redact_text(f"mail user{i}@example.com about order {i}")
        r.redact_value({f"attr.{i}": f"v{i}", f"x.token.{i}": f"secret-{i}"})
    big = "k" * 100_000
    for i in range(200):
        r.pseudonym("secret", big + str(i))
    assert len(r._short) <= 20_000 and len(r._digests) <= 50_001 and len(r._secret_keys) <= 10_000
    assert sum(len(k) for k in r._digests) < 50 * 1024 * 1024 // 10  # big values are not kept


def test_fork_while_the_worker_is_inside_a_write(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path)
    agent_run(tracer, prompt="parent")
    assert proc.force_flush(10_000)
    store = proc.writer.store
    inside, release = threading.Event(), threading.Event()

    def block() -> int:
        inside.set()
        release.wait(DEADLINE)
        return 0

    store._conn.create_function("block", 0, block)  # type: ignore[union-attr]
    # The worker's write transaction: the store's locks and SQLite's write lock are held.
    writer = threading.Thread(target=store._write, args=("SELECT block()",))
    writer.start()
    assert inside.wait(DEADLINE)
    threading.Timer(0.2, release.set).start()  # the transaction ends while fork waits for it
    pid = fork_child_capturing(proc, tracer)
    writer.join(DEADLINE)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    agent_run(tracer, prompt="parent again")
    proc.shutdown()
    assert sorted(r.prompt for r in stored(path)) == ["child", "parent", "parent again"]
    with sqlite3.connect(path) as c:
        assert c.execute("PRAGMA integrity_check").fetchone() == ("ok",)


_EXIT_SCRIPT = """
import os, sys, time
sys.path.insert(0, {root!r})
from opentelemetry.sdk.trace import TracerProvider
from harvester.intake import HarvestingSpanProcessor
from tests.builders.capture import agent_run
proc = HarvestingSpanProcessor({path!r}, flush_interval_s=60, batch_size=10_000)
provider = TracerProvider()
provider.add_span_processor(proc)
tracer = provider.get_tracer("t")
{body}
"""


def _script(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    code = _EXIT_SCRIPT.format(root=str(ROOT), path=str(tmp_path / "t.db"), body=textwrap.dedent(body))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


@pytest.mark.slow
def test_interpreter_exit_flushes_the_pending_queue(tmp_path: Path) -> None:
    out = _script(
        tmp_path,
        """
        for i in range(50):
            agent_run(tracer, prompt=f"run {i}")
        provider.shutdown(); provider.shutdown()  # twice, then exit: atexit must cope too
    """,
    )
    assert out.returncode == 0, out.stderr
    out = _script(
        tmp_path / "b",
        """
        for i in range(50):
            agent_run(tracer, prompt=f"run {i}")
    """,
    )
    assert out.returncode == 0, out.stderr
    assert len(stored(str(tmp_path / "t.db"))) == 50
    assert len(stored(str(tmp_path / "b" / "t.db"))) == 50


@pytest.mark.slow
def test_fork_without_using_the_processor_in_the_child(tmp_path: Path) -> None:
    out = _script(
        tmp_path,
        """
        import gc
        agent_run(tracer, prompt="before")
        proc.force_flush()
        for i in range(3):
            pid = os.fork()
            if pid == 0:
                gc.collect()
                sys.exit(0)   # a normal exit: atexit and finalizers run in the child
            assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0
        agent_run(tracer, prompt="after")
        assert proc.force_flush(10_000)
        print(sorted(proc.stats().items()))
    """,
    )
    assert out.returncode == 0, out.stderr
    assert sorted(r.prompt for r in stored(str(tmp_path / "t.db"))) == ["after", "before"]
    with sqlite3.connect(tmp_path / "t.db") as c:
        assert c.execute("PRAGMA integrity_check").fetchone() == ("ok",)
