"""The store shared by several processes, on both engines, and what only a PostgreSQL store has (a URL,
a server that is down, its indexes). The behaviour tests of tests/test_store.py run on both engines too."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import multiprocessing
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator

import orjson
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from harvester.errors import StoreError
from harvester.harvest import harvest
from harvester.instrument import agent_run, tool
from harvester.intake import HarvestingSpanProcessor
from harvester.spans import SpanData, to_otlp
from harvester.store import TraceStore, inbox_row, spans_blob
from tests.builders.store import agent_trace, make_run, make_span, run_together

TRACES = 60


def _parts(i: int) -> tuple[list[SpanData], list[SpanData]]:
    """Trace ``i`` in two parts, each a run on its own: the agent and its chat; a sub-agent and its tool."""
    tid = f"{i + 1:032x}"
    chat, tool, root = agent_trace(tid)
    sub = make_span(
        tid, "4" * 16, root.span_id, **{"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "billing"}
    )
    return [root, chat], [sub, dataclasses.replace(tool, parent_id=sub.span_id)]


def _write_parts(url: str, which: int) -> None:
    """One receiver: its part of every trace into the inbox, a few traces a batch (as capture writes them)."""
    with TraceStore(url) as store:
        parts = [_parts(i)[which] for i in range(TRACES)]
        for k in range(0, TRACES, 3):
            batch = parts[k : k + 3]
            store.add_many([], inbox=[inbox_row([spans_blob(p) for p in batch], redacted=True, pieces=len(batch))])


def _read_until(url: str, stop_at: float) -> None:
    """A reader meanwhile: every read settles what is in the inbox."""
    with TraceStore(url) as store:
        while time.monotonic() < stop_at:
            store.count()


def _stored(store: TraceStore) -> list[tuple[str, str, str | None, int]]:
    return sorted((r.trace_id, r.run_id, r.agent, len(r.trajectory())) for r in store.runs())


@pytest.mark.slow
def test_parts_of_one_trace_written_by_two_processes_at_once_merge_into_whole_runs(store_url, tmp_path) -> None:
    """Two receivers got different parts of the same traces and a reader settles while they write:
    every trace ends up exactly as if it had arrived whole, on either engine."""
    with TraceStore(tmp_path / "whole.db") as whole:
        whole.add_many([], inbox=[inbox_row([spans_blob(a + b) for a, b in map(_parts, range(TRACES))], redacted=True)])
        expected = _stored(whole)
    assert len(expected) >= TRACES
    TraceStore(store_url).close()  # the schema, before three processes race to make it
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_write_parts, args=(store_url, which)) for which in (0, 1)]
    procs.append(ctx.Process(target=_read_until, args=(store_url, time.monotonic() + 3)))
    run_together(procs, 120)
    with TraceStore(store_url) as store:
        assert _stored(store) == expected
        assert store.pending() == 0
        for i in range(TRACES):
            tid = f"{i + 1:032x}"
            assert {s.span_id for s in store.spans(tid)} == {"1" * 16, "2" * 16, "3" * 16, "4" * 16}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _replicas(url: str, n: int, *, idle: float) -> Iterator[tuple[list[int], list[str]]]:
    """``n`` ``harvester serve`` processes on the store ``url``, up and answering; SIGTERM at the end,
    when ``outputs`` gets what each printed."""
    ports = [_free_port() for _ in range(n)]
    command = [sys.executable, "-m", "harvester", "serve", "--store", url, "--idle-seconds", str(idle)]
    procs = [
        subprocess.Popen([*command, "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        for port in ports
    ]
    outputs: list[str] = []
    try:
        for port in ports:
            deadline = time.monotonic() + 30
            while True:
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).read()
                    break
                except OSError:
                    assert time.monotonic() < deadline, "harvester serve did not come up"
                    time.sleep(0.1)
        yield ports, outputs
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        outputs += [proc.communicate(timeout=60)[0].decode() for proc in procs]


def _post(port: int, spans: list[SpanData]) -> None:
    body = orjson.dumps(to_otlp(spans))
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/traces", data=body, headers={"Content-Type": "application/json"}
    )
    urllib.request.urlopen(request, timeout=10).read()


def test_two_receivers_on_one_database_store_each_trace_whole(postgres_url, tmp_path) -> None:
    """Two ``harvester serve`` replicas behind a load balancer: each gets part of every trace over OTLP/HTTP."""
    with TraceStore(tmp_path / "whole.db") as whole:
        whole.add_many([], inbox=[inbox_row([spans_blob(a + b) for a, b in map(_parts, range(TRACES))], redacted=True)])
        expected = _stored(whole)
    with _replicas(postgres_url, 2, idle=0.5) as (ports, outputs):
        for i in range(TRACES):
            for which, port in enumerate(ports):
                _post(port, _parts(i)[which])
        with TraceStore(postgres_url) as reader:  # a reader while they write
            reader.count()
    assert all(f"stored {TRACES} traces" in out for out in outputs), outputs
    with TraceStore(postgres_url) as store:
        assert _stored(store) == expected


@pytest.mark.slow
def test_a_store_settled_by_two_readers_at_once_settles_each_batch_once(store_url) -> None:
    with TraceStore(store_url) as store:
        for i in range(TRACES):
            a, b = _parts(i)
            store.add_many([], inbox=[inbox_row([spans_blob(a + b)], redacted=True)])
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_read_until, args=(store_url, time.monotonic() + 1)) for _ in range(3)]
    run_together(procs, 60)
    with TraceStore(store_url) as store:
        assert store.pending() == 0 and len({r[0] for r in _stored(store)}) == TRACES


def test_a_postgres_url_never_shows_its_password(postgres_url: str) -> None:
    url = postgres_url.replace("postgresql://postgres@", "postgresql://postgres:hunter2@")  # trust auth ignores it
    with TraceStore(url) as store:
        store.add(make_run(1))
        assert store.path == postgres_url and "hunter2" not in repr(store)
        assert store.count() == 1
    with pytest.raises(StoreError, match="opened read-only") as caught:
        TraceStore(url, readonly=True).add(make_run(2))
    assert "hunter2" not in str(caught.value)


def test_a_database_that_is_missing_or_foreign_is_one_line(postgres_url: str) -> None:
    import psycopg

    missing = postgres_url.rsplit("/", 1)[0] + "/nope"
    with pytest.raises(StoreError, match=r"cannot connect to PostgreSQL at 127\.0\.0\.1:\d+ .*nope") as caught:
        TraceStore(missing)
    assert "\n" not in str(caught.value)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE runs (x int)")
    with pytest.raises(StoreError, match="tables of its own named runs"):
        TraceStore(postgres_url)


def test_postgres_has_the_readers_indexes_and_prune_uses_them(postgres_url: str) -> None:
    import psycopg

    with TraceStore(postgres_url) as store:
        old = "2020-01-01T00:00:00Z"
        store.add_many([(make_run(i, failed=i < 2, started=old), None) for i in range(6)] + [(make_run(9), None)])
        assert store.prune(keep_days=30) == 4 and store.count() == 3 and store.count(failed=True) == 2
        assert [r.run_id for r in store.runs(agent="support", limit=1)] == [f"{9:016x}"]
    with psycopg.connect(postgres_url) as conn:
        indexes = {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'runs'")}
        conn.execute("SET enable_seqscan = off")  # three rows: a scan would win, whatever the indexes
        plans = [
            " ".join(r[0] for r in conn.execute(f"EXPLAIN SELECT run FROM runs WHERE {where} ORDER BY ts DESC"))
            for where in ("agent = 'support'", "failed = 1", "ts > 0")
        ]
    assert {"runs_ts", "runs_agent", "runs_failed", "runs_stop"} <= indexes
    assert ["runs_agent" in plans[0], "runs_failed" in plans[1], "runs_ts" in plans[2]] == [True] * 3, plans


def test_a_forked_child_opens_its_own_connections(postgres_url: str) -> None:
    with TraceStore(postgres_url) as store:
        store.add(make_run(1))
        ctx = multiprocessing.get_context("fork")
        child = ctx.Process(target=store.add, args=(make_run(2),))
        child.start()
        child.join(30)
        assert child.exitcode == 0
        store.add(make_run(3))  # the parent's pool still works: the child never used nor closed it
        assert store.count() == 3


# -- the fleet set-up of docs/collector.md ------------------------------------------------------------
class _LoadBalancer(SpanProcessor):
    """Each ended span to the next of several exporters in turn, as a load balancer in front of the
    replicas spreads export requests: the parts of every trace reach different receivers."""

    def __init__(self, processors: list[BatchSpanProcessor]) -> None:
        self.processors = processors
        self.turn = itertools.count()

    def on_end(self, span: ReadableSpan) -> None:
        self.processors[next(self.turn) % len(self.processors)].on_end(span)

    def shutdown(self) -> None:
        for p in self.processors:
            p.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return all(p.force_flush(timeout_millis) for p in self.processors)


@tool
def refund_policy(order_id: str) -> str:
    return f"Order {order_id}: refunds within 30 days of delivery."


def _health(port: int) -> dict:
    return orjson.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).read())


def test_a_fleet_fed_by_the_real_exporter_stores_what_the_in_process_hook_stores(postgres_url, tmp_path) -> None:
    """Two ``harvester serve`` replicas on one database, each export request of the real
    ``OTLPSpanExporter`` going to either (spans dealt out in turn, so every trace is split): the runs
    stored are the ones ``HarvestingSpanProcessor`` stores of the same traces in-process, span for span."""
    local = str(tmp_path / "local.db")
    with _replicas(postgres_url, 2, idle=0.3) as (ports, _):
        provider = TracerProvider(resource=Resource({"service.name": "fleet"}))
        exporters = [
            BatchSpanProcessor(OTLPSpanExporter(endpoint=f"http://127.0.0.1:{p}/v1/traces"), schedule_delay_millis=50)
            for p in ports
        ]
        provider.add_span_processor(_LoadBalancer(exporters))
        provider.add_span_processor(HarvestingSpanProcessor(local))
        harvests, writing = [], threading.Event()

        def harvest_meanwhile() -> None:  # the nightly job, run while the replicas write
            with TraceStore(postgres_url) as store:
                while not writing.is_set():
                    harvests.append(harvest(store, tmp_path / "meanwhile").runs)

        reader = threading.Thread(target=harvest_meanwhile)
        reader.start()
        for i in range(12):
            order = f"A{1000 + i}"
            with agent_run("support", f"Can I return order {order}?", model="m1", tracer_provider=provider) as run:
                run.model_call("m1", tool_calls=[{"name": "refund_policy", "arguments": {"order_id": order}}])
                refund_policy(order_id=order)
                run.model_call("m1")
                run.finish(f"Yes, order {order} can be returned within 30 days.")
        provider.shutdown()
        # A part without its agent span waits at its receiver until the part with it is stored by the
        # other (``orphan_seconds``); shut down once every trace is stored, it merges on the way out.
        deadline = time.monotonic() + 30
        while sum(_health(p)["traces_written"] for p in ports) < 12:
            assert time.monotonic() < deadline, [_health(p) for p in ports]
            time.sleep(0.1)
        writing.set()
        reader.join(60)
    assert harvests and not reader.is_alive()
    with TraceStore(postgres_url) as fleet, TraceStore(local) as hook:
        assert harvest(fleet, tmp_path / "cases").runs == harvest(hook, tmp_path / "cases-hook").runs == 12
        assert fleet.count() == hook.count() == 12
        ours, theirs = (
            {
                r.trace_id: (r.model_dump(mode="json"), sorted(orjson.dumps(s.to_dict()) for s in ts.spans(r.trace_id)))
                for r in ts.runs()
            }
            for ts in (fleet, hook)
        )
        assert ours == theirs
        assert all(len(run[0]["calls"]) == 1 for run in ours.values())  # the tool part, from the other receiver


@pytest.mark.parametrize("readonly", [False, True])
def test_an_older_postgresql_store_says_the_current_schema_in_its_first_write(postgres_url, readonly) -> None:
    """Rows written now are packed as an older harvester cannot read: the store's version must say so in
    the same transaction as the first of them (a write, or settling the inbox on a read-only open)."""
    import psycopg

    from harvester.store import SCHEMA_VERSION

    def version() -> str:
        with psycopg.connect(postgres_url) as conn:
            return conn.execute("SELECT value FROM harvester_meta WHERE key = 'version'").fetchone()[0]

    with TraceStore(postgres_url) as store:
        store.count()
    with psycopg.connect(postgres_url) as conn:
        conn.execute("UPDATE harvester_meta SET value = '3' WHERE key = 'version'")
    run = make_run(1)
    with TraceStore(postgres_url) as store:
        assert store.count() == 0 and version() == "3"  # reading changes nothing
        store.add_many([], inbox=[inbox_row([spans_blob(agent_trace(run.trace_id))], redacted=True)])
    if readonly:  # the inbox row above was the first write; start again from an older mark
        with psycopg.connect(postgres_url) as conn:
            conn.execute("UPDATE harvester_meta SET value = '3' WHERE key = 'version'")
    with TraceStore(postgres_url, readonly=readonly) as store:
        assert store.count() == 1
    assert version() == str(SCHEMA_VERSION)


def test_four_threads_each_reading_inside_a_listing_share_one_store(postgres_url) -> None:
    """A listing holds a pooled connection until it ends and a read nested in it takes another: four
    threads of one process, each inside a listing at once, all finish (the pool of 4 starved them)."""
    with TraceStore(postgres_url) as store:
        traces = [spans_blob(agent_trace(f"dd{i:030x}")) for i in range(300)]
        store.add_many([], inbox=[inbox_row(traces, redacted=True)])
        assert store.count() == 300
    store = TraceStore(postgres_url)
    threads = 4
    barrier = threading.Barrier(threads, timeout=60)
    read: dict[int, int | str] = {}

    def listing(k: int) -> None:
        try:
            runs = store.runs()
            first = next(runs)  # the listing's cursor is open, holding its connection
            barrier.wait()  # every thread holds one before any nested read
            n = len(store.get(first.trace_id))
            for run in runs:
                n += len(store.get(run.trace_id))
            read[k] = n
        except Exception as exc:  # the assertion below shows it
            read[k] = f"{type(exc).__name__}: {exc}"

    workers = [threading.Thread(target=listing, args=(k,)) for k in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join(120)
    store.close()
    assert read == {k: 300 for k in range(threads)}
