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

    python bench/replay.py [--cases 200] [--quick] [--only d]
"""

from __future__ import annotations

import argparse
import statistics
import time

from harvester.canonical import fixture_key
from harvester.case import AgentCase
from harvester.replay import replay

ARGS = {"query": "refund policy"}


def cases(n: int, calls: int = 1) -> list[AgentCase]:
    return [
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
                "recorded": {"trajectory": ["kb_search"] * calls},
            }
        )
        for i in range(n)
    ]


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


def bare_agent_seconds(n: int) -> float:
    """The agent alone, no harness: what (a) subtracts."""
    from harvester.fixtures import FixtureTools

    suite = cases(n)
    start = time.perf_counter()
    for c in suite:
        zero_latency(FixtureTools(c))(c.prompt)
    return time.perf_counter() - start


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
    import subprocess
    import sys

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="fewer cases for (a), for CI smoke runs")
    parser.add_argument("--side", choices=("adapted", "decorated"), help=argparse.SUPPRESS)  # one side of (c)
    parser.add_argument("--only", choices=("d",), help="run one benchmark")
    opts = parser.parse_args()
    if opts.side:
        print(f"{_per_call_us(opts.side == 'decorated', opts.cases):.3f}")
        return 0
    seconds = verdict_seconds()
    ok = seconds < 1.0
    print(
        f"(d) verdict, 10,000 cases x 10 trials vs a baseline of the same size: {seconds:.3f} s "
        f"(target < 1 s) {'PASS' if ok else 'FAIL'}"
    )
    if opts.only == "d":
        return 0 if ok else 1

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
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
