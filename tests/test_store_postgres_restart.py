"""PostgreSQL restarting under a writer: the write waits for it and succeeds, and what the connection
pool logs meanwhile is one line each on stderr (no multi-line psycopg error, no traceback)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from harvester.store import TraceStore
from tests.builders.postgres import Server

# A writer as a real process (stderr as a user sees it): a batch, then a line; each next batch after a go.
WRITER = """
import sys
from harvester.store import TraceStore
from tests.builders.store import make_run

with TraceStore(sys.argv[1]) as store:
    for k in range(3):
        if k:
            sys.stdin.readline()
        store.add_many([make_run(10 * k + i) for i in range(5)])
        print(f"wrote {k}", flush=True)
"""


def test_a_restart_mid_ingest_succeeds_and_its_reconnects_are_one_line_each(
    postgres_server: Server, postgres_url: str
) -> None:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, postgres_url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert writer.stdin is not None and writer.stdout is not None
    try:
        assert writer.stdout.readline().strip() == "wrote 0"
        postgres_server.stop()  # the writer's pooled connection is cut; it reconnects while the server is down
        writer.stdin.write("go\n")
        writer.stdin.flush()
        postgres_server.start()
        assert writer.stdout.readline().strip() == "wrote 1"
        writer.stdin.write("go\n")
        writer.stdin.flush()
        out, err = writer.communicate(timeout=120)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    assert writer.returncode == 0, err
    assert out.strip() == "wrote 2"
    lines = err.splitlines()
    assert lines, "the pool logged nothing: the restart was not seen"
    assert all(line.startswith("store (PostgreSQL): ") for line in lines), err
    assert "Traceback" not in err
    with TraceStore(postgres_url, readonly=True) as store:
        assert store.count() == 15
