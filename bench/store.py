"""The trace store's size and read speed: compressed rows against plain ones, and against the release
before compression, side by side in one run.

    python bench/store.py [--traces N] [--against REV]

N agent traces (default 5,000; 7 spans each, args ~100 B, results ~1 KB, as ``bench/capture.py``
makes them) are written as the Collector's file exporter writes them (OTLP/JSON lines) and ingested
in this process into a store as harvester writes it now (run JSON and spans deflated) and into one
with compression off (``PACK_MIN`` out of reach: the rows as before schema 3). Printed:

(a) bytes: the OTLP/JSON file, each store (checkpointed), and the compressed store's ratio to the file
    (target <= 0.5);
(b) reads with a warm cache, medians of 5 interleaved rounds in this process: listing every run
    (``store.runs()``, what ``traces list`` and ``harvest`` read) and reading 1,000 traces' spans
    (``store.spans``), compressed over plain: what the inflating costs the same code;
(c) "reads no slower": the same reads against the release before compression (REV, default the last
    commit before schema 3, taken from this clone's history with ``git archive``), each store written
    and read by its own release in a process of its own, ROUNDS interleaved rounds (the best of 3
    passes in each), now over then (target <= 1.0x; this machine's rounds vary by 10-20%).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harvester.intake import ingest_files
from harvester.store import TraceStore, _codec

HERE = Path(__file__).resolve().parent
ROUNDS = 5
RELEASE_BEFORE = "ae64838"  # the last commit before store schema 3 (compressed rows)
AGAINST_ROUNDS = 15

# Run by each release in a process of its own: ``ROOT DB ingest SRC`` writes a store, ``ROOT DB``
# prints the best of 3 passes of listing every run and of reading 1,000 traces' spans, in us.
WORKER = """
import sys, time
sys.path.insert(0, sys.argv[1])
from harvester.store import TraceStore
if sys.argv[3:4] == ["ingest"]:
    from harvester.intake import ingest_files
    with TraceStore(sys.argv[2]) as store:
        ingest_files([sys.argv[4]], store, jobs=1)
    raise SystemExit
with TraceStore(sys.argv[2], readonly=True) as store:
    ids = [r.trace_id for r in store.runs(limit=1000)]
    listed = spans = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        n = sum(1 for _ in store.runs())
        listed = min(listed, (time.perf_counter() - t) / n * 1e6)
        t = time.perf_counter()
        for tid in ids:
            store.spans(tid)
        spans = min(spans, (time.perf_counter() - t) / len(ids) * 1e6)
print(listed, spans)
"""


def _capture_bench() -> object:
    spec = importlib.util.spec_from_file_location("capture_bench", HERE / "capture.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def store_bytes(path: str) -> int:
    with sqlite3.connect(path) as c:
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


def ingest(src: Path, path: str, *, compress: bool) -> None:
    saved = _codec.PACK_MIN
    _codec.PACK_MIN = saved if compress else 1 << 62
    try:
        with TraceStore(path) as store:
            ingest_files([str(src)], store, jobs=1)
    finally:
        _codec.PACK_MIN = saved


def list_runs(path: str) -> float:
    with TraceStore(path, readonly=True) as store:
        t0 = time.perf_counter()
        n = sum(1 for _ in store.runs())
        return (time.perf_counter() - t0) / n * 1e6


def read_spans(path: str, ids: list[str]) -> float:
    with TraceStore(path, readonly=True) as store:
        t0 = time.perf_counter()
        for tid in ids:
            store.spans(tid)
        return (time.perf_counter() - t0) / len(ids) * 1e6


def _worker(root: Path, *args: str) -> list[float]:
    out = subprocess.run([sys.executable, "-c", WORKER, str(root), *args], capture_output=True, text=True, check=True)
    return [float(x) for x in out.stdout.split()]


def release(rev: str, into: Path) -> Path | None:
    """The ``harvester`` package of ``rev`` from this clone's history, unpacked into ``into``; None without it."""
    repo = HERE.parent
    try:
        archive = subprocess.run(
            ["git", "-C", str(repo), "archive", "--format=tar", rev, "harvester"], capture_output=True, check=True
        ).stdout
        into.mkdir()
        subprocess.run(["tar", "-x", "-C", str(into)], input=archive, capture_output=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return into


def release_env(rev: str, tmp: Path) -> dict[str, str]:
    """The environment of a fresh process that runs ``rev``'s package (unpacked under ``tmp``) as ``pip
    install`` leaves it (``bench/capture.py``'s ``installed``); exits when this clone lacks ``rev``."""
    root = release(rev, tmp / "against")
    if root is None:
        raise SystemExit(f"{rev} is not in this clone's history (a shallow clone?), or git is missing")
    return _capture_bench().installed(root)  # type: ignore[attr-defined,no-any-return]


def against(rev: str, src: Path, tmp: Path) -> dict[str, list[float]] | None:
    """Rounds of (c): this release's reads and ``rev``'s, each on a store it wrote, alternating."""
    then_root = release(rev, tmp / "then")
    if then_root is None:
        return None
    now_db, then_db = str(tmp / "now.db"), str(tmp / "then.db")
    for root, db in ((HERE.parent, now_db), (then_root, then_db)):
        _worker(root, db, "ingest", str(src))
    rounds: dict[str, list[float]] = {"list now": [], "list then": [], "spans now": [], "spans then": []}
    for i in range(AGAINST_ROUNDS):
        order = [("now", HERE.parent, now_db), ("then", then_root, then_db)]
        for name, root, db in order if i % 2 == 0 else order[::-1]:
            listed, spans = _worker(root, db)
            rounds[f"list {name}"].append(listed)
            rounds[f"spans {name}"].append(spans)
    return rounds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=int, default=5_000, help="traces to write and ingest (default 5,000)")
    parser.add_argument("--against", default=RELEASE_BEFORE, metavar="REV", help="the release to read against")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "traces.jsonl"
        _capture_bench().write_traces(src, args.traces)  # type: ignore[attr-defined]
        packed, plain = str(Path(tmp) / "packed.db"), str(Path(tmp) / "plain.db")
        ingest(src, packed, compress=True)
        ingest(src, plain, compress=False)
        otlp, a, b = src.stat().st_size, store_bytes(packed), store_bytes(plain)
        with TraceStore(packed, readonly=True) as store:
            runs = store.count()
            ids = [r.trace_id for r in store.runs(limit=1000)]
        timing: dict[str, list[float]] = {"list packed": [], "list plain": [], "spans packed": [], "spans plain": []}
        for _ in range(ROUNDS):
            timing["list plain"].append(list_runs(plain))
            timing["list packed"].append(list_runs(packed))
            timing["spans plain"].append(read_spans(plain, ids))
            timing["spans packed"].append(read_spans(packed, ids))
        rounds = against(args.against, src, Path(tmp))
    med = {k: statistics.median(v) for k, v in timing.items()}
    ratio = a / otlp
    list_x, spans_x = med["list packed"] / med["list plain"], med["spans packed"] / med["spans plain"]
    print(f"{runs:,} runs from {args.traces:,} traces")
    print(f"(a) OTLP/JSON {otlp / 1e6:.1f} MB; store {a / 1e6:.1f} MB compressed, {b / 1e6:.1f} MB plain")
    print(f"    {a / runs:,.0f} vs {b / runs:,.0f} bytes a run; compressed / OTLP/JSON = {ratio:.2f} (target <= 0.5)")
    print(
        f"(b) listing runs: {med['list packed']:.0f} vs {med['list plain']:.0f} us a run = {list_x:.2f}x; "
        f"a trace's spans: {med['spans packed']:.0f} vs {med['spans plain']:.0f} us = {spans_x:.2f}x"
    )
    for key, values in timing.items():
        print(f"    {key}: " + ", ".join(f"{v:.0f}" for v in values))
    if rounds is None:
        print(f"(c) not measured: {args.against} is not in this clone's history (a shallow clone?), or git is missing")
        return 1
    ok = ratio <= 0.5
    print(f"(c) against {args.against} (before compression), {AGAINST_ROUNDS} rounds, now vs then:")
    for read in ("list", "spans"):
        now, then = rounds[f"{read} now"], rounds[f"{read} then"]
        x = statistics.median(now) / statistics.median(then)
        each = sorted(a / b for a, b in zip(now, then))
        label = "listing runs" if read == "list" else "a trace's spans"
        print(
            f"    {label}: {statistics.median(now):.1f} vs {statistics.median(then):.1f} us = {x:.2f}x "
            f"(target <= 1.0x; rounds {each[0]:.2f}-{each[-1]:.2f}, median {statistics.median(each):.2f})"
        )
        ok = ok and x <= 1.0
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
