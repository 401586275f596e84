"""``harvester ingest``'s peak memory and throughput as its input grows: it must stream, not hold the file.

    python bench/ingest.py [--traces 10000,100000] [--jobs N] [--document] [--against REV]

For each size, N agent traces (7 spans each, as ``bench/capture.py`` makes them) are written as the
Collector's file exporter writes them (OTLP/JSON lines), then ingested by ``harvester ingest`` in a
process of its own (with its default worker processes) into a fresh store. Its peak memory is the
largest sum of the resident set sizes of the command and its workers, sampled every 20 ms from
``/proc``. Printed per size: the file's size, the runs stored, the time taken and the peak; then
the peak at the largest size over the peak at the smallest (target <= 1.5x). ``--document``: the same
spans as one OTLP/JSON document per size (one resource, one scope, every span in one list), which
ingest cuts into slices as it reads it.

Throughput (issue 32): runs stored per second of wall time at the largest size (target >= 5,000 on
2 cores), and the CPU the command and its workers spent per run (user + system, from the kernel's
accounting of the finished process tree): on a shared machine the wall rate moves with the other
jobs' load, the CPU per run much less. The command runs as ``pip install`` leaves it, its bytecode
compiled (``PYTHONDONTWRITEBYTECODE`` dropped, or every process would compile its modules again).
``--against REV``: each size is also ingested by ``REV``'s ``harvester`` package (from this clone's
history) right after this checkout's, so that a before and an after meet the same machine.

The file for each size is written once into ``--keep DIR`` when given (1,000,000 traces is 5 GB).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from capture import agent_loop, installed  # bench/, this script's folder, is first on sys.path
from store import release_env

HERE = Path(__file__).resolve().parent
TARGET = 1.5
RATE_FLOOR = 5_000  # runs/s at the largest size


def write_traces(path: Path, traces: int) -> None:
    """As ``bench/capture.py`` writes them (one request of 100 traces a line), made 1,000 traces at a
    time so that a million need no more memory than a thousand."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    from harvester.spans import from_readable, to_otlp

    captured: list[Any] = []

    class Keep(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            captured.extend(spans)
            return SpanExportResult.SUCCESS

    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(Keep()))
    tracer = provider.get_tracer("bench")
    with open(path, "wb") as f:
        for start in range(0, traces, 1000):
            agent_loop(tracer, min(1000, traces - start), 0)
            spans = [from_readable(s) for s in captured]
            captured.clear()
            for i in range(0, len(spans), 700):
                f.write(orjson.dumps(to_otlp(spans[i : i + 700])) + b"\n")


def as_document(lines: Path, path: Path) -> None:
    """The spans of a file of JSON lines as one document, written a line at a time (one resource and
    scope, as ``write_traces`` makes them)."""
    with open(lines, "rb") as src, open(path, "wb") as f:
        sep = b""
        for line in src:
            rs = orjson.loads(line)["resourceSpans"][0]
            ss = rs["scopeSpans"][0]
            if not sep:
                head = {"resource": rs["resource"], "scope": ss.get("scope", {})}
                f.write(
                    b'{"resourceSpans":[{"resource":%s,"scopeSpans":[{"scope":%s,"spans":['
                    % (orjson.dumps(head["resource"]), orjson.dumps(head["scope"]))
                )
            for span in ss["spans"]:
                f.write(sep + orjson.dumps(span))
                sep = b","
        f.write(b"]}]}]}")


def _tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
                        break
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            continue
    return total


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def ingest(src: Path, store: Path, jobs: int | None, env: dict[str, str]) -> tuple[float, float, int, str]:
    """Seconds, CPU seconds (the command and its workers), peak bytes, and the command's summary line."""
    cmd = [sys.executable, "-m", "harvester", "ingest", str(src), "--store", str(store)]
    if jobs is not None:
        cmd += ["--jobs", str(jobs)]
    cpu0, t0 = _children_cpu(), time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=HERE.parent, env=env)
    peak = 0
    while proc.poll() is None:
        peak = max(peak, _tree_rss(proc.pid))
        time.sleep(0.02)
    seconds, cpu = time.perf_counter() - t0, _children_cpu() - cpu0  # its workers were reaped before it ended
    out = proc.stdout.read().decode() if proc.stdout else ""
    if proc.returncode != 0:
        raise SystemExit(f"harvester ingest failed ({proc.returncode}):\n{out}")
    return seconds, cpu, peak, out.strip().splitlines()[-1] if out.strip() else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", default="10000,100000", help="sizes, comma-separated (default 10000,100000)")
    parser.add_argument("--jobs", type=int, default=None, help="ingest --jobs (default: its own default)")
    parser.add_argument("--keep", type=Path, default=None, help="write (and reuse) the input files here")
    parser.add_argument("--document", action="store_true", help="one OTLP/JSON document per size, not JSON lines")
    parser.add_argument("--against", metavar="REV", help="also ingest each size with REV's harvester")
    args = parser.parse_args()
    sizes = [int(s) for s in args.traces.split(",")]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        sides = {"": installed()}
        if args.against:
            sides[args.against] = release_env(args.against, Path(tmp))
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for k, n in enumerate(sizes):
            src = folder / f"traces-{n}.jsonl"
            if not src.exists():
                write_traces(src, n)
            if args.document:
                src, lines = folder / f"traces-{n}.json", src
                if not src.exists():
                    as_document(lines, src)
            for side, env in sides.items():
                seconds, cpu, peak, summary = ingest(src, Path(tmp) / f"store-{k}{side}.db", args.jobs, env)
                if not side:
                    rows.append((n, src.stat().st_size, seconds, peak))
                print(
                    f"{n:>9,} traces  {src.stat().st_size / 1e6:8.1f} MB  {seconds:7.1f} s  "
                    f"{n / seconds:6,.0f} runs/s  {cpu / n * 1e6:4.0f} µs CPU/run  peak {peak / 2**20:7.1f} MB  {side}"
                )
                print(f"          {summary}")
    ratio = rows[-1][3] / rows[0][3]
    rate = rows[-1][0] / rows[-1][2]
    print(f"peak {rows[-1][0]:,} / {rows[0][0]:,} traces = {ratio:.2f}x (target <= {TARGET}x)")
    print(f"ingest of {rows[-1][0]:,} traces: {rate:,.0f} runs/s (target >= {RATE_FLOOR:,} on 2 cores)")
    ok = ratio <= TARGET and rate >= RATE_FLOOR
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
