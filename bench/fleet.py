"""Receivers into one PostgreSQL database against one receiver into SQLite, side by side in one run.

    python bench/fleet.py [--spans N] [--receivers 1,2,4]

A throwaway PostgreSQL cluster (Debian's binaries, PostgreSQL's default durability: fsync and
synchronous commit on) is started on 127.0.0.1. Then, one set-up after another: one ``harvester serve``
(a receiving and a store process, as ``bench/receiver.py`` runs it) into a fresh SQLite file, and 1, 2
and 4 of them into one fresh PostgreSQL database. Two sender processes of two threads each send the
exporter's encoded bytes of realistic agent runs (``bench/receiver.py``'s traffic: batches of 512
spans, fresh trace ids), thread k to receiver k mod N. Printed for each: spans acknowledged per second,
spans per second until every trace is stored, the first read's runs per second (it normalizes the
stored traces into runs), CPU per span of the receiving processes, the store
processes and the PostgreSQL server, and the cores each kept busy: what limits it.

On a 2-core machine every set-up shares the same two cores with its senders, so the figures show
where the CPU goes, not how far more machines would go: ``docs/performance.md`` works that out.
"""

from __future__ import annotations

import argparse
import importlib.util
import multiprocessing
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harvester.store import TraceStore
from tests.builders.postgres import cluster, create_database, pg_bin

HERE = Path(__file__).resolve().parent
SENDERS, THREADS = 2, 2


def _receiver_bench() -> Any:
    spec = importlib.util.spec_from_file_location("receiver_bench", HERE / "receiver.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["receiver_bench"] = module  # spawned children find its functions by this name
    spec.loader.exec_module(module)
    return module


def sender(conn: Any, urls: list[str], first: int, per_thread: int, seed: int) -> None:
    """``bench/receiver.py``'s sender, its threads spread over the receivers."""
    rb = _receiver_bench()
    import random

    cut = rb.encoded(rb.template())
    rng = random.Random(seed)
    work = [[rb.renamed(cut, rng) for _ in range(per_thread)] for _ in range(THREADS)]
    failures: list[int] = []
    pool = [
        threading.Thread(target=rb.send, args=(urls[(first + k) % len(urls)], batches, failures))
        for k, batches in enumerate(work)
    ]
    conn.send("ready")
    conn.recv()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    conn.send(len(failures))


def serve(conn: Any, store: str) -> None:
    _receiver_bench().serve(conn, store, True)


def _postgres_cpu() -> float:
    """CPU seconds of every PostgreSQL server process (they run as another user, so by name), with those
    of the backends that exited (the postmaster's reaped children): a receiver's connections end with it."""
    total = 0.0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() != "postgres":
                continue
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")
        except (OSError, IndexError, ValueError):
            continue
    return total


def run(store: str, receivers: int, spans: int) -> dict[str, Any]:
    """One set-up: ``receivers`` serve processes into ``store``; the figures."""
    rb = _receiver_bench()
    spawn = multiprocessing.get_context("spawn")
    per_thread = max(1, spans // (rb.BATCH * THREADS * SENDERS))
    total = per_thread * THREADS * SENDERS * rb.BATCH
    servers = []
    for _ in range(receivers):
        here, there = spawn.Pipe()
        proc = spawn.Process(target=serve, args=(there, store))
        proc.start()
        servers.append((here, proc))
    urls = [f"http://127.0.0.1:{here.recv()}/v1/traces" for here, _ in servers]
    pipes, senders = [], []
    for i in range(SENDERS):
        mine, theirs = spawn.Pipe()
        proc = spawn.Process(target=sender, args=(theirs, urls, i * THREADS, per_thread, 11 + i))
        proc.start()
        pipes.append(mine)
        senders.append(proc)
    for pipe in pipes:
        assert pipe.recv() == "ready"
    for here, _ in servers:
        here.send("cpu")
    cpu0 = [here.recv() for here, _ in servers]
    pg0 = _postgres_cpu()
    t0 = time.perf_counter()
    for pipe in pipes:
        pipe.send("go")
    failures = sum(pipe.recv() for pipe in pipes)
    acked = time.perf_counter() - t0
    for proc in senders:
        proc.join()
    for here, _ in servers:
        here.send("stop")
    cpu1 = [here.recv() for here, _ in servers]
    stored_at = time.perf_counter() - t0
    pg1 = _postgres_cpu()
    for _, proc in servers:
        proc.join()
    with TraceStore(store) as ts:
        s0 = time.perf_counter()
        ts.settle()
        settle = time.perf_counter() - s0
        runs = ts.count()
    receive = sum(b[0] - a[0] for a, b in zip(cpu0, cpu1))
    storing = sum(b[1] - a[1] for a, b in zip(cpu0, cpu1))
    dropped = [h for _, _, h in cpu1 if h["dropped_spans"] or h["dropped_runs"] or h["rejected_spans"]]
    return {
        "total": total,
        "acked": total / acked,
        "stored": total / stored_at,
        "receive_us": receive / total * 1e6,
        "store_us": storing / total * 1e6,
        "pg_us": (pg1 - pg0) / total * 1e6,
        "cores": (receive + storing + pg1 - pg0) / stored_at,
        "runs_ok": runs == total // rb.SPANS_PER_RUN and not failures and not dropped,
        "settle_runs_s": runs / settle if settle else 0.0,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spans", type=int, default=200_000, help="spans per set-up (default 200,000)")
    parser.add_argument("--receivers", default="1,2,4", help="PostgreSQL set-ups: receivers each (default 1,2,4)")
    args = parser.parse_args()
    bin_dir = pg_bin()
    if bin_dir is None:
        raise SystemExit("no PostgreSQL binaries in /usr/lib/postgresql/*/bin (apt-get install postgresql)")
    rows = []
    with tempfile.TemporaryDirectory() as tmp, cluster(bin_dir, durable=True) as server:
        rows.append(("SQLite, 1 receiver", run(str(Path(tmp) / "t.db"), 1, args.spans)))
        for n in (int(x) for x in args.receivers.split(",")):
            url = create_database(server, f"fleet{n}")
            rows.append((f"PostgreSQL, {n} receiver{'s' * (n > 1)}", run(url, n, args.spans)))
    print(f"{rows[0][1]['total']:,} spans per set-up, {SENDERS} senders x {THREADS} threads, {os.cpu_count()} cores")
    print(
        f"{'':24} {'acked/s':>9} {'stored/s':>9} {'recv us':>8} {'store us':>9} {'pg us':>6} {'cores':>6} "
        f"{'read runs/s':>11}  all stored"
    )
    for name, r in rows:
        print(
            f"{name:24} {r['acked']:9,.0f} {r['stored']:9,.0f} {r['receive_us']:8.1f} {r['store_us']:9.1f} "
            f"{r['pg_us']:6.1f} {r['cores']:6.2f} {r['settle_runs_s']:11,.0f}  {'yes' if r['runs_ok'] else 'NO'}"
        )
    print("acked/s: spans acknowledged a second; stored/s: until every trace is stored; us: CPU per span of the")
    print("receiving processes, the store processes and the PostgreSQL server; cores: the three together;")
    print("read runs/s: the first read, normalizing the stored traces into runs (the reader pays it)")
    ok = all(r["runs_ok"] for _, r in rows)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
