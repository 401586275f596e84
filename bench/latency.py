"""What a reader waits for as the store grows: ``traces list`` and the nightly ``harvest --since 24h``.

    python bench/latency.py [--runs 100000,1000000]

For each size a store is built through the store API with ``bench/harvest.py``'s realistic runs
(3 tool calls with ~1 KB results, ~10% failures), 10,000 runs a day ending now: the 100,000-run store
holds 10 days, the 1,000,000-run one 100, and the last day holds the same 10,000 runs in both. Timed,
medians of 5 rounds, warm cache, each as the command does it through the library:

- ``traces list``: the newest 50 runs; ``traces list --failed``: the newest 50 failed ones;
- ``harvest --since 24h``: the last day's runs into a fresh cases folder.

Each at the largest size is at most 2x its time at the smallest (target), since every one of them
reads through an index on the start time and never the whole store.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harvest import CONFIG, _runs  # bench/, this script's folder, is first on sys.path

from harvester.harvest import harvest
from harvester.model import Run
from harvester.store import TraceStore

PER_DAY = 10_000
ROUNDS = 5
TARGET = 2.0


def _dated(n: int, now: datetime) -> Iterator[Run]:
    """``n`` runs, ``PER_DAY`` a day, the newest a minute ago."""
    step = timedelta(days=1) / PER_DAY
    for i, run in enumerate(_runs(n)):
        run.started_at = (now - timedelta(minutes=1) - (n - 1 - i) * step).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        yield run


def _median(work: Callable[[], object]) -> float:
    times = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        work()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(n: int, tmp: Path, now: datetime) -> dict[str, float]:
    path = tmp / f"store-{n}.db"
    t0 = time.perf_counter()
    with TraceStore(path) as store:
        batch: list[Run] = []
        for run in _dated(n, now):
            batch.append(run)
            if len(batch) == 5000:
                store.add_many(batch)
                batch = []
        store.add_many(batch)
    built = time.perf_counter() - t0
    since = now - timedelta(hours=24)
    rounds = iter(range(10**6))
    with TraceStore(path, readonly=True) as store:
        out = {
            "build_s": built,
            "list": _median(lambda: list(store.runs(limit=50))),
            "failed": _median(lambda: list(store.runs(failed=True, limit=50))),
            "harvest": _median(lambda: harvest(store, tmp / f"cases-{n}-{next(rounds)}", since=since, config=CONFIG)),
        }
        out["day_runs"] = harvest(store, tmp / f"cases-{n}-count", since=since, config=CONFIG).runs
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", default="100000,1000000", help="store sizes (default 100000,1000000)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.runs.split(",")]
    now = datetime.now(timezone.utc)
    rows = []
    with tempfile.TemporaryDirectory(prefix="harvester-bench-") as tmp:
        for n in sizes:
            r = measure(n, Path(tmp), now)
            rows.append((n, r))
            print(
                f"{n:>9,} runs (built in {r['build_s']:.0f} s): traces list {r['list'] * 1e3:7.1f} ms, "
                f"--failed {r['failed'] * 1e3:7.1f} ms, harvest --since 24h ({r['day_runs']:,.0f} runs) "
                f"{r['harvest']:6.2f} s",
                flush=True,
            )
    (n0, a), (n1, b) = rows[0], rows[-1]
    ok = True
    for key, name in (("list", "traces list"), ("failed", "traces list --failed"), ("harvest", "harvest --since 24h")):
        ratio = b[key] / a[key]
        ok = ok and ratio <= TARGET
        print(f"{name}: {n1:,} / {n0:,} runs = {ratio:.2f}x (target <= {TARGET}x)")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
