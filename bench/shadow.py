"""``harvester shadow`` at scale: stored production runs shadowed with a trivial agent, streamed.

Stores of N synthetic production runs (a prompt, one ``kb_search`` call with its recorded result, the
answer built from it; a tenth failed) are shadowed through ``harvester.shadow.shadow`` with a trivial
agent that asks the executor for the same call and answers the same way, so every run is "same" and
the report holds no changed run: what remains is the harness and the stream. Each size runs in a
process of its own, which reports its time and its peak RSS (``ru_maxrss``). Targets: 10,000 runs in
under 2 minutes on 2 cores, and peak RSS flat in the number of runs (the larger size's peak at most
1.25x the smaller's plus 16 MB: the store is streamed, never loaded).

    python bench/shadow.py            # 2,500 and 10,000 runs
    python bench/shadow.py --quick    # 500 and 2,000 runs (no time target)
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harvester.model import ErrorInfo, Run, ToolCall, Usage
from harvester.store import TraceStore

TARGET_SECONDS = 120.0  # for 10,000 runs
FLAT_FACTOR, FLAT_SLACK_MB = 1.25, 16.0
RESULT = "Refunds are accepted within 30 days of delivery. " * 4


def _runs(n: int) -> Iterator[Run]:
    for i in range(n):
        prompt = f"Can I return order A{10000 + i}?"
        failed = i % 10 == 0
        call = ToolCall(
            name="kb_search",
            call_id="c1",
            args={"query": prompt},
            status="error" if failed else "ok",
            result=None if failed else RESULT,
            error=ErrorInfo(type="timeout", message="kb timeout") if failed else None,
        )
        yield Run(
            trace_id=f"{i:032x}",
            run_id=f"{i:016x}",
            agent="support_agent",
            model="bench-model",
            prompt=prompt,
            answer="Sorry, try later." if failed else "Answer: " + RESULT,
            stop="answered",
            calls=[call],
            usage=Usage(input_tokens=300, output_tokens=40),
            started_at=f"2026-12-04T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}Z",
        )


def trivial(tools):
    """The same call production made, the same answer from its result: every run behaves the same."""

    def agent(prompt: str) -> str:
        try:
            return "Answer: " + str(tools.execute("kb_search", {"query": prompt}))
        except Exception:
            return "Sorry, try later."

    return agent


def child(store_path: str) -> None:
    """One shadow of the whole store in this process: its time, its outcome and its peak RSS as JSON."""
    from harvester import seam
    from harvester.shadow import shadow

    seam.harness()
    with TraceStore(store_path, readonly=True) as store:
        t0 = time.perf_counter()
        report = shadow(store, trivial, candidate="bench:trivial", concurrency=8)
        seconds = time.perf_counter() - t0
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = {"runs": report.total.runs, "changed": report.total.count("changed"), "seconds": seconds}
    print(json.dumps({**out, "rss_mb": peak_kb / 1024}))


def measure(n: int, work: Path) -> dict[str, float]:
    path = work / f"traces-{n}.db"
    with TraceStore(str(path)) as store:
        store.add_many(_runs(n))
    done = subprocess.run([sys.executable, __file__, "--child", str(path)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="500 and 2,000 runs (no time target)")
    parser.add_argument("--child", metavar="STORE", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child:
        child(opts.child)
        return 0
    sizes = [500, 2_000] if opts.quick else [2_500, 10_000]
    rows = []
    with tempfile.TemporaryDirectory(prefix="harvester-bench-") as tmp:
        for n in sizes:
            r = measure(n, Path(tmp))
            rows.append(r)
            print(
                f"{int(r['runs']):>6} runs shadowed: {r['seconds']:6.1f} s ({r['runs'] / r['seconds']:5.0f} runs/s), "
                f"{int(r['changed'])} changed, peak RSS {r['rss_mb']:6.1f} MB",
                flush=True,
            )
    ok = all(int(r["runs"]) == n and int(r["changed"]) == 0 for r, n in zip(rows, sizes))
    if not opts.quick:
        fast = rows[-1]["seconds"] < TARGET_SECONDS
        took = rows[-1]["seconds"]
        print(f"10,000 runs in {took:.1f} s (target < {TARGET_SECONDS:.0f} s): {'PASS' if fast else 'FAIL'}")
        ok = ok and fast
    limit = rows[0]["rss_mb"] * FLAT_FACTOR + FLAT_SLACK_MB
    flat = rows[1]["rss_mb"] <= limit
    print(
        f"peak RSS {sizes[0]:,} -> {sizes[1]:,} runs: {rows[0]['rss_mb']:.1f} -> {rows[1]['rss_mb']:.1f} MB "
        f"(flat: <= {limit:.1f} MB): {'PASS' if flat else 'FAIL'}"
    )
    ok = ok and flat
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
