"""What the seal's C library checks cost an allowed connection that C code makes (``harvester/replay/_libc.c``).

A tool that reads through psycopg connects from libpq's C code; in a sealed replay whose case may reach the
database (``allow_hosts``), its ``getaddrinfo`` and ``connect`` go through the seal's checks (the GIL
taken, the same Python check as the audit hook's). Measured: ``psycopg.connect(url).close()`` to a
throwaway PostgreSQL on 127.0.0.1 (trust auth), per connection, wall and the calling thread's CPU (where
libpq and the checks run; the replay harness's own threads are not the connection's):

- in a sealed case with the database allowed, against the same process outside any replay (the checks
  pass straight through there), steps interleaved;
- beside it, the same two in a process with ``HARVESTER_SEAL_LIBC=0`` (no C library checks at all): the
  noise band, and what the checks add against no checks.

Target (issue 28): nothing measurable, i.e. sealed within the noise of unsealed. Needs Debian's PostgreSQL
binaries (``apt-get install postgresql``) and psycopg.

    python bench/seal_libc.py [--connections 100] [--steps 10]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WORKER = r"""
import json, sys, time
import psycopg
from harvester.case import AgentCase
from harvester.replay import replay

url, n, steps, host = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
case = AgentCase.model_validate({"id": "c", "status": "accepted", "prompt": "p", "why": "w", "recorded": {}})

def connects():
    wall, cpu = time.perf_counter(), time.thread_time()
    for _ in range(n):
        psycopg.connect(url).close()
    return (time.perf_counter() - wall) / n * 1e6, (time.thread_time() - cpu) / n * 1e6

out = {"unsealed": [], "sealed": []}
connects()  # warm: imports, the first connection
for _ in range(steps):
    out["unsealed"].append(connects())
    got = []
    replay([case], lambda: (lambda prompt: got.append(connects()) or "ok"), timeout=600, allow_hosts=[host])
    out["sealed"].append(got[0])
print(json.dumps(out))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=100, help="connections a step")
    parser.add_argument("--steps", type=int, default=10, help="steps of each kind, interleaved")
    args = parser.parse_args()
    from tests.builders.postgres import cluster, pg_bin

    bin_dir = pg_bin()
    if bin_dir is None:
        raise SystemExit("no PostgreSQL binaries in /usr/lib/postgresql/*/bin (apt-get install postgresql)")
    with cluster(bin_dir, durable=True) as server:
        url, host = server.url("postgres"), f"127.0.0.1:{server.port}"
        rows: dict[str, dict[str, list[list[float]]]] = {}
        for label, env in (("C library checks", {}), ("HARVESTER_SEAL_LIBC=0", {"HARVESTER_SEAL_LIBC": "0"})):
            command = [sys.executable, "-c", WORKER, url, str(args.connections), str(args.steps), host]
            environment = {**os.environ, **env, "PYTHONPATH": str(ROOT)}
            done = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=3600)
            if done.returncode != 0:
                raise SystemExit(done.stderr[-2000:])
            rows[label] = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"psycopg.connect().close() to PostgreSQL on 127.0.0.1, {args.connections} a step, {args.steps} steps")
    cpu: dict[tuple[str, str], float] = {}
    for label, modes in rows.items():
        for mode, steps in modes.items():
            wall = statistics.median(s[0] for s in steps)
            cpu[label, mode] = statistics.median(s[1] for s in steps)
            print(f"  {label:22s} {mode:9s} wall {wall:7.1f} us   cpu {cpu[label, mode]:6.1f} us  a connection")
    checks = cpu["C library checks", "sealed"] - cpu["C library checks", "unsealed"]
    noise = abs(cpu["HARVESTER_SEAL_LIBC=0", "sealed"] - cpu["HARVESTER_SEAL_LIBC=0", "unsealed"])
    verdict = "PASS" if checks <= max(noise, 0.02 * cpu["C library checks", "unsealed"]) else "FAIL"
    print(f"the checks: {checks:+.1f} us CPU a connection; noise band {noise:.1f} us (or 2%): {verdict}")


if __name__ == "__main__":
    main()
