"""The production hook's bounds and degradations from issue #16, each attacked on its own.

Memory is bounded in bytes (not only in spans and traces), a junk flood evicts junk and never the
real runs, an unusable store is a logged degradation rather than an exception, and a value orjson
refuses is written in a best-effort form rather than losing its run.
"""

from __future__ import annotations

import gc
import os
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry import trace as otel
from opentelemetry.sdk.trace import TracerProvider

from harvester.intake import HarvestingSpanProcessor, IdleAssembler
from harvester.spans import SpanData, span_size
from harvester.store import TraceStore, spans_blob, spans_from_blob
from tests.builders.capture import agent_run, setup, stored

DEADLINE_MS = 20_000  # only so that a broken guarantee fails instead of hanging
KB20 = 20_000


def _open_root_with_children(tracer: Any, n: int, size: int, tag: str) -> Any:
    """A root that stays open (a chat session, a stream) with ``n`` ended children of ``size`` bytes each."""
    root = tracer.start_span(f"session {tag}")
    ctx = otel.set_span_in_context(root)
    for i in range(n):
        with tracer.start_as_current_span(
            "step", context=ctx, attributes={"app.payload": f"{tag}{i:06d}" * (size // 8)}
        ):
            pass
    return root


# -- 1. memory bounded in bytes ------------------------------------------------------------------
@pytest.mark.slow
def test_long_lived_roots_with_big_children_hold_a_bounded_number_of_bytes(tmp_path: Path) -> None:
    """Three open roots with 2,000 children of 20 KB each: 120 MB if every span is held."""
    proc, tracer, path = setup(tmp_path)
    gc.collect()
    tracemalloc.start()
    try:
        roots = [_open_root_with_children(tracer, 2_000, KB20, tag) for tag in "abc"]
        assert proc.force_flush(DEADLINE_MS)
        gc.collect()
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    st = proc.stats()
    assert held < 64 * 1024 * 1024, held
    assert st["open_bytes"] <= 3 * (16 << 20)
    assert st["dropped"]["trace_too_big"] > 0  # counted, in spans
    for r in roots:
        r.end()
    proc.shutdown()


def test_a_trace_over_its_byte_bound_writes_its_ended_runs_before_dropping_anything(tmp_path: Path) -> None:
    """Runs inside a long-lived root are written early when the root's bytes run out, never dropped."""
    proc, tracer, path = setup(tmp_path, max_bytes_per_trace=1 << 20)
    session = tracer.start_span("chat session")
    ctx = otel.set_span_in_context(session)
    for i in range(30):  # each run ~100 KB: thirty of them are three times the trace's bound
        agent_run(tracer, prompt=f"turn {i}", result="r" * 100_000, context=ctx)
    session.end()
    proc.shutdown()
    st = proc.stats()
    assert "trace_too_big" not in st["dropped"], st
    runs = stored(path)
    assert sorted(r.prompt for r in runs) == sorted(f"turn {i}" for i in range(30))
    assert all(r.trajectory() == ["kb_search"] for r in runs)


def test_over_the_open_bytes_bound_junk_traces_go_first(tmp_path: Path) -> None:
    """Five runs in progress (their agent spans still open) survive junk traces that overflow the bound."""
    proc, tracer, path = setup(tmp_path, max_open_bytes=4 << 20)
    agents = [
        tracer.start_span("invoke_agent support", attributes={"gen_ai.operation.name": "invoke_agent"})
        for _ in range(5)
    ]
    for i, a in enumerate(agents):
        ctx = otel.set_span_in_context(a)
        with tracer.start_as_current_span(
            "execute_tool kb_search",
            context=ctx,
            attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "kb_search", "app.i": i},
        ):
            pass
    assert proc.force_flush(DEADLINE_MS)
    junk = [_open_root_with_children(tracer, 20, KB20, f"j{i}") for i in range(30)]  # 12 MB of junk
    assert proc.force_flush(DEADLINE_MS)
    st = proc.stats()
    assert st["open_bytes"] <= 4 << 20 and st["dropped"]["too_many_open_bytes"] > 0
    for a in agents:
        a.end()
    proc.shutdown()
    assert proc._assembler.open_bytes == 0  # every byte counted in was counted out
    runs = stored(path)
    assert len(runs) == 5 and all(r.trajectory() == ["kb_search"] for r in runs)
    for j in junk:
        j.end()


def test_too_many_open_traces_evicts_junk_before_runs_in_progress(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path, max_open_traces=50)
    agents = [
        tracer.start_span("invoke_agent support", attributes={"gen_ai.operation.name": "invoke_agent"})
        for _ in range(5)
    ]
    for a in agents:
        with tracer.start_as_current_span(
            "execute_tool kb_search",
            context=otel.set_span_in_context(a),
            attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "kb_search"},
        ):
            pass
    assert proc.force_flush(DEADLINE_MS)
    junk = [_open_root_with_children(tracer, 1, 10, f"j{i}") for i in range(200)]
    assert proc.force_flush(DEADLINE_MS)
    assert proc.stats()["dropped"]["too_many_open_traces"] == 155
    for a in agents:
        a.end()
    proc.shutdown()
    runs = stored(path)
    assert len(runs) == 5 and all(r.trajectory() == ["kb_search"] for r in runs)
    for j in junk:
        j.end()


@pytest.mark.slow
def test_the_queue_is_bounded_in_bytes_while_the_worker_is_stuck(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path, max_queue_bytes=1 << 20, capture_process=False)  # the worker thread stuck
    entered, release = threading.Event(), threading.Event()
    original = proc._assembler.add

    def add(*a: Any) -> None:
        entered.set()
        release.wait(30)
        original(*a)

    proc._assembler.add = add  # type: ignore[method-assign]
    with tracer.start_as_current_span("first"):
        pass
    assert entered.wait(10)
    for i in range(200):  # 4 MB of spans
        with tracer.start_as_current_span("big", attributes={"app.payload": f"{i:08d}" * 2_500}):
            pass
    st = proc.stats()
    assert st["queued_bytes"] <= 1 << 20 and 0 < st["queued"] < 60
    assert st["dropped"]["queue_full"] == 200 - st["queued"]
    release.set()
    proc.shutdown()


def _junk_and_real(n_junk: int) -> tuple[list[SpanData], list[SpanData]]:
    real = [
        SpanData(f"{t:032x}", f"{t:016x}", None, "invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent"})
        for t in range(1, 6)
    ]
    junk = [SpanData(f"{t:032x}", f"{t:016x}", None, "GET /") for t in range(1_000, 1_000 + n_junk)]
    return real, junk


def test_receiver_junk_request_evicts_junk_not_the_real_runs() -> None:
    """One request of 10,001 one-span traces, while five real runs wait for their tool calls."""
    asm = IdleAssembler(idle_seconds=60)
    real, junk = _junk_and_real(10_001)
    assert asm.add(real) == []
    assert asm.add(junk) == []  # no real run completed early, without the tool calls still to come
    assert asm.dropped == {"evicted": 6} and asm.open_traces == 10_000
    assert all(s.trace_id in asm.open for s in real)


def test_receiver_open_traces_are_bounded_in_bytes() -> None:
    asm = IdleAssembler(idle_seconds=60, max_bytes=1 << 20)
    real, _ = _junk_and_real(0)
    asm.add(real)
    big = [
        SpanData(f"{t:032x}", f"{t:016x}", None, "GET /", attributes={"http.body": "x" * KB20}) for t in range(100, 200)
    ]
    asm.add(big)
    assert asm.open_bytes <= 1 << 20 and asm.dropped["evicted"] > 40
    assert all(s.trace_id in asm.open for s in real)
    assert asm.open_bytes == sum(span_size(s) for tr in asm.open.values() for s in tr.spans.values())


# -- 2. an unusable store ------------------------------------------------------------------------
def _unusable_paths(tmp_path: Path) -> list[Path]:
    a_dir = tmp_path / "a-directory.db"
    a_dir.mkdir()
    not_sqlite = tmp_path / "notes.db"
    not_sqlite.write_text("these are my notes, not a database\n" * 10)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    paths = [a_dir, not_sqlite, blocker / "t.db"]
    if os.path.isdir("/proc/self"):
        paths.append(Path("/proc/self/harvester/t.db"))  # a read-only filesystem, even for root
    return paths


def test_an_unusable_store_degrades_and_never_raises(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    for path in _unusable_paths(tmp_path):
        before = path.read_bytes() if path.is_file() else None
        proc = HarvestingSpanProcessor(path)  # the app starts
        provider = TracerProvider(shutdown_on_exit=False)
        provider.add_span_processor(proc)
        agent_run(provider.get_tracer("t"))
        assert proc.force_flush(DEADLINE_MS)
        st = proc.stats()
        assert str(path) in st["store_unusable"], st
        assert st["dropped"] == {"store_unusable": 4} and st["captured"] == 4
        provider.shutdown()
        assert before is None or path.read_bytes() == before  # never modified
    assert "capture is off" in caplog.text


# -- 3. values orjson refuses --------------------------------------------------------------------
@pytest.mark.parametrize("defer", [True, False])
def test_an_int_of_64_bits_or_more_never_loses_its_run(tmp_path: Path, defer: bool) -> None:
    proc, tracer, path = setup(tmp_path, defer_normalize=defer)
    agent_run(tracer, prompt="big ints", extra={"app.big": 2**64, "app.negative": -(2**70), "app.ok": 2**64 - 1})
    proc.shutdown()
    assert proc.stats()["dropped"] == {}
    (run,) = stored(path)
    assert run.prompt == "big ints"
    with TraceStore(path) as s:
        (agent,) = [sp for sp in s.spans(run.trace_id) if sp.name.startswith("invoke_agent")]
    assert agent.attributes["app.big"] == str(2**64) and agent.attributes["app.negative"] == str(-(2**70))
    assert agent.attributes["app.ok"] == 2**64 - 1  # what orjson can write is written as it is


def test_the_codec_writes_what_orjson_refuses_in_a_best_effort_form() -> None:
    deep: Any = "bottom"
    for _ in range(400):
        deep = [deep]
    span = SpanData("a" * 32, "b" * 16, None, "s", attributes={"deep": deep, "big": 10**30, "bad": "\udcff"})
    (back,) = spans_from_blob(spans_blob([span]))
    assert back.attributes["big"] == str(10**30) and back.attributes["bad"] == "?"
    assert "bottom" in orjson.dumps(back.attributes["deep"]).decode()


# -- 5. what a SIGTERM (Pool.terminate) loses ----------------------------------------------------
@pytest.mark.slow
def test_a_run_is_committed_within_one_flush_interval_of_its_end(tmp_path: Path) -> None:
    """A burst that wakes the worker early must not push the write of an earlier run past the interval.

    Before: the run was drained by the early wake but written one whole interval after it (up to two
    intervals after the run ended), so a process terminated in between lost it.
    """
    interval = 2.0
    proc, tracer, path = setup(tmp_path, flush_interval_s=interval, batch_size=64)
    assert proc.force_flush(DEADLINE_MS)  # the worker has just written: its timer starts now
    start = time.monotonic()
    time.sleep(0.1)
    agent_run(tracer, prompt="ended early")
    ended = time.monotonic()
    time.sleep(max(start + 0.9 * interval - time.monotonic(), 0))
    for _ in range(100):  # junk past batch_size: wakes the worker before its timer
        with tracer.start_as_current_span("GET /health"):
            pass
    time.sleep(max(ended + interval + 0.4 - time.monotonic(), 0))
    assert [r.prompt for r in stored(path)] == ["ended early"]
    proc.shutdown()


_POOL_APP = """
import multiprocessing, sys, time
sys.path.insert(0, {root!r})
from opentelemetry.sdk.trace import TracerProvider
from harvester.intake import HarvestingSpanProcessor
from tests.builders.capture import agent_run

provider = TracerProvider()
provider.add_span_processor(HarvestingSpanProcessor({store!r}, flush_interval_s=0.5))
tracer = provider.get_tracer("pool")

def task(i):
    agent_run(tracer, prompt=f"task {{i}}")
    return i

if __name__ == "__main__":
    multiprocessing.set_start_method("fork")
    with multiprocessing.Pool(2) as pool:   # leaves through terminate(): SIGTERM, no finalizer runs
        assert pool.map(task, range(20)) == list(range(20))
        time.sleep(0.5 + 0.5)   # one flush interval, and the time a write takes
"""


@pytest.mark.slow
def test_pool_terminate_loses_nothing_that_ended_a_flush_interval_earlier(tmp_path: Path) -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    script = tmp_path / "app.py"
    script.write_text(_POOL_APP.format(root=str(root), store=str(tmp_path / "t.db")))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert sorted(r.prompt for r in stored(str(tmp_path / "t.db"))) == sorted(f"task {i}" for i in range(20))
