"""The live-call guard: what gets past the adapters still cannot run unnoticed, and what is counted where.

Each agent here does something a careless app does: calls a tool from a thread the case's context
never reaches, runs a tool body in a helper of its own that emits a tool span, hangs after a forbidden
call. Each tool body counts its real runs in ``shop.LIVE``.
"""

from __future__ import annotations

import asyncio
import queue
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

import orjson
import pytest
from opentelemetry import trace

import harvester
from harvester.canonical import fixture_key
from harvester.case import AgentCase
from harvester.errors import LiveToolCall
from harvester.replay import replay
from harvester.report import evaluate_gates
from tests.apps import shop

REFUND = {"order_id": "A1001", "amount": 40.0}
LOOKUP = {"order_id": "A1001"}


def case(**fields: Any) -> AgentCase:
    return AgentCase.model_validate(
        {
            "id": "guard",
            "status": "accepted",
            "prompt": shop.PROMPT,
            "why": "no refunds on a question",
            "forbidden_tools": ["issue_refund"],
            "checks": [{"check": "answered"}],
            "fixtures": [
                {
                    "key": fixture_key("get_order", LOOKUP),
                    "tool": "get_order",
                    "args": LOOKUP,
                    "result": shop.ORDERS["A1001"],
                }
            ],
            "recorded": {"trajectory": ["get_order"], "stop": "answered"},
            **fields,
        }
    )


@pytest.fixture(autouse=True)
def _live() -> None:
    shop.LIVE.clear()


# -- a thread the context never reaches -------------------------------------------------------------
_jobs: queue.Queue[tuple[Any, dict[str, Any], queue.Queue[Any]]] = queue.Queue()


def _worker() -> None:
    """A long-lived worker thread, started before any replay, fed through a queue (no context travels)."""
    while True:
        fn, kwargs, out = _jobs.get()
        try:
            out.put(fn(**kwargs))
        except Exception as exc:
            out.put(exc)


threading.Thread(target=_worker, name="app-worker", daemon=True).start()
refund_tool = harvester.tool(shop.issue_refund)


def test_a_tool_called_from_a_thread_the_context_never_reaches_is_refused() -> None:
    def build():
        def agent(prompt: str) -> str:
            with harvester.agent_run("support_agent", prompt) as run:
                run.model_call("m", tool_calls=[{"name": "issue_refund", "arguments": REFUND}])
                out: queue.Queue[Any] = queue.Queue()
                _jobs.put((refund_tool, REFUND, out))
                result = out.get(timeout=5)
                answer = f"refund: {result}"
                run.finish(answer)
                return answer

        return agent

    report = replay([case()], build)
    (r,) = report.results
    assert not shop.LIVE, "the refund ran for real"
    assert not r.passed and r.unauthorised == 1
    (check,) = [c for c in r.checks if c.name == "live_tool_call"]
    assert check.detail.startswith('issue_refund({"amount":40,"order_id":"A1001"}) was called outside its case')
    assert report.refused == 1 and report.metrics()["live_tool_calls"] == 1  # counted once, in the report
    assert "gate live_tool_calls<=0: FAIL (1)" in evaluate_gates(report).lines()
    assert "refused 1 call made outside any case: issue_refund(" in report.summary()


def test_outside_a_replay_the_same_thread_runs_the_tool() -> None:
    out: queue.Queue[Any] = queue.Queue()
    _jobs.put((refund_tool, REFUND, out))
    assert out.get(timeout=5) == "refunded 40.00 on A1001" and shop.LIVE["issue_refund"] == 1


# -- a helper of the app's own that runs a tool body and emits its span ----------------------------------
def _refund_helper(order_id: str, amount: float) -> str:
    """Not decorated, not a framework tool: only the span it emits can tell a replay it ran."""
    attrs = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "issue_refund",
        "gen_ai.tool.call.arguments": orjson.dumps({"order_id": order_id, "amount": amount}).decode(),
    }
    with trace.get_tracer("myapp").start_as_current_span("execute_tool issue_refund", attributes=attrs) as span:
        result = shop.issue_refund(order_id, amount)
        span.set_attribute("gen_ai.tool.call.result", result)
        return result


def test_a_tool_body_that_ran_outside_the_executor_fails_its_case_and_counts_if_forbidden() -> None:
    def build():
        def agent(prompt: str) -> str:
            with harvester.agent_run("support_agent", prompt) as run:
                run.model_call("m", tool_calls=[{"name": "issue_refund", "arguments": REFUND}])
                _refund_helper(**REFUND)
                run.finish("Refunded.")
                return "Refunded."

        return agent

    (r,) = replay([case()], build).results
    assert shop.LIVE["issue_refund"] == 1  # it did run: nothing could stop a helper harvester never sees
    assert not r.passed and r.live_calls == 1 and r.unauthorised == 1
    (check,) = [c for c in r.checks if c.name == "live_tool_call"]
    assert check.detail == (
        'issue_refund({"amount":40,"order_id":"A1001"}) ran for real: a tool span the executor never served'
    )


def test_calls_the_executor_served_are_not_live() -> None:
    get_order = harvester.tool(shop.get_order)

    def build():
        def agent(prompt: str) -> str:
            with harvester.agent_run("support_agent", prompt) as run:
                run.model_call("m", tool_calls=[{"name": "get_order", "arguments": LOOKUP}])
                order = get_order(**LOOKUP)
                run.finish(f"A1001 is {order['status']}.")
                return run.answer or ""

        return agent

    (r,) = replay([case()], build).results
    assert r.passed and r.live_calls == 0 and not shop.LIVE, r.reasons()


# -- counted from the executor's log ------------------------------------------------------------------
@pytest.mark.slow
def test_a_forbidden_call_before_the_timeout_still_counts() -> None:
    def build(tools):
        def agent(prompt: str) -> str:
            tools.execute("issue_refund", REFUND)
            time.sleep(3)  # hangs past the timeout: no run comes back
            return "late"

        return agent

    (r,) = replay([case()], build, timeout=0.2).results
    assert r.error == "ReplayTimeout: agent did not finish within 0.2s"
    assert r.unauthorised == 1 and not shop.LIVE


# -- timeouts named truly -------------------------------------------------------------------------------
def _failing_lookup_case() -> AgentCase:
    return case(
        fixtures=[
            {
                "key": fixture_key("get_order", LOOKUP),
                "tool": "get_order",
                "args": LOOKUP,
                "error": {"type": "TimeoutError", "message": "orders-db did not answer"},
            }
        ]
    )


def test_a_tools_timeout_error_is_reported_as_itself() -> None:
    get_order = harvester.tool(shop.get_order)

    def sync_build():
        return lambda prompt: str(get_order(**LOOKUP))

    def async_build():
        async def agent(prompt: str) -> str:
            await asyncio.sleep(0)
            return str(get_order(**LOOKUP))

        return agent

    for build in (sync_build, async_build):
        (r,) = replay([_failing_lookup_case()], build, timeout=5).results
        assert r.error == "TimeoutError: orders-db did not answer", r.error


def test_an_async_agents_own_asyncio_timeout_is_reported_as_itself() -> None:
    def build():
        async def agent(prompt: str) -> str:
            await asyncio.wait_for(asyncio.sleep(1), 0.01)  # the agent's own deadline on its model call
            return "never"

        return agent

    (r,) = replay([case()], build, timeout=5).results
    assert r.error is not None and r.error.startswith("TimeoutError") and "did not finish" not in r.error


# -- a framework the agent imports only when it runs --------------------------------------------------
LAZY = textwrap.dedent("""
    import sys
    from harvester.canonical import fixture_key
    from harvester.case import AgentCase
    from harvester.replay import replay

    ran = []

    def build():
        def agent(prompt):
            from pydantic_ai import Agent  # the first import of the framework in this process
            from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
            from pydantic_ai.models.function import FunctionModel

            def get_order(order_id: str) -> str:
                ran.append(order_id)
                return "live"

            def respond(messages, info):
                if any(isinstance(p, ToolReturnPart) for m in messages if isinstance(m, ModelRequest) for p in m.parts):
                    return ModelResponse(parts=[TextPart("done")])
                return ModelResponse(parts=[ToolCallPart("get_order", {"order_id": "A1001"}, "c1")])

            return Agent(FunctionModel(respond), tools=[get_order]).run_sync(prompt).output
        return agent

    assert "pydantic_ai" not in sys.modules
    args = {"order_id": "A1001"}
    spec = AgentCase.model_validate({"id": "lazy", "status": "accepted", "prompt": "p", "why": "w",
        "fixtures": [{"key": fixture_key("get_order", args), "tool": "get_order", "args": args, "result": "F"}]})
    (r,) = replay([spec], build).results
    print(r.passed, r.tool_calls, ran)
""")


@pytest.mark.slow
def test_a_framework_first_imported_inside_the_agents_run_is_guarded_before_it_dispatches() -> None:
    out = subprocess.run([sys.executable, "-c", LAZY], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "1", "[]"]


def test_threads_carry_each_cases_executor_and_no_other() -> None:
    from concurrent.futures import ThreadPoolExecutor

    get_order = harvester.tool(shop.get_order)
    shared_pool = ThreadPoolExecutor(max_workers=2)  # made before the replay, shared by every case

    def build():
        def agent(prompt: str) -> str:
            with ThreadPoolExecutor(max_workers=1) as own:
                mine = own.submit(get_order, **LOOKUP).result()["status"]
            theirs = shared_pool.submit(get_order, **LOOKUP).result()["status"]
            box: list[str] = []
            t = threading.Thread(target=lambda: box.append(get_order(**LOOKUP)["status"]))
            t.start()
            t.join()
            return f"{mine} {theirs} {box[0]}"

        return agent

    specs = [
        case(
            id=f"c{i}",
            fixtures=[
                {
                    "key": fixture_key("get_order", LOOKUP),
                    "tool": "get_order",
                    "args": LOOKUP,
                    "result": {"status": f"S{i}"},
                }
            ],
        )
        for i in range(8)
    ]
    report = replay(specs, build, concurrency=8)
    assert [r.answer for r in report.results] == [f"S{i} S{i} S{i}" for i in range(8)]
    assert not shop.LIVE and all(r.live_calls == 0 for r in report.results)
    shared_pool.shutdown()


# -- threads that outlive their case, timers, process pools ------------------------------------------
def test_a_timer_starts_in_its_cases_context() -> None:
    get_order = harvester.tool(shop.get_order)

    def build():
        def agent(prompt: str) -> str:
            box: list[Any] = []
            timer = threading.Timer(0.01, lambda: box.append(get_order(**LOOKUP)["status"]))
            timer.start()
            timer.join()
            return f"A1001 is {box[0]}"

        return agent

    (r,) = replay([case()], build).results
    assert r.passed and r.answer == "A1001 is delivered" and r.tool_calls == 1 and not shop.LIVE, r.reasons()


def test_a_worker_a_case_started_cannot_serve_the_next_case_from_its_fixtures() -> None:
    """A worker thread started lazily inside case A keeps A's context; B's forbidden call sent through it is
    refused (A's executor closed with A), not answered from A's fixtures as if it were A's call."""
    jobs: queue.Queue[Any] = queue.Queue()
    started: list[threading.Thread] = []
    refund = harvester.tool(shop.issue_refund)

    def worker() -> None:
        while True:
            fn, kwargs, out = jobs.get()
            try:
                out.put(fn(**kwargs))
            except Exception as exc:
                out.put(exc)

    def build():
        def agent(prompt: str) -> str:
            if not started:
                started.append(threading.Thread(target=worker, daemon=True))
                started[0].start()
            out: queue.Queue[Any] = queue.Queue()
            jobs.put((refund, REFUND, out))
            return str(out.get(timeout=5))

        return agent

    first = case(
        id="a",
        fixtures=[
            {
                "key": fixture_key("issue_refund", REFUND),
                "tool": "issue_refund",
                "args": REFUND,
                "result": "refunded (A's fixture)",
            }
        ],
        forbidden_tools=[],
    )
    report = replay([first, case(id="b")], build, concurrency=1)
    a, b = report.results
    assert a.passed and a.answer == "refunded (A's fixture)", a.reasons()
    assert not b.passed and b.unauthorised == 1 and "A's fixture" not in (b.answer or "")
    assert any(c.name == "live_tool_call" for c in b.checks) and report.refused == 1 and not shop.LIVE


def test_a_harness_refuses_what_the_agent_left_queued_after_the_replay() -> None:
    from harvester import seam

    jobs: queue.Queue[Any] = queue.Queue()
    done: queue.Queue[Any] = queue.Queue()
    email = harvester.tool(shop.issue_refund)

    def worker() -> None:
        fn, kwargs = jobs.get()
        time.sleep(0.2)  # picked up after the replay has returned
        try:
            done.put(fn(**kwargs))
        except Exception as exc:
            done.put(exc)

    threading.Thread(target=worker, daemon=True).start()

    def build():
        def agent(prompt: str) -> str:
            jobs.put((email, REFUND))  # fire and forget
            return "queued"

        return agent

    seam.harness()  # what `harvester replay` does: the process replays until it exits
    replay([case(checks=[])], build)
    assert isinstance(done.get(timeout=5), LiveToolCall) and not shop.LIVE


PROCESS_POOL = textwrap.dedent("""
    import multiprocessing, sys
    from concurrent.futures import ProcessPoolExecutor
    sys.path.insert(0, {root!r})
    import harvester
    from harvester.canonical import fixture_key
    from harvester.case import AgentCase
    from harvester.replay import replay
    from tests.apps import pool_tools

    def build():
        def agent(prompt):
            with harvester.agent_run("support_agent", prompt) as run:
                run.model_call("m", tool_calls=[{{"name": "render_invoice", "arguments": {{"order_id": "A1001"}}}}])
                with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
                    result = pool.submit(pool_tools.render, "A1001").result()
                run.finish(str(result))
                return str(result)
        return agent

    if __name__ == "__main__":
        args = {{"order_id": "A1001"}}
        spec = AgentCase.model_validate({{"id": "pool", "status": "accepted", "prompt": "p", "why": "w",
            "fixtures": [{{"key": fixture_key("render_invoice", args), "tool": "render_invoice", "args": args,
                          "result": "F"}}]}})
        (r,) = replay([spec], build).results
        print(r.passed, r.live_calls, [c.name for c in r.checks if not c.passed])
""")


@pytest.mark.slow
def test_a_tool_in_a_spawned_process_is_refused_and_its_case_fails(tmp_path) -> None:
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[1])
    (tmp_path / "main.py").write_text(PROCESS_POOL.format(root=root))
    (tmp_path / "ran.log").write_text("")
    out = subprocess.run(
        [sys.executable, str(tmp_path / "main.py")], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[0] == "False 1 ['live_tool_call']"  # requested, never served: flagged
    assert (tmp_path / "ran.log").read_text() == ""  # and the child refused it: the body never ran


# -- pairing the trace with the executor's log -------------------------------------------------------
def test_a_tool_body_that_acted_then_raised_is_a_live_call() -> None:
    attrs = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "issue_refund",
        "gen_ai.tool.call.arguments": orjson.dumps(REFUND).decode(),
    }
    tracer = trace.get_tracer("myapp")

    def build():
        def agent(prompt: str) -> str:
            with harvester.agent_run("support_agent", prompt) as run:
                run.model_call("m", tool_calls=[{"name": "issue_refund", "arguments": REFUND}])
                try:
                    with tracer.start_as_current_span("execute_tool issue_refund", attributes=attrs):
                        shop.issue_refund(**REFUND)  # the side effect happened...
                        raise ConnectionError("then the receipt service failed")
                except ConnectionError:
                    pass
                run.finish("Refund attempted.")
                return "Refund attempted."

        return agent

    (r,) = replay([case(forbidden_tools=[])], build).results
    assert shop.LIVE["issue_refund"] == 1 and not r.passed and r.live_calls == 1, r.reasons()
