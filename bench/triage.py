"""Triage of a store of stored runs: time at 10k and 100k runs, and memory flat between them.

Two weeks of traffic (``tests/builders/failures.py``): a quarter of the runs fail, in four known
families whose ids, numbers and quoted values vary, one of them new in the second week. ``triage``
streams the failing runs of both windows (``--since 7d`` and the week before it) and must find exactly
the four clusters, the new one first. It must take under 10 s at 100k stored runs on 2 cores, and its
peak memory (``tracemalloc``, a second run) at 100k may be at most 1.5x the peak at 10k plus a little:
the store is streamed, never loaded.

    python bench/triage.py            # 10k and 100k
    python bench/triage.py --quick    # 10k only
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harvester.harvest import triage
from harvester.store import TraceStore
from tests.builders.failures import FAMILIES, traffic

TARGET_S = 10.0  # at 100k stored runs
FLAT_FACTOR = 1.5
FLAT_SLACK_MB = 4.0


def measure(n: int, work: Path) -> dict[str, float]:
    """Build a store of ``n`` runs, triage it timed, then again under ``tracemalloc``; print a line."""
    store = TraceStore(work / f"traces-{n}.db")
    t0 = time.perf_counter()
    store.add_many(traffic(n, now=time.time()))
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    found = triage(store, work / "cases", since="7d")
    elapsed = time.perf_counter() - t0
    assert len(found.clusters) == len(FAMILIES) and found.clusters[0].trend == "new", found.summary()
    tracemalloc.start()
    triage(store, work / "cases", since="7d")
    peak_mb = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    store.close()
    failing = found.runs + found.previous_runs
    print(
        f"{n:>7} runs ({failing} failing) -> {len(FAMILIES)} clusters: {elapsed:6.2f} s, "
        f"peak {peak_mb:6.1f} MB traced (store built in {build_s:.1f} s)",
        flush=True,
    )
    return {"seconds": elapsed, "peak_mb": peak_mb}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="10k runs only (no 100k target, no flatness check)")
    quick = parser.parse_args().quick
    with tempfile.TemporaryDirectory(prefix="harvester-bench-") as tmp:
        rows = [measure(n, Path(tmp)) for n in ([10_000] if quick else [10_000, 100_000])]
    ok = True
    if len(rows) > 1:
        fast = rows[1]["seconds"] < TARGET_S
        limit = rows[0]["peak_mb"] * FLAT_FACTOR + FLAT_SLACK_MB
        flat = rows[1]["peak_mb"] <= limit
        print(f"100k runs in {rows[1]['seconds']:.2f} s (target < {TARGET_S:.0f} s): {'PASS' if fast else 'FAIL'}")
        print(
            f"memory 10k -> 100k: {rows[0]['peak_mb']:.1f} -> {rows[1]['peak_mb']:.1f} MB "
            f"(flat: <= {limit:.1f} MB): {'PASS' if flat else 'FAIL'}"
        )
        ok = fast and flat
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
