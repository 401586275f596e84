"""``harvester serve`` under load: spans/s sustained from the real OTLP exporter, and what it costs.

    python bench/receiver.py [--spans N] [--processes P] [--threads T] [--live-encode] [--store-in-process]

The receiver runs in its own process (so its CPU is measured alone and it does not share a GIL with
the senders), on 127.0.0.1, storing into a fresh SQLite file with redaction on, as ``harvester serve``
does. The senders are P processes (default 2) of T threads each (default 2): several apps exporting
to one receiver. Every thread owns an ``OTLPSpanExporter`` (protobuf over HTTP, keep-alive) and sends
batches of 512 spans: 64 realistic GenAI agent runs of 8 spans (invoke_agent, 4 chat spans with
input/output messages and token usage, 3 tool spans with ~100 B args and ~1 KB results), fresh trace
ids in every batch.

By default each batch is the exact bytes the exporter's encoder makes of the template batch, with its
trace ids replaced, sent by the exporter's own HTTP client: the receiver's traffic is what the
exporter sends, but the senders do not spend a core encoding it. (The Python exporter's protobuf
encoding costs more CPU per span than receiving it; on a 2-core machine the senders would otherwise
measure themselves. In production the receiver sits behind a Collector or other machines' apps.)
``--live-encode`` exports ``ReadableSpan``s through ``exporter.export`` instead, encoding included;
``--store-in-process`` stores in the receiving process, as before ``harvester serve`` had a store process.
Printed:

(a) sustained ingest: spans acknowledged (HTTP 200) per second of wall time (target >= 20,000);
(b) end to end: until every trace is written to the store, final flush included (a trace sampled in is
    stored whole and read into runs at the store's first read, as the processor's are: what that
    costs the reader is printed beside it, for information);
(c) CPU: the receiving process and the store process, seconds, cores busy, microseconds per span;
(d) durability: each request is in the spool on disk (fsync) before its 200; the fsyncs it took.

PASS needs (a) on target and every span received, every run stored, nothing dropped or rejected.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, TraceFlags

from harvester.instrument import agent_run, tool
from harvester.store import TraceStore

TARGET = 20_000
BATCH = 512
SPANS_PER_RUN = 8
RESULT = (
    "Refunds are accepted within 30 days of delivery for unused items in their original packaging. "
    "Shipping costs are not refunded unless the item arrived damaged. "
) * 7  # ~1 KB
ARGS = {"query": "refund policy for delivered orders", "order_id": "A1001", "locale": "en-GB", "limit": 3}


# -- the receiver process -----------------------------------------------------------------------
def serve(conn: Any, store: str, store_process: bool = True) -> None:
    """Run a Receiver as ``harvester serve`` does (storing in its own process) until told to stop; on
    every message report (this process's CPU, the store process's CPU, health)."""
    from harvester.intake import Receiver

    receiver = Receiver(store, port=0, idle_seconds=0.5, store_process=store_process)
    conn.send(receiver.start())
    pid = getattr(receiver.writer, "pid", None)
    while True:
        command = conn.recv()
        store_cpu = _cpu_of(pid)
        if command == "stop":
            receiver.stop(timeout=60)  # joins the store process: its CPU is this process's children's now
            usage = resource.getrusage(resource.RUSAGE_CHILDREN)
            store_cpu = max(store_cpu, usage.ru_utime + usage.ru_stime)
        conn.send((time.process_time(), store_cpu, receiver.health()))
        if command == "stop":
            return


_last_cpu: dict[int, float] = {}


def _cpu_of(pid: int | None) -> float:
    """User + system CPU seconds of a live process (Linux ``/proc``); the last reading once it exits."""
    if pid is None:
        return 0.0
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        _last_cpu[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        pass
    return _last_cpu.get(pid, 0.0)


# -- the senders --------------------------------------------------------------------------------
@tool
def kb_search(query: str, order_id: str, locale: str, limit: int) -> str:
    return RESULT


def template() -> list[ReadableSpan]:
    """One batch of finished spans: 64 agent runs of 8 spans."""
    provider = TracerProvider(resource=Resource({"service.name": "support-api", "deployment.environment": "prod"}))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    for i in range(BATCH // SPANS_PER_RUN):
        with agent_run(
            "support_agent",
            f"Can I still return order A{1000 + i}? It arrived last week.",
            model="gpt-4.1-mini",
            tracer_provider=provider,
        ) as run:
            for _ in range(3):
                run.model_call(
                    "gpt-4.1-mini",
                    input_tokens=1200,
                    output_tokens=80,
                    tool_calls=[{"name": "kb_search", "arguments": ARGS}],
                )
                kb_search(**ARGS)
            run.model_call(
                "gpt-4.1-mini",
                input_tokens=1500,
                output_tokens=120,
                text="Yes: refunds are accepted within 30 days of delivery.",
            )
            run.finish("Yes: refunds are accepted within 30 days of delivery.")
    spans = list(memory.get_finished_spans())
    assert len(spans) == BATCH, len(spans)
    return spans


def renumbered(spans: list[ReadableSpan], rng: random.Random) -> list[ReadableSpan]:
    """The same spans under fresh trace ids: every batch is new traffic, not a retry."""
    ids = {s.context.trace_id: rng.getrandbits(128) for s in spans}
    flags = TraceFlags(TraceFlags.SAMPLED)

    def ctx(c: SpanContext) -> SpanContext:
        return SpanContext(ids[c.trace_id], c.span_id, is_remote=c.is_remote, trace_flags=flags)

    return [
        ReadableSpan(
            name=s.name,
            context=ctx(s.context),
            parent=ctx(s.parent) if s.parent else None,
            resource=s.resource,
            attributes=s.attributes,
            events=s.events,
            links=s.links,
            kind=s.kind,
            status=s.status,
            start_time=s.start_time,
            end_time=s.end_time,
            instrumentation_scope=s.instrumentation_scope,
        )
        for s in spans
    ]


def send(url: str, batches: list[Any], failures: list[int]) -> None:
    """Export every batch: ``ReadableSpan`` lists through ``export``, bytes through the exporter's client."""
    exporter = OTLPSpanExporter(endpoint=url, timeout=30)
    for batch in batches:
        if isinstance(batch, bytes):
            ok = exporter._client.export(batch).success
        else:
            ok = exporter.export(batch) is SpanExportResult.SUCCESS
        if not ok:
            failures.append(1)
    exporter.shutdown()


def encoded(spans: list[ReadableSpan]) -> tuple[list[bytes], list[int], int]:
    """The batch as the exporter encodes it, cut at every trace id: (pieces between them, which trace
    each cut is, how many traces), so a batch under fresh ids is one join, not one encoding."""
    body = encode_spans(spans).SerializePartialToString()
    ids = list(dict.fromkeys(s.context.trace_id.to_bytes(16, "big") for s in spans))
    cuts = sorted((pos, n) for n, tid in enumerate(ids) for pos in _positions(body, tid))
    assert len(cuts) == len(spans), (len(cuts), len(spans))  # each span names its trace once
    pieces, prev = [], 0
    for pos, _ in cuts:
        pieces.append(body[prev:pos])
        prev = pos + 16
    pieces.append(body[prev:])
    return pieces, [n for _, n in cuts], len(ids)


def _positions(body: bytes, needle: bytes) -> list[int]:
    out, at = [], body.find(needle)
    while at >= 0:
        out.append(at)
        at = body.find(needle, at + 16)
    return out


def renamed(template: tuple[list[bytes], list[int], int], rng: random.Random) -> bytes:
    pieces, which, n = template
    fresh = [rng.getrandbits(128).to_bytes(16, "big") for _ in range(n)]
    parts = [pieces[0]]
    for piece, tid in zip(pieces[1:], which):
        parts += (fresh[tid], piece)
    return b"".join(parts)


def sender(conn: Any, url: str, threads: int, per_thread: int, seed: int, live: bool) -> None:
    """One sending process: make its batches, wait for "go", export them from ``threads`` threads,
    report (failures, process CPU seconds, wall seconds from "go" to the last acknowledgement)."""
    spans = template()
    rng = random.Random(seed)  # made before the clock starts: the senders only export, as an app's would
    if live:
        work: list[list[Any]] = [[renumbered(spans, rng) for _ in range(per_thread)] for _ in range(threads)]
    else:
        cut = encoded(spans)
        work = [[renamed(cut, rng) for _ in range(per_thread)] for _ in range(threads)]
    failures: list[int] = []
    pool = [threading.Thread(target=send, args=(url, batches, failures)) for batches in work]
    conn.send("ready")
    conn.recv()
    t0, cpu0 = time.perf_counter(), time.process_time()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    conn.send((len(failures), time.process_time() - cpu0, time.perf_counter() - t0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spans", type=int, default=200_000, help="spans to send in all (default 200,000)")
    parser.add_argument("--processes", type=int, default=2, help="sender processes (default 2)")
    parser.add_argument("--threads", type=int, default=2, help="exporter threads per sender process (default 2)")
    parser.add_argument("--live-encode", action="store_true", help="encode every batch in the senders, on the clock")
    parser.add_argument(
        "--store-in-process", action="store_true", help="store in the receiving process (one GIL), for comparison"
    )
    args = parser.parse_args()
    senders_n = max(1, args.processes)
    per_thread = max(1, args.spans // (BATCH * args.threads * senders_n))
    total = per_thread * args.threads * senders_n * BATCH

    spawn = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory() as tmp:
        here, there = multiprocessing.Pipe()
        child = spawn.Process(target=serve, args=(there, str(Path(tmp) / "t.db"), not args.store_in_process))
        child.start()
        port = here.recv()
        url = f"http://127.0.0.1:{port}/v1/traces"
        pipes, senders = [], []
        for i in range(senders_n):
            mine, theirs = multiprocessing.Pipe()
            proc = spawn.Process(target=sender, args=(theirs, url, args.threads, per_thread, 7 + i, args.live_encode))
            proc.start()
            pipes.append(mine)
            senders.append(proc)
        for pipe in pipes:
            assert pipe.recv() == "ready"
        here.send("cpu")
        cpu0, store0, _ = here.recv()
        t0 = time.perf_counter()
        for pipe in pipes:
            pipe.send("go")
        reports = [pipe.recv() for pipe in pipes]
        ingest_wall = time.perf_counter() - t0
        failures = sum(r[0] for r in reports)
        senders_cpu = sum(r[1] for r in reports)
        for proc in senders:
            proc.join()
        here.send("cpu")
        cpu1, store1, during = here.recv()
        here.send("stop")
        cpu2, store2, health = here.recv()
        e2e_wall = time.perf_counter() - t0
        child.join()
        with TraceStore(str(Path(tmp) / "t.db")) as store:
            s0 = time.perf_counter()
            store.settle()
            settle_s = time.perf_counter() - s0
            stored_runs = store.count()

    ingest_rate = total / ingest_wall
    runs = total // SPANS_PER_RUN
    complete = (
        health["received_spans"] == total
        and stored_runs == runs
        and not failures
        and health["rejected_spans"] == 0
        and not health["dropped_spans"]
        and not health["dropped_runs"]
    )
    mode = "encoding live" if args.live_encode else "encoded ahead by the exporter"
    print(
        f"sent {total:,} spans ({runs:,} runs) in batches of {BATCH} from {senders_n} sender processes "
        f"x {args.threads} exporter threads ({mode})"
    )
    print(f"(a) ingest: {ingest_rate:,.0f} spans/s sustained ({ingest_wall:.2f} s; target >= {TARGET:,})")
    print(f"    traces stored by then: {during['traces_written']:,} of {runs:,}; open traces {during['open_traces']}")
    print(f"(b) end to end, every trace stored: {total / e2e_wall:,.0f} spans/s ({e2e_wall:.2f} s)")
    print(f"    reading them into runs at the first read (the reader pays): {runs / settle_s:,.0f} runs/s")
    receive_us = (cpu2 - cpu0) / total * 1e6
    store_us = (store2 - store0) / total * 1e6
    busy = ((cpu1 - cpu0) + (store1 - store0)) / ingest_wall
    print(f"(c) receiver CPU: {cpu2 - cpu0 + store2 - store0:.2f} s ({busy:.2f} cores while ingesting)")
    print(
        f"    receiving process (HTTP, protobuf decode, trace assembly): {receive_us:.1f} us/span "
        f"= {1e6 / receive_us:,.0f} spans/s per core"
    )
    if store_us:
        print(
            f"    store process (RunWriter: runs, sampling, redaction, SQLite): {store_us:.1f} us/span "
            f"= {1e6 / store_us:,.0f} spans/s per core"
        )
    else:
        print("    storing (RunWriter) in the receiving process: included above (--store-in-process)")
    print(f"    together {receive_us + store_us:.1f} us/span, on {'two processes' if store_us else 'one process'}")
    print(
        f"    senders ({'encode + ' if args.live_encode else ''}HTTP, {senders_n} processes): "
        f"{senders_cpu / ingest_wall:.2f} cores; "
        f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end"
    )
    print(
        f"    received {health['received_spans']:,} spans, stored {stored_runs:,} runs, "
        f"export failures {failures}, rejected {health['rejected_spans']}, "
        f"dropped {health['dropped_spans'] or health['dropped_runs'] or 0}"
    )
    ok = complete and ingest_rate >= TARGET
    if health["spool_syncs"]:
        print(
            f"(d) durable before each 200: {health['export_requests']:,} requests in the spool, "
            f"{health['spool_syncs']:,} fsyncs (group commit)"
        )
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
