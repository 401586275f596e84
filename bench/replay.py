"""Replay runner benchmarks, measured side by side in one run.

(a) Harness overhead: a zero-latency agent that calls one tool through the executor and answers;
    the time per case beyond the agent itself (target <= 1 ms).
(b) Concurrency: 200 cases whose agent sleeps 50 ms per model call, three calls per case, at
    concurrency 16 vs serial (target >= 0.8 x the ideal 16x speed-up).

    python bench/replay.py [--cases 200] [--quick]
"""

from __future__ import annotations

import argparse
import time

from harvester.canonical import fixture_key
from harvester.case import AgentCase
from harvester.replay import replay

ARGS = {"query": "refund policy"}


def cases(n: int) -> list[AgentCase]:
    return [AgentCase.model_validate({
        "id": f"bench-{i}", "prompt": "Can I return A1001?", "why": "bench", "required_elements": ["30 days"],
        "forbidden_tools": ["issue_refund"], "min_steps": 1,
        "fixtures": [{"key": fixture_key("kb_search", ARGS), "tool": "kb_search", "args": ARGS,
                      "result": "Refunds within 30 days."}],
        "recorded": {"trajectory": ["kb_search"]}}) for i in range(n)]


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--quick", action="store_true", help="fewer cases for (a), for CI smoke runs")
    opts = parser.parse_args()
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
        print(f"(a) harness overhead, {label:>14}: {per_case:.3f} ms/case over {n_a} cases "
              f"(target <= 1 ms) {verdict}")

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
    print(f"(b) {n_b} cases x 3 model calls x 50 ms: serial {serial:.2f} s, concurrency 16 {parallel:.2f} s, "
          f"speed-up {speedup:.1f}x = {speedup / 16:.2f} of ideal 16x (target >= 0.80) {verdict}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
