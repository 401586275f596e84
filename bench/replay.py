"""Replay runner benchmarks, measured side by side in one run.

(a) Harness overhead: a zero-latency agent that calls one tool through the executor and answers;
    the time per case beyond the agent itself (target <= 1 ms).
(b) Concurrency: 200 cases whose agent sleeps 50 ms per model call, three calls per case, at
    concurrency 16 vs serial (target >= 0.8 x the ideal 16x speed-up).
(c) The adapters' cost per tool call: a pydantic-ai agent with plain tools (its dispatch routed by the
    adapter) against the same agent with ``@harvester.tool`` tools (served from inside the tool),
    each run inside a case's context, each side in a fresh process; 20 tool calls per run, the median of
    5 interleaved rounds (target <= 50 us). The tools are async, so neither side pays pydantic-ai's thread
    hop for a sync tool body; pydantic-ai's own cost per call (~0.5 ms, traced) is on both sides.

(d) The verdict: gates and the comparison for 10,000 cases x 10 trials against a baseline of the same
    size (a tenth of the cases dropped, some partially: Fisher tests and inconclusive searches run),
    median of 5 (target < 1 s).

(e) The seal per case: (a)'s zero-latency agent (one tool call through the executor, the harness time
    the target is about) and, as the worst case, a busy one (it reads a file, compiles and evaluates a
    snippet and deep-copies its messages: ``open``, ``compile``, ``exec`` and ``builtins.id`` audit events
    beside the harness's own, each a call of the hook), replayed serially with ``seal=True`` and
    ``seal=False``, each side a process of its own (an audit hook cannot be removed) asked for 3 steps of
    500 cases in turn, in 5 sessions of fresh processes; harness CPU time per case (cases that recorded
    one model host; the busy agent also with none: every provider's hosts allowed), the median of the
    steps' ratios (target <= 1.05x for (a)'s agent).
    Beside it, the hook's cost per audited event, timed in a loop an agent runs in a sealed and an
    unsealed case, and its installation.
(f) An allowed connection: a case whose recording names ``localhost:PORT`` as its model host makes HTTP
    requests by name, each on a fresh connection (a lookup, a connect, a request), to a loopback server in
    a process of its own. In a process where the hook is installed, each step replays three such cases in
    turn: sealed, unsealed, and unsealed again (the noise band); beside it, a process with no hook at all
    replays one unsealed case a step. Each asked for 8 steps of 200 requests in turn, in 5 sessions of
    fresh processes. Judged in the agent thread's CPU per connection, as the seal's work is CPU and a
    loopback request's wall time on a shared machine moves by more than it (target: the seal's checks,
    sealed less unsealed in the hooked process, within the noise); beside it the hook's own cost (the
    hooked process unsealed, less no hook: CPython's dispatch of the five audited events to any audit
    hook), and wall time.

(g) The recorded model: 1,000 cases harvested from the demo agent's production traffic (the demo's
    requests captured, harvested once, repeated under new ids), replayed with every model call served from
    the case's recording (``model="recorded"``), harness and serving included, the agent's model raising
    if called (target < 60 s on 2 cores); beside it the same suite with the live (scripted) model. Peak
    resident memory replaying 250 and 1,000 of them from a case folder as ``harvester replay`` does,
    each in a fresh process, live and recorded (target: flat in cases, 1,000 within 1.3x of 250, and
    recorded within 1.25x of live). Needs a ``replay`` with ``model=``; without one, (g) times the live
    side only.

(h) Memory flat in cases: a replay of 200 and of 5,000 cases of (a)'s zero-latency agent, each in a fresh
    process, the cases read from a case folder as `harvester replay` reads them and the report saved as the
    CLI saves it (JSON, summary);
    peak resident memory (``ru_maxrss``) of each (target: 5,000 within 1.3x of 200).

    python bench/replay.py [--cases 200] [--quick] [--only d|e|f|g|h]
"""

from __future__ import annotations

import argparse
import copy
import inspect
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from harvester.canonical import fixture_key
from harvester.case import AgentCase, CaseFolder, save_case
from harvester.replay import replay

ARGS = {"query": "refund policy"}


def cases(n: int, calls: int = 1, hosts: tuple[str, ...] = ()) -> list[AgentCase]:
    return list(iter_cases(n, calls, hosts))


def iter_cases(n: int, calls: int = 1, hosts: tuple[str, ...] = ()) -> Iterator[AgentCase]:
    return (
        AgentCase.model_validate(
            {
                "id": f"bench-{i}",
                "prompt": "Can I return A1001?",
                "why": "bench",
                "required_elements": ["30 days"],
                "forbidden_tools": ["issue_refund"],
                "min_steps": calls,
                "fixtures": [
                    {
                        "key": fixture_key("kb_search", ARGS),
                        "tool": "kb_search",
                        "args": ARGS,
                        "result": "Refunds within 30 days.",
                    }
                ]
                * calls,
                "recorded": {"trajectory": ["kb_search"] * calls, "model_hosts": list(hosts)},
            }
        )
        for i in range(n)
    )


def zero_latency(tools):
    def agent(prompt):
        return "Answer: " + tools.execute("kb_search", ARGS)

    return agent


def sleepy(tools):
    def agent(prompt):
        time.sleep(0.05)  # model call 1: asks for the tool
        result = tools.execute("kb_search", ARGS)
        time.sleep(0.05)  # model call 2
        time.sleep(0.05)  # model call 3: answers
        return "Answer: " + result

    return agent


def bare_agent_seconds(n: int, factory=zero_latency, clock=time.perf_counter) -> float:
    """The agent alone, no harness: what (a) and (e) subtract."""
    from harvester.fixtures import FixtureTools

    suite = cases(n)
    start = clock()
    for c in suite:
        factory(FixtureTools(c))(c.prompt)
    return clock() - start


CALLS_PER_CASE = 20


def _pydantic_agent(decorated: bool):
    """A factory: one model turn asks for CALLS_PER_CASE lookups at once, the next answers."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import FunctionModel

    import harvester

    async def kb_search(query: str) -> str:
        """Search the knowledge base."""
        raise AssertionError("a replay never runs the tool")

    tool = harvester.tool(kb_search) if decorated else kb_search

    def respond(messages, info):
        if any(isinstance(p, ToolReturnPart) for m in messages if isinstance(m, ModelRequest) for p in m.parts):
            return ModelResponse(parts=[TextPart("Refunds within 30 days.")])
        return ModelResponse(parts=[ToolCallPart("kb_search", ARGS, f"call_{i}") for i in range(CALLS_PER_CASE)])

    def build():
        return Agent(FunctionModel(respond, model_name="bench"), name="support_agent", tools=[tool])

    return build


def _per_call_us(decorated: bool, n: int) -> float:
    """One side of (c), in this process: ``n`` runs of the agent inside a case's context; us per tool call.

    The adapted side guards pydantic-ai (as a replay does) and gives it plain tools; the decorated side
    installs no guard at all, and its ``@harvester.tool`` tools ask the executor themselves. Both are
    traced, as a replay traces them.
    """
    import asyncio

    import pydantic_ai  # noqa: F401 - loaded before the guards, as an app's factory module loads it

    from harvester import adapters, seam
    from harvester.fixtures import FixtureTools

    session = adapters.Session()
    if decorated:  # traced as the adapted side is (a replay turns pydantic-ai's instrumentation on)
        from pydantic_ai import Agent
        from pydantic_ai.models.instrumented import InstrumentationSettings

        Agent.instrument_all(InstrumentationSettings())
    else:
        session.open()
    spec = cases(1, CALLS_PER_CASE)[0]
    build = _pydantic_agent(decorated)

    async def run(k: int) -> float:
        start = time.perf_counter()
        for _ in range(k):
            tools = FixtureTools(spec)
            with seam.serving(tools):
                await build().run(spec.prompt)
            assert len(tools.log) == CALLS_PER_CASE
        return time.perf_counter() - start

    asyncio.run(run(5))  # warm up
    elapsed = asyncio.run(run(n))
    session.close()
    return elapsed / (n * CALLS_PER_CASE) * 1e6


def adapter_cost(n: int, rounds: int = 5) -> tuple[float, float, float]:
    """(us per call adapted, us per call decorated, the difference): medians of interleaved rounds, each
    side in a fresh process (once installed, a guard stays for the process)."""
    times: dict[bool, list[float]] = {True: [], False: []}
    for i in range(rounds):
        for decorated in (False, True) if i % 2 == 0 else (True, False):
            out = subprocess.run(
                [sys.executable, __file__, "--side", "decorated" if decorated else "adapted", "--cases", str(n)],
                capture_output=True,
                text=True,
                check=True,
            )
            times[decorated].append(float(out.stdout.strip()))
    per_call = {d: statistics.median(t) for d, t in times.items()}
    return per_call[False], per_call[True], per_call[False] - per_call[True]


def verdict_seconds(n: int = 10_000, trials: int = 10, rounds: int = 5) -> float:
    """Median seconds of ``evaluate_gates`` (comparison included) over ``n`` cases x ``trials``."""
    from harvester.report import CaseResult, Report, evaluate_gates

    def results(drop: bool) -> list[CaseResult]:
        out = []
        for i in range(n):
            passes = trials
            if drop and i % 10 == 0:
                passes = (0, 3, 7, 9, trials)[i // 10 % 5]  # all failing, partial drops, unchanged
            out.append(
                CaseResult(
                    id=f"case-{i:05d}",
                    passed=passes == trials,
                    tags=[f"t{i % 7}"],
                    steps=1 + i % 3,
                    trials=trials,
                    passes=passes,
                    cost=0.001 * (1 + i % 5),
                    tool_calls=1 + i % 3,
                )
            )
        return out

    base = Report(suite="bench", trials=trials, results=results(False))
    now = Report(suite="bench", trials=trials, results=results(True))
    gates = ["task_completion>=0.9", "delta:mean_steps<=0.5", "delta:cost_per_success<=0.01", "tag:t3>=0.8"]
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        outcome = evaluate_gates(now, gates, base)
        times.append(time.perf_counter() - start)
    assert outcome.regressions and outcome.exit_code == 1
    return statistics.median(times)


def _lockstep(workers: tuple[str, ...], sessions: int, steps: int, *args: str) -> dict[str, list[list[float]]]:
    """Each worker's figures, step by step. A worker is a process of this file (an audit hook, once
    installed, stays for its process) asked for one step at a time, the workers in turn and their order
    rotated: a round's steps are taken within a second of each other, so the drift of a shared machine
    (1.7x within minutes here) falls on every side alike. A process's own speed varies too (one loop of
    (f)'s requests took 120-210 us of CPU each in processes started one after another), so each session
    starts fresh ones."""
    out: dict[str, list[list[float]]] = {worker: [] for worker in workers}
    for _ in range(sessions):
        command = [sys.executable, __file__, "--worker"]
        pipes = {"stdin": subprocess.PIPE, "stdout": subprocess.PIPE, "text": True}
        procs = [(worker, subprocess.Popen([*command, worker, *args], **pipes)) for worker in workers]
        try:
            for i in range(steps):
                for worker, proc in procs[i % len(procs) :] + procs[: i % len(procs)]:
                    assert proc.stdin is not None and proc.stdout is not None
                    proc.stdin.write("step\n")
                    proc.stdin.flush()
                    line = proc.stdout.readline()
                    if not line:
                        raise SystemExit(f"worker {worker} failed (its error above)")
                    out[worker].append([float(x) for x in line.split()])
        finally:
            for _, proc in procs:
                proc.communicate()  # the end of its input: the worker exits
    return out


def _medians(rows: list[list[float]]) -> list[float]:
    return [statistics.median(column) for column in zip(*rows)]


MESSAGES = [{"role": "user", "content": "Can I return A1001?", "parts": [{"type": "text", "n": i}]} for i in range(8)]
MODEL_HOST = ("api.openai.com",)


def busy(tools):
    """A zero-latency agent doing what agents do between model calls, each step an audit event the seal's
    hook sees: it reads a file (``open``), compiles and evaluates a snippet (``compile``, ``exec``) and
    copies its messages (``copy.deepcopy`` calls ``id()`` per object: ``builtins.id``)."""

    def agent(prompt):
        with open(__file__, "rb") as f:
            f.read(512)
        eval(compile("len(prompt)", "<bench>", "eval"), {"prompt": prompt})
        copy.deepcopy(MESSAGES)
        return "Answer: " + tools.execute("kb_search", ARGS)

    return agent


def _harness_ms(sealed: bool, n: int):
    """A worker of (e): per step, harness ms per case for ``n`` cases recording one model host and ``n``
    recording none, in alternating order (in a fixed one, the second measured ~25% slower on both sides).
    In CPU time: a serial replay is CPU-bound and the seal waits on nothing, so it is what the replay
    costs, without the waits the machine's other jobs put in its wall time."""
    bare_agent_seconds(50, busy)
    bare = {agent: bare_agent_seconds(n, agent, time.process_time) / n for agent in (zero_latency, busy)}
    replay(cases(50), busy, concurrency=1, seal=sealed)  # warm up (sealed: installs the hook)
    order = [(zero_latency, MODEL_HOST), (busy, ()), (busy, MODEL_HOST)]

    def step() -> list[float]:
        order.reverse()
        out = {}
        for agent, hosts in order:
            suite = cases(n, hosts=hosts)
            start = time.process_time()
            report = replay(suite, agent, concurrency=1, seal=sealed)
            out[agent, hosts] = ((time.process_time() - start) / n - bare[agent]) * 1000
            assert report.passed == n and report.sealed == sealed, report.summary()
        return [out[zero_latency, MODEL_HOST], out[busy, MODEL_HOST], out[busy, ()]]

    return step


EVENTS = ("id()", "sys._getframe()")  # cheap audited calls: the hook's cost is not lost in the call's own


def _event_ns(hooked: bool, n: int):
    """A worker of (e)'s per-event figures: per step, ns of CPU per audited operation, looped by an agent in
    a case replayed sealed or not; the first figure is the hook's installation (us), timed before the first
    replay installs it."""
    from harvester.replay import _seal

    install_us = 0.0
    if hooked:
        start = time.perf_counter()
        _seal.install()
        install_us = (time.perf_counter() - start) * 1e6
    loops = (lambda: id(MESSAGES), sys._getframe)
    ns: list[float] = []

    def factory(tools):
        def agent(prompt):
            for op in loops:
                start = time.thread_time()
                for _ in range(n):
                    op()
                ns.append((time.thread_time() - start) / n * 1e9)
            return "Answer: " + tools.execute("kb_search", ARGS)

        return agent

    def step() -> list[float]:
        ns.clear()
        assert replay(cases(1), factory, seal=hooked).passed == 1 and len(ns) == len(EVENTS)
        return [install_us, *ns]

    return step


def _events_per_case(n: int):
    """A worker of (e), one step: the audited events a case of (e) raises, the harness's and the agent's."""
    events = [0]

    def step() -> list[float]:
        replay(cases(50), busy, concurrency=1)  # warm up (installs the seal's hook)
        sys.addaudithook(lambda event, args: events.__setitem__(0, events[0] + 1))
        events[0] = 0
        replay(cases(n, hosts=MODEL_HOST), busy, concurrency=1)
        return [events[0] / n]

    return step


def seal_cost(n: int, sessions: int, steps: int) -> tuple[list[float], list[float], list[float], float, float]:
    """(e): harness ms per case (sealed then unsealed: one model host, none), the steps' median ratios
    (sealed over unsealed), the hook's ns per audited event, its installation us, audited events a case."""
    events = _lockstep(("events-count",), 1, 1, "--cases", "200")["events-count"][0][0]
    got = _lockstep(("events-bare", "events-hooked"), sessions, steps, "--cases", "100000")
    bare, hooked = got["events-bare"], got["events-hooked"]
    added = [statistics.median(h[i] - b[i] for b, h in zip(bare, hooked)) for i in range(1, len(EVENTS) + 1)]
    got = _lockstep(("unsealed", "sealed"), sessions, steps, "--cases", str(n))
    ratios = [statistics.median(s[i] / u[i] for s, u in zip(got["sealed"], got["unsealed"])) for i in range(3)]
    install_us = statistics.median(r[0] for r in hooked)
    return [*_medians(got["sealed"]), *_medians(got["unsealed"])], ratios, added, install_us, events


WARM_REQUESTS = 20
CONNECT_WORKERS = {"connect-hooked": 3, "connect-bare": 1}  # each worker's cases a step


def serve(limit: int, cert: str | None) -> None:
    """(f)'s loopback HTTP server, in a process of its own: 127.0.0.1 only, one connection at a time
    (HTTP/1.0: closed after each answer), over TLS with ``cert`` (its key in the same file); it stops
    after ``limit`` requests, or after 30 s without one."""
    import ssl
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Answer(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    idle: list[bool] = []
    with HTTPServer(("127.0.0.1", 0), Answer) as server:
        if cert:
            tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            tls.load_cert_chain(cert)
            server.socket = tls.wrap_socket(server.socket, server_side=True)
        server.timeout = 30
        server.handle_timeout = lambda: idle.append(True)
        print(server.server_address[1], flush=True)
        for _ in range(limit):
            server.handle_request()
            if idle:
                break


def tls_cert(folder: str) -> str | None:
    """A self-signed certificate for ``localhost`` and its key, in one file (``openssl``); None without it."""
    cert, key = Path(folder) / "cert.pem", Path(folder) / "key.pem"
    made = (
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
            + ["-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost", "-days", "1"]
            + ["-keyout", str(key), "-out", str(cert)],
            capture_output=True,
            check=False,
        )
        if shutil.which("openssl")
        else None
    )
    if made is None or made.returncode != 0:
        return None
    both = Path(folder) / "both.pem"
    both.write_bytes(cert.read_bytes() + key.read_bytes())
    return str(both)


def _connect_us(hooked: bool, port: int, n: int, cert: str | None = None):
    """A worker of (f): per step, cases whose agent makes ``n`` HTTP requests to ``localhost``, each on a
    fresh connection (the name looked up, connected to, a request answered): the agent thread's CPU us
    per request (the seal's work is CPU on that thread), then the median wall us per request.
    ``hooked``: a connection to the bare address (which the case does not name) is first shown refused,
    which installs the hook for the process; then each step replays three cases in turn (the order
    rotated step by step): sealed (the case's recorded model host allows the requests), unsealed, and
    unsealed again (the noise band), so the seal's checks are told apart in one process, free of the
    differences between processes. Not ``hooked``: one unsealed case a step, with no hook at all.
    ``cert``: over TLS, trusting that certificate (a model host is reached so)."""
    import http.client
    import socket
    import ssl

    from harvester.errors import Sealed

    times: list[float] = []
    cpu: list[float] = []
    refused: list[bool] = []

    def probe(tools):
        def agent(prompt):
            try:
                socket.create_connection(("127.0.0.1", port + 1), timeout=10).close()  # a port no case may reach
            except Sealed:
                refused.append(True)
            return "Answer: " + tools.execute("kb_search", ARGS)

        return agent

    def requests(k: int):
        def factory(tools):
            def agent(prompt):
                began = time.thread_time()
                for _ in range(k):
                    start = time.perf_counter()
                    connection = (
                        http.client.HTTPSConnection("localhost", port, timeout=10, context=tls)
                        if tls is not None
                        else http.client.HTTPConnection("localhost", port, timeout=10)
                    )
                    connection.request("GET", "/")
                    assert connection.getresponse().read() == b"ok"
                    connection.close()
                    times.append(time.perf_counter() - start)
                cpu.append((time.thread_time() - began) / k)
                return "Answer: " + tools.execute("kb_search", ARGS)

            return agent

        return factory

    tls = ssl.create_default_context(cafile=cert) if cert else None
    hosts = (f"localhost:{port}",)
    if hooked:
        replay(cases(1, hosts=hosts), probe, seal=True)
        assert refused, "the seal let through a connection the case does not allow"
    sides = [True, False, False] if hooked else [False]  # sealed, unsealed, unsealed again
    for sealed in sides:
        replay(cases(1, hosts=hosts), requests(WARM_REQUESTS), seal=sealed)  # warm up
    turn = list(range(len(sides)))

    def step() -> list[float]:
        turn.append(turn.pop(0))
        got: dict[int, tuple[float, float]] = {}
        for side in turn:
            times.clear()
            report = replay(cases(1, hosts=hosts), requests(n), seal=sides[side])
            assert report.passed == 1 and len(times) == n and report.sealed == sides[side], report.summary()
            got[side] = (cpu[-1] * 1e6, statistics.median(times) * 1e6)
        return [got[side][measure] for measure in (0, 1) for side in range(len(sides))]

    return step


class Connection(NamedTuple):
    """(f) in one measure (CPU or wall, us a request). In the hooked process: each side's median, the
    seal's checks (the steps' median of sealed less unsealed) and the noise band (of the two unsealed
    sides' difference). Beside it, no hook: its median, and the hook's cost (the steps' median of the
    hooked process's unsealed side less it: CPython's dispatch to any audit hook, with the differences
    between processes)."""

    sealed: float
    unsealed: float
    again: float
    checks: float
    noise: float
    bare: float
    hook: float


def connection_cost(n: int, sessions: int, steps: int, cert: str | None = None) -> list[Connection]:
    """(f), in CPU time then in wall time (over TLS with ``cert``)."""
    limit = sum(CONNECT_WORKERS.values()) * sessions * (WARM_REQUESTS + steps * n)
    tls = ["--cert", cert] if cert else []
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(limit), *tls], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        port = server.stdout.readline().strip()
        got = _lockstep(tuple(CONNECT_WORKERS), sessions, steps, "--port", port, "--cases", str(n), *tls)
        server.wait(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    out = []
    for measure in (0, 1):
        sealed, unsealed, again = ([r[3 * measure + side] for r in got["connect-hooked"]] for side in range(3))
        bare = [r[measure] for r in got["connect-bare"]]
        medians = [statistics.median(t) for t in (sealed, unsealed, again)]
        checks = statistics.median(s - u for s, u in zip(sealed, unsealed))
        noise = statistics.median(abs(a - u) for a, u in zip(again, unsealed))
        hook = statistics.median(u - b for u, b in zip(unsealed, bare))
        out.append(Connection(medians[0], medians[1], medians[2], checks, noise, statistics.median(bare), hook))
    return out


WORKERS = {
    "sealed": lambda o: _harness_ms(True, o.cases),
    "unsealed": lambda o: _harness_ms(False, o.cases),
    "events-hooked": lambda o: _event_ns(True, o.cases),
    "events-bare": lambda o: _event_ns(False, o.cases),
    "events-count": lambda o: _events_per_case(o.cases),
    "connect-hooked": lambda o: _connect_us(True, o.port, o.cases, o.cert),
    "connect-bare": lambda o: _connect_us(False, o.port, o.cases, o.cert),
}


def bench_verdict(opts) -> bool:
    seconds = verdict_seconds()
    ok = seconds < 1.0
    print(
        f"(d) verdict, 10,000 cases x 10 trials vs a baseline of the same size: {seconds:.3f} s "
        f"(target < 1 s) {'PASS' if ok else 'FAIL'}"
    )
    return ok


def bench_harness(opts) -> bool:
    ok = True
    n_a = 500 if opts.quick else 2000
    suite = cases(n_a)
    replay(cases(50), zero_latency, concurrency=1)  # warm up: provider, collector, imports
    for label, conc in (("serial", 1), ("concurrency 8", 8)):
        start = time.perf_counter()
        report = replay(suite, zero_latency, concurrency=conc)
        total = time.perf_counter() - start
        assert report.passed == n_a, report.summary()
        per_case = (total - bare_agent_seconds(n_a)) / n_a * 1000
        verdict = "PASS" if per_case <= 1.0 else "FAIL"
        ok &= per_case <= 1.0
        print(f"(a) harness overhead, {label:>14}: {per_case:.3f} ms/case over {n_a} cases (target <= 1 ms) {verdict}")

    n_b = opts.cases
    suite = cases(n_b)
    start = time.perf_counter()
    serial_report = replay(suite, sleepy, concurrency=1)
    serial = time.perf_counter() - start
    start = time.perf_counter()
    parallel_report = replay(suite, sleepy, concurrency=16)
    parallel = time.perf_counter() - start
    assert serial_report.passed == parallel_report.passed == n_b
    speedup = serial / parallel
    verdict = "PASS" if speedup >= 0.8 * 16 else "FAIL"
    ok &= speedup >= 0.8 * 16
    print(
        f"(b) {n_b} cases x 3 model calls x 50 ms: serial {serial:.2f} s, concurrency 16 {parallel:.2f} s, "
        f"speed-up {speedup:.1f}x = {speedup / 16:.2f} of ideal 16x (target >= 0.80) {verdict}"
    )

    adapted, decorated, extra = adapter_cost(50 if opts.quick else 200)
    verdict = "PASS" if extra <= 50 else "FAIL"
    ok &= extra <= 50
    print(
        f"(c) pydantic-ai tool call in replay: adapted {adapted:.1f} us, decorated {decorated:.1f} us, "
        f"the adapter's cost {extra:+.1f} us/call (target <= 50 us) {verdict}"
    )
    return ok


def bench_seal(opts) -> bool:
    n, sessions, steps = (200, 3, 2) if opts.quick else (500, 5, 3)
    sides, ratios, added, install_us, events = seal_cost(n, sessions, steps)
    print(f"(e) the seal, zero-latency agents, serial, {sessions} x {steps} steps of {n} cases:")
    labels = (
        "the harness (a)'s agent, one model host ",
        f"busy agent ({events:.0f} audit events), one host",
        f"busy agent ({events:.0f} audit events), no host ",
    )
    for i, label in enumerate(labels):
        target = " (target <= 1.05) " + ("PASS" if ratios[i] <= 1.05 else "FAIL") if i == 0 else " (worst case)"
        print(
            f"    {label}: harness CPU {sides[i]:.3f} ms/case sealed, {sides[i + 3]:.3f} unsealed, "
            f"{ratios[i]:.3f}x{target}"
        )
    costs = ", ".join(f"{name} {ns:+.0f} ns" for name, ns in zip(EVENTS, added))
    print(
        f"    the hook per audited event: {costs} ({events:.0f} a case: ~{events * added[0] / 1000:.0f} us of "
        f"the seal's cost); installed once per process in {install_us:.0f} us"
    )
    return ratios[0] <= 1.05


def bench_connection(opts) -> bool:
    n, sessions, steps = (100, 3, 2) if opts.quick else (200, 5, 8)
    figures = connection_cost(n, sessions, steps)
    print(
        f"(f) an allowed connection (a lookup of localhost, a connect, an HTTP request), "
        f"{sessions} x {steps} steps of {n}, us a connection:"
    )
    for label, f in zip(("agent's CPU", "wall time  "), figures):
        print(
            f"    {label}: sealed {f.sealed:.1f}, unsealed {f.unsealed:.1f}, again {f.again:.1f}: the seal's "
            f"checks {f.checks:+.1f} ({f.sealed / f.unsealed:.3f}x), noise band {f.noise:.1f}; "
            f"no hook {f.bare:.1f}: the hook {f.hook:+.1f}"
        )
    cpu = figures[0]
    ok = cpu.checks <= cpu.noise
    print(
        f"    the seal's checks within the noise (target) {'PASS' if ok else 'FAIL'}; the hook's dispatch "
        f"(CPython's, any audit hook) {cpu.hook:+.1f} us ({cpu.hook / cpu.bare:.1%}): "
        f"{'within' if cpu.hook <= cpu.noise else 'beyond'} the noise"
    )
    with tempfile.TemporaryDirectory() as folder:
        cert = tls_cert(folder)
        if cert is None:
            print("    over TLS: skipped (no openssl to make a certificate)")
            return ok
        f = connection_cost(n // 2, sessions, max(2, steps // 2), cert)[0]
    print(
        f"    over TLS, as a model host is reached (agent's CPU, {sessions} x {max(2, steps // 2)} steps of {n // 2}): "
        f"sealed {f.sealed:.1f}, unsealed {f.unsealed:.1f}, no hook {f.bare:.1f}: the seal's checks "
        f"{f.checks:+.1f}, the hook {f.hook:+.1f}, in all {f.checks + f.hook:+.1f} "
        f"({f.sealed / f.bare:.3f}x), noise band {f.noise:.1f}"
    )
    return ok


def demo_cases(n: int) -> list[AgentCase]:
    """``n`` cases of the demo agent: its production traffic captured and harvested, repeated under new ids."""
    from opentelemetry.sdk.trace import TracerProvider

    from harvester.case import load_cases
    from harvester.demo import agent as support
    from harvester.demo.scenario import TRAFFIC, write_config
    from harvester.harvest import harvest
    from harvester.intake import HarvestingSpanProcessor
    from harvester.store import TraceStore

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        provider = TracerProvider()
        processor = HarvestingSpanProcessor(str(root / "traces.db"), sample_rate=1.0)
        provider.add_span_processor(processor)
        production = support.SupportAgent(tracer_provider=provider)
        for prompt, _ in TRAFFIC:
            production.run(prompt)
            processor.force_flush(timeout_millis=60_000)
        provider.shutdown()
        with TraceStore(str(root / "traces.db")) as store:
            harvest(store, root / "cases", config=write_config(root))
        harvested = load_cases(root / "cases")
    return [
        harvested[i % len(harvested)].model_copy(update={"id": f"{harvested[i % len(harvested)].id}-{i}"})
        for i in range(n)
    ]


def _no_model(prompt, history):
    raise RuntimeError("the model was called during a recorded-model replay")


def _offline_agent():
    from harvester.demo import agent as support

    return support.SupportAgent(model=_no_model)


def _demo_agent():
    from harvester.demo import agent as support

    return support.SupportAgent()


def bench_recorded(opts) -> bool:
    n = 250 if opts.quick else 1000
    suite = demo_cases(n)
    recorded = "model" in inspect.signature(replay).parameters
    replay(suite[:20], _demo_agent)  # warm up: provider, collector, imports
    start = time.perf_counter()
    live = replay(suite, _demo_agent)
    live_s = time.perf_counter() - start
    print(f"(g) {n} harvested demo cases, the live (scripted) model: {live_s:.1f} s, {live.passed}/{n} passed")
    if not recorded:
        print("    the recorded model: this build's replay has no model= (issue 30): not measured")
        return True
    kwargs = {"model": "recorded"}
    start = time.perf_counter()
    served = replay(suite, _offline_agent, **kwargs)
    served_s = time.perf_counter() - start
    ok = served_s < 60
    print(
        f"    the recorded model: {served_s:.1f} s ({served_s / n * 1000:.1f} ms/case), {served.passed}/{n} passed "
        f"as with the live model: {served.passed == live.passed} (target < 60 s) {'PASS' if ok else 'FAIL'}"
    )
    live_rss = _peak_rss((n // 4, n), model="live")
    rss = _peak_rss((n // 4, n), model="recorded")
    flat = rss[1] <= 1.3 * rss[0] and rss[1] <= 1.25 * live_rss[1]
    print(
        f"    peak RSS replaying from a case folder, {n // 4} / {n} cases, each a fresh process: live "
        f"{live_rss[0]:.1f} / {live_rss[1]:.1f} MB, recorded {rss[0]:.1f} / {rss[1]:.1f} MB, {rss[1] / rss[0]:.2f}x "
        f"(target: flat, <= 1.3x, and within 1.25x of live) {'PASS' if flat else 'FAIL'}"
    )
    return ok and flat


def _rss_mb(n: int, model: str | None = None) -> float:
    """(g)'s and (h)'s worker: replay ``n`` accepted cases from a case folder as ``harvester replay`` does
    (written one at a time first: (h)'s zero-latency cases, or with ``model`` (g)'s harvested demo
    cases on the live (scripted) or recorded model), save the report, render its summary; the
    process's peak resident memory in MB."""
    import resource

    cases = demo_cases(n) if model else iter_cases(n)
    build, kwargs = (
        (zero_latency, {})
        if not model
        else (_demo_agent, {})
        if model == "live"
        else (_offline_agent, {"model": "recorded"})
    )
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            save_case(case.model_copy(update={"status": "accepted"}), Path(tmp) / "cases")
        del cases
        report = replay(CaseFolder(Path(tmp) / "cases").each_accepted(), build, **kwargs)
        report.save(Path(tmp) / "report.json")
        report.summary()
        assert report.passed == n, report.headline()
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _peak_rss(sizes: tuple[int, int], model: str | None = None) -> list[float]:
    """Peak RSS of a replay of each size, each in a fresh process."""
    flag = ["--model", model] if model else []
    return [
        float(subprocess.check_output([sys.executable, __file__, "--rss", str(n), *flag], text=True)) for n in sizes
    ]


def bench_memory(opts) -> bool:
    small, big = (200, 2000) if opts.quick else (200, 5000)
    peaks = _peak_rss((small, big))
    ratio = peaks[1] / peaks[0]
    ok = ratio <= 1.3
    print(
        f"(h) peak RSS of a replay, {small} / {big} cases of a zero-latency agent, each a fresh process: "
        f"{peaks[0]:.1f} / {peaks[1]:.1f} MB, {ratio:.2f}x (target <= 1.3x) {'PASS' if ok else 'FAIL'}"
    )
    return ok


SECTIONS = (
    ("d", bench_verdict),
    (None, bench_harness),
    ("e", bench_seal),
    ("f", bench_connection),
    ("g", bench_recorded),
    ("h", bench_memory),
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="fewer cases for (a), (c), (e) to (g), for CI smoke runs")
    parser.add_argument("--only", choices=("d", "e", "f", "g", "h"), help="run one benchmark")
    parser.add_argument("--rss", type=int, help=argparse.SUPPRESS)  # be (g)'s or (h)'s worker, for this many cases
    parser.add_argument("--model", choices=("live", "recorded"), help=argparse.SUPPRESS)  # ... (g)'s, this model
    parser.add_argument("--side", choices=("adapted", "decorated"), help=argparse.SUPPRESS)  # one side of (c)
    parser.add_argument("--worker", choices=tuple(WORKERS), help=argparse.SUPPRESS)  # a side of (e) or (f)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)  # (f)'s server
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)  # be (f)'s server, for this many requests
    parser.add_argument("--cert", help=argparse.SUPPRESS)  # (f) over TLS: the server's certificate and key
    opts = parser.parse_args()
    if opts.side:
        print(f"{_per_call_us(opts.side == 'decorated', opts.cases):.3f}")
        return 0
    if opts.worker:
        step = WORKERS[opts.worker](opts)
        for _ in sys.stdin:
            print(" ".join(f"{x:.3f}" for x in step()), flush=True)
        return 0
    if opts.serve:
        serve(opts.serve, opts.cert)
        return 0
    if opts.rss:
        print(f"{_rss_mb(opts.rss, opts.model):.1f}")
        return 0
    ok = True
    for letter, section in SECTIONS:
        if opts.only in (None, letter):
            ok &= section(opts)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
