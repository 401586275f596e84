"""The trace store's size and read speed, with compressed rows and without, side by side in one run.

    python bench/store.py [--traces N]

N agent traces (default 5,000; 7 spans each, args ~100 B, results ~1 KB, as ``bench/capture.py``
makes them) are written as the Collector's file exporter writes them (OTLP/JSON lines) and ingested
twice in this process: into a store as harvester writes it now (run JSON and spans deflated) and into
one with compression off (``PACK_MIN`` out of reach: the rows as before schema 3). Printed:

(a) bytes: the OTLP/JSON file, each store (checkpointed), and the compressed store's ratio to the file
    (target <= 0.5);
(b) reads, medians of 5 interleaved rounds with a warm cache: listing every run (``store.runs()``, what
    ``traces list`` and ``harvest`` read) and reading 1,000 traces' spans (``store.spans``), compressed
    over plain (target <= 1.0x: "reads no slower"; this machine's rounds vary by 10-20%).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harvester.intake import ingest_files
from harvester.store import TraceStore, _codec

HERE = Path(__file__).resolve().parent
ROUNDS = 5


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=int, default=5_000, help="traces to write and ingest (default 5,000)")
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
    med = {k: statistics.median(v) for k, v in timing.items()}
    ratio = a / otlp
    list_x, spans_x = med["list packed"] / med["list plain"], med["spans packed"] / med["spans plain"]
    print(f"{runs:,} runs from {args.traces:,} traces")
    print(f"(a) OTLP/JSON {otlp / 1e6:.1f} MB; store {a / 1e6:.1f} MB compressed, {b / 1e6:.1f} MB plain")
    print(f"    {a / runs:,.0f} vs {b / runs:,.0f} bytes a run; compressed / OTLP/JSON = {ratio:.2f} (target <= 0.5)")
    print(
        f"(b) listing runs: {med['list packed']:.0f} vs {med['list plain']:.0f} us a run = {list_x:.2f}x; "
        f"a trace's spans: {med['spans packed']:.0f} vs {med['spans plain']:.0f} us = {spans_x:.2f}x (target <= 1.0x)"
    )
    for key, values in timing.items():
        print(f"    {key}: " + ", ".join(f"{v:.0f}" for v in values))
    ok = ratio <= 0.5 and list_x <= 1.0 and spans_x <= 1.0
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
