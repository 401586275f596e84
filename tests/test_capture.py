"""HarvestingSpanProcessor: grouping, completion, sampling, bounds, failures and fork safety."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry import trace as otel
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags

from harvester.intake import HarvestingSpanProcessor, RunWriter, sampled_in
from harvester.store import TraceStore
from tests.builders.capture import FailingStore, agent_run, fork_child_capturing, setup, stored
from tests.builders.files import readable


def test_captures_a_run(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path)
    tid = agent_run(tracer)
    assert proc.force_flush()
    (run,) = stored(path)
    assert run.trace_id == tid and run.trajectory() == ["kb_search"] and run.stop == "answered"
    with TraceStore(path) as s:
        assert len(s.spans(tid)) == 4
    st = proc.stats()  # kept whole (sample_rate 1.0): normalized by the read above, not by the worker
    assert st["captured"] == 4 and st["deferred"] == 1 and st["written"] == 0 and st["dropped"] == {}
    proc.shutdown()


def test_nested_agent_spans_are_one_run(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path)
    agent_run(tracer, kind="openllmetry_nested")
    proc.force_flush()
    assert len(stored(path)) == 1
    proc.shutdown()


def test_sibling_runs_under_a_request_span(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path)
    with tracer.start_as_current_span("POST /chat") as req:
        ctx = otel.set_span_in_context(req)
        agent_run(tracer, context=ctx, prompt="first")
        agent_run(tracer, context=ctx, prompt="second")
        proc.force_flush()
        assert stored(path) == []  # the request is still open: its runs may not be done
    proc.force_flush()
    runs = stored(path)
    assert sorted(r.prompt for r in runs) == ["first", "second"]
    with TraceStore(path) as s:
        assert len(s.spans(runs[0].trace_id)) == 9  # each span once, the request span included
    proc.shutdown()


def test_remote_parent_completes_without_waiting(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path)
    remote = SpanContext(trace_id=0xABC, span_id=0xDEF, is_remote=True, trace_flags=TraceFlags(1))
    agent_run(tracer, context=otel.set_span_in_context(NonRecordingSpan(remote)))
    proc.force_flush()
    assert len(stored(path)) == 1
    proc.shutdown()


def test_parent_that_never_ends_is_written_by_age_and_at_shutdown(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path, max_trace_age_s=0)
    parent = tracer.start_span("never ends")
    agent_run(tracer, context=otel.set_span_in_context(parent))
    proc.force_flush()
    assert len(stored(path)) == 1 and proc.stats()["incomplete_written"] == 1
    proc.shutdown()
    proc2, tracer2, path2 = setup(tmp_path / "b")
    parent = tracer2.start_span("never ends")
    agent_run(tracer2, context=otel.set_span_in_context(parent))
    proc2.force_flush()
    assert stored(path2) == []
    proc2.shutdown()
    assert len(stored(path2)) == 1


def test_trace_without_agent_is_dropped_and_counted(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path)
    with tracer.start_as_current_span("GET /health"):
        with tracer.start_as_current_span("db"):
            pass
    proc.force_flush()
    assert stored(path) == [] and proc.stats()["dropped"] == {"no_agent": 1}
    proc.shutdown()


def test_sampling_keeps_failures_and_flagged_runs(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path, sample_rate=0.0, keep=lambda r: r.prompt == "flag me")
    agent_run(tracer)
    agent_run(tracer, tool_error=TimeoutError("orders-db timeout"))
    agent_run(tracer, prompt="flag me")
    agent_run(tracer, extra={"harvester.feedback": "negative"})
    proc.force_flush()
    runs = stored(path)
    assert len(runs) == 3 and proc.stats()["sampled_out"] == 1
    proc.shutdown()


def test_sample_rate_is_deterministic_by_trace_id() -> None:
    ids = [f"{i * 0x9E3779B97F4A7C15 % (1 << 128):032x}" for i in range(2000)]
    kept = [t for t in ids if sampled_in(t, 0.25)]
    assert 350 < len(kept) < 650
    assert kept == [t for t in ids if sampled_in(t, 0.25)]
    assert all(sampled_in(t, 1.0) for t in ids) and not any(sampled_in(t, 0.0) for t in ids)
    with pytest.raises(ValueError):
        RunWriter(None, sample_rate=2)


def test_keep_predicate_that_raises_does_not_lose_runs(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path, keep=lambda r: 1 / 0, defer_normalize=False)
    agent_run(tracer)
    proc.force_flush()
    assert len(stored(path)) == 1 and proc.stats()["keep_errors"] == 1
    proc.shutdown()


def test_no_secret_reaches_the_store_file(tmp_path: Path) -> None:
    secrets = [
        "sk-proj-AAAAbbbbCCCCddddEEEEffff",
        "bob.secret@example.com",
        "4111 1111 1111 1111",
        "ghp_ZZZZyyyyXXXXwwwwVVVVuuuu1234",
        "hunter2pass",
        "AKIAIOSFODNN7EXAMPLE",
    ]
    proc, tracer, path = setup(tmp_path, redact={"fields": {"kb_search": ["args.ssn"]}})
    agent_run(
        tracer,
        prompt=f"my key is {secrets[0]}, mail {secrets[1]}",
        args=orjson.dumps({"query": "x", "card": secrets[2], "ssn": "999-88-7777"}).decode(),
        result=f"token for you: {secrets[3]}",
        answer=f"db at https://admin:{secrets[4]}@db.local",
    )
    agent_run(tracer, tool_error=RuntimeError(f"auth failed for {secrets[5]}"))
    proc.shutdown()
    raw = b"".join(readable(p) for p in tmp_path.iterdir() if p.name.startswith("t.db"))  # rows inflated
    assert raw.count(b"<email:") >= 1
    for secret in secrets + ["999-88-7777"]:
        assert secret.encode() not in raw, secret


def test_secrets_found_by_key_leave_the_raw_spans_too(tmp_path: Path) -> None:
    """A secret known only by its key ("cookie") or stored as a JSON number (a card) was once hidden in
    the run but written in clear in the raw span's JSON attribute; the args must also stay an object."""
    proc, tracer, path = setup(tmp_path)
    args = {"query": "x", "cookie": "sessionid=q8Zr55Lk", "authorization": "tok9Kx77Qw", "card": 4111111111111111}
    tid = agent_run(tracer, args=orjson.dumps(args).decode())
    proc.shutdown()
    raw = b"".join(readable(p) for p in tmp_path.iterdir() if p.name.startswith("t.db"))  # rows inflated
    for secret in (b"q8Zr55Lk", b"tok9Kx77Qw", b"4111111111111111"):
        assert secret not in raw, secret
    (run,) = stored(path)
    assert run.calls[0].args["query"] == "x" and run.calls[0].args["cookie"].startswith("<secret:")
    assert run.calls[0].args["card"].startswith("<card:")
    with TraceStore(path) as s:
        (tool,) = [sp for sp in s.spans(tid) if sp.name.startswith("execute_tool")]
    assert orjson.loads(tool.attributes["gen_ai.tool.call.arguments"]) == run.calls[0].args


def test_redaction_off(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path, redact=False)
    agent_run(tracer, prompt="mail bob@example.com")
    proc.force_flush()
    assert stored(path)[0].prompt == "mail bob@example.com"
    proc.shutdown()


def test_bad_input(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path)
    big = "r" * (5 * 1024 * 1024)
    agent_run(tracer, result=big)
    agent_run(tracer, args="{not json", result="also {not json")
    agent_run(tracer, result="caf\udce9 \x00 bin \udcff", extra={"app.blob": b"\xff\xfe raw", "app.text": "x\udcfe"})
    agent_run(tracer, extra={"gen_ai.agent.name": 42, "gen_ai.usage.input_tokens": "many"})
    proc.force_flush()
    runs = stored(path)
    assert len(runs) == 4
    assert any(r.calls and r.calls[0].result == big for r in runs)
    assert proc.stats()["dropped"] == {}
    proc.shutdown()


@pytest.mark.slow
def test_ten_thousand_spans_in_one_trace(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path, max_queue=20_000)
    with tracer.start_as_current_span("invoke_agent big", attributes={"gen_ai.operation.name": "invoke_agent"}):
        for _i in range(9_999):
            with tracer.start_as_current_span("step"):
                pass
    proc.force_flush()
    assert len(stored(path)) == 1
    with TraceStore(path) as s:
        assert len(s.spans(stored(path)[0].trace_id)) == 10_000
    proc.shutdown()


def test_too_big_and_too_many_traces_are_bounded(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path, max_spans_per_trace=5, max_open_traces=2)
    with tracer.start_as_current_span("invoke_agent big", attributes={"gen_ai.operation.name": "invoke_agent"}):
        for _i in range(20):
            with tracer.start_as_current_span("step"):
                pass
    opened = [tracer.start_span(f"open {i}") for i in range(3)]
    for sp in opened:
        with tracer.start_as_current_span("child", context=otel.set_span_in_context(sp)):
            pass
    proc.force_flush()
    st = proc.stats()
    assert len(stored(path)) == 1  # the agent span is kept even over the limit
    assert st["dropped"]["trace_too_big"] == 15 and st["dropped"]["too_many_open_traces"] == 1
    proc.shutdown()


class _Blocker:
    """Makes the worker wait inside the store write until released."""

    def __init__(self, proc: HarvestingSpanProcessor) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        original = proc._assembler.add

        def add(*a: Any) -> None:
            self.entered.set()
            self.release.wait(30)
            original(*a)

        proc._assembler.add = add  # type: ignore[method-assign]


def test_queue_full_drops_and_counts(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path, max_queue=5, batch_size=1, capture_process=False)
    blocker = _Blocker(proc)
    with tracer.start_as_current_span("first"):
        pass
    assert blocker.entered.wait(10)
    for _i in range(20):
        with tracer.start_as_current_span("x"):
            pass
    st = proc.stats()
    assert st["dropped"]["queue_full"] == 15 and st["queued"] == 5
    blocker.release.set()
    proc.shutdown()
    assert proc.stats()["captured"] == 6


def test_shutdown_is_idempotent_and_honours_its_timeout(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path, batch_size=1, capture_process=False)
    blocker = _Blocker(proc)
    with tracer.start_as_current_span("first"):
        pass
    assert blocker.entered.wait(10)
    proc.shutdown(timeout_millis=50)  # returns although the worker is stuck
    proc.shutdown()
    assert not proc.force_flush()
    with tracer.start_as_current_span("after"):
        pass  # on_end after shutdown is a no-op, never an error
    blocker.release.set()
    proc._worker.join(10)
    assert not proc._worker.is_alive()


def test_store_errors_never_reach_the_app(tmp_path: Path) -> None:
    store = FailingStore(tmp_path / "t.db")
    proc = HarvestingSpanProcessor(store)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(proc)
    tracer = provider.get_tracer("t")
    agent_run(tracer, prompt="kept")
    proc.force_flush()
    store.fail = OSError("disk full")
    agent_run(tracer, prompt="lost")
    proc.force_flush()
    store.fail = None
    agent_run(tracer, prompt="kept too")
    proc.shutdown()
    assert proc.stats()["dropped"] == {"store_error_traces": 1}
    assert proc.stats()["lost_traces"] == 1  # whole runs stored (2) + lost traces (1) == traces produced (3)
    with TraceStore(tmp_path / "t.db") as s:
        assert sorted(r.prompt for r in s.runs()) == ["kept", "kept too"]
    store.close()


def test_fork_child_captures_on_its_own(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path)
    agent_run(tracer, prompt="parent")
    proc.force_flush()
    pid = fork_child_capturing(proc, tracer)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    agent_run(tracer, prompt="parent again")
    proc.shutdown()
    assert sorted(r.prompt for r in stored(path)) == ["child", "parent", "parent again"]


def test_capture_import_stays_light() -> None:
    """The hook handles runs as plain dicts (RunData): no pydantic, no model, no CLI (bench/capture.py (d)
    times the import against the SDK's own)."""
    heavy = [
        "click",
        "pydantic",
        "harvester.model._run",
        "harvester.case",
        "harvester.harvest",
        "harvester.fixtures",
        "harvester.replay",
        "harvester.report",
        "harvester.cli",
        "harvester.config",
    ]
    code = (
        "import sys; from harvester import HarvestingSpanProcessor; "
        f"bad = [m for m in {heavy!r} if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def _pool_child_run() -> str:
    """In a multiprocessing worker: one agent run through the parent's processor, no flush."""
    return agent_run(otel.get_tracer_provider().get_tracer("child"), prompt="from a pool worker")


def test_a_multiprocessing_child_writes_its_runs_before_it_exits(tmp_path: Path) -> None:
    """Pool workers leave through os._exit: atexit never runs there; multiprocessing's finalizers do."""
    import multiprocessing

    from opentelemetry.trace import _TRACER_PROVIDER_SET_ONCE

    path = str(tmp_path / "t.db")
    proc = HarvestingSpanProcessor(path, flush_interval_s=3600)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(proc)
    saved = (otel._TRACER_PROVIDER, _TRACER_PROVIDER_SET_ONCE._done)
    otel._TRACER_PROVIDER, _TRACER_PROVIDER_SET_ONCE._done = provider, True
    try:
        pool = multiprocessing.get_context("fork").Pool(1)
        tid = pool.apply(_pool_child_run)
        pool.close()
        pool.join()
    finally:
        otel._TRACER_PROVIDER, _TRACER_PROVIDER_SET_ONCE._done = saved
    proc.shutdown()
    assert [(r.trace_id, r.prompt) for r in stored(path)] == [(tid, "from a pool worker")]


_LATE_MULTIPROCESSING = """
import sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from harvester import HarvestingSpanProcessor, TraceStore

assert __name__ != "__main__" or "multiprocessing" not in sys.modules  # the hook did not load it
provider = TracerProvider(shutdown_on_exit=False)
provider.add_span_processor(HarvestingSpanProcessor(sys.argv[1], flush_interval_s=3600))
trace.set_tracer_provider(provider)


def child(method):
    tracer = trace.get_tracer("child")
    with tracer.start_as_current_span("invoke_agent support", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support"}):
        with tracer.start_as_current_span("chat m", attributes={
                "gen_ai.operation.name": "chat", "gen_ai.output.messages":
                '[{"role": "assistant", "parts": [{"type": "text", "content": "from ' + method + '"}]}]'}):
            pass
    return method


if __name__ == "__main__":
    import multiprocessing  # only now, after the processor

    for method in ("fork", "spawn"):
        with multiprocessing.get_context(method).Pool(1) as pool:
            assert pool.apply(child, (method,)) == method
            pool.close()
            pool.join()
    # The parent's processor never flushed; the children's own exit hooks wrote their runs.
    print(sorted(r.answer for r in TraceStore(sys.argv[1]).runs()))
"""


@pytest.mark.slow
def test_pool_children_write_their_runs_when_multiprocessing_comes_after_the_processor(tmp_path: Path) -> None:
    """The hook does not import multiprocessing; a fork child of a processor made before it was imported,
    and a spawned child that builds its own, still shut down in multiprocessing's exit hooks."""
    script = tmp_path / "late_mp.py"
    script.write_text(_LATE_MULTIPROCESSING)
    out = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "t.db")], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['from fork', 'from spawn']"


@pytest.mark.slow
def test_a_long_session_writes_its_ended_runs_and_never_cuts_one_in_progress(tmp_path: Path) -> None:
    """Runs inside a root that stays open (a chat session): once the trace is older than max_trace_age_s,
    the runs whose agent spans ended are written (a crash no longer loses them), and a run still going
    keeps every span that already ended; when the session ends, the trace's runs are read whole."""
    proc, tracer, path = setup(tmp_path, max_trace_age_s=0.5, flush_interval_s=0.05)
    session = tracer.start_span("chat session")
    ctx = otel.set_span_in_context(session)
    first = agent_run(tracer, prompt="first question", context=ctx)
    second = tracer.start_span(
        "invoke_agent support",
        context=ctx,
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "support"},
    )
    inner = otel.set_span_in_context(second)
    with tracer.start_as_current_span(
        "chat m",
        context=inner,
        attributes={
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "m",
            "gen_ai.usage.input_tokens": 10,
            "gen_ai.input.messages": orjson.dumps(
                [{"role": "user", "parts": [{"type": "text", "content": "second question"}]}]
            ).decode(),
            "gen_ai.output.messages": orjson.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": "second answer"}]}]
            ).decode(),
        },
    ):
        pass
    deadline = time.monotonic() + 10
    while not stored(path) and time.monotonic() < deadline:  # the session is busy and old: run 1 goes
        with tracer.start_as_current_span("heartbeat", context=ctx):
            pass
        time.sleep(0.05)
    assert [r.prompt for r in stored(path)] == ["first question"]
    second.set_attribute("final_result", "second answer")
    second.end()
    session.end()
    assert proc.force_flush(10_000)
    runs = {r.prompt: r for r in stored(path)}
    assert sorted(runs) == ["first question", "second question"] and first == runs["first question"].trace_id
    assert runs["second question"].answer == "second answer" and len(runs["second question"].llm_calls) == 1
    proc.shutdown()


def test_a_shutdown_at_interpreter_exit_waits_at_most_five_seconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK's exit hook calls shutdown() with its 30 s default (when the processor was made before the
    provider, that hook runs first): at exit, a locked store must not hold the process that long."""
    import harvester.intake._processor as capture_module

    proc, _, _ = setup(tmp_path)
    waited: list[float] = []
    real = proc._worker
    monkeypatch.setattr(
        proc,
        "_worker",
        type(
            "W",
            (),
            {"join": lambda self, t: (waited.append(t), real.join(t)), "is_alive": lambda self: real.is_alive()},
        )(),
    )
    monkeypatch.setattr(capture_module, "_exiting", lambda: True)
    proc.shutdown()
    assert waited == [5.0]


def test_the_sdk_exit_hook_finds_the_interpreter_exiting(tmp_path: Path) -> None:
    """At a real exit: a provider made after the processor shuts it down first (atexit runs last in,
    first out) with the SDK's 30 s default, and the processor already knows the interpreter is exiting."""
    code = f"""
from opentelemetry.sdk.trace import TracerProvider
from harvester.intake import HarvestingSpanProcessor
proc = HarvestingSpanProcessor({str(tmp_path / "t.db")!r})
TracerProvider().add_span_processor(proc)
real = proc._worker
class Worker:
    def join(self, timeout):
        print("join", timeout)
        real.join(timeout)
    def is_alive(self):
        return real.is_alive()
proc._worker = Worker()
print("running")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["running", "join", "5.0"], out.stdout + out.stderr
