"""Deferred normalization: capture keeps sampled-in traces whole in the store's inbox, and the first
read normalizes them into exactly the runs the worker would have written."""

from __future__ import annotations

import dataclasses
import multiprocessing
import sqlite3
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from opentelemetry import trace as otel
from opentelemetry.sdk.trace import TracerProvider

import harvester.cli as cli_module
from harvester.cli import main as cli
from harvester.conventions import run_data_from_spans
from harvester.errors import StoreError
from harvester.intake import HarvestingSpanProcessor, run_rows, sampled_in
from harvester.redact import Redactor
from harvester.store import SCHEMA_VERSION, TraceStore, inbox_row, run_row, spans_blob
from tests.builders.capture import agent_run, setup
from tests.builders.files import readable

SECRETS = [
    "sk-proj-AAAAbbbbCCCCddddEEEEffff",
    "bob.secret@example.com",
    "4111 1111 1111 1111",
    "ghp_ZZZZyyyyXXXXwwwwVVVVuuuu1234",
    "hunter2pass",
]


def twin(tmp_path: Path, **kw: Any) -> tuple[HarvestingSpanProcessor, HarvestingSpanProcessor, TracerProvider]:
    """Two processors on one provider, so they see the same spans: deferred (default) and eager."""
    deferred = HarvestingSpanProcessor(str(tmp_path / "deferred.db"), **kw)
    eager = HarvestingSpanProcessor(str(tmp_path / "eager.db"), defer_normalize=False, **kw)
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(deferred)
    provider.add_span_processor(eager)
    return deferred, eager, provider


def table_counts(path: Path) -> tuple[int, int]:
    with sqlite3.connect(path) as c:
        return (
            c.execute("SELECT COUNT(*) FROM runs").fetchone()[0],
            c.execute("SELECT COALESCE(SUM(count), 0) FROM inbox").fetchone()[0],
        )


def dumped(path: Path) -> list[tuple[Any, Any]]:
    with TraceStore(path) as s:
        runs = sorted(s.runs(), key=lambda r: r.trace_id)
        return [(r.model_dump(mode="json"), [sp.to_dict() for sp in s.spans(r.trace_id)]) for r in runs]


def test_the_first_read_settles_the_inbox_into_the_runs_the_worker_would_have_written(tmp_path: Path) -> None:
    deferred, eager, provider = twin(tmp_path)
    tracer = provider.get_tracer("t")
    agent_run(tracer, prompt="plain")
    agent_run(tracer, prompt="fails", tool_error=RuntimeError("upstream down"))
    agent_run(tracer, kind="openllmetry_nested")
    parent = tracer.start_span("request")
    agent_run(tracer, prompt="first", context=otel.set_span_in_context(parent))
    agent_run(tracer, prompt="second", context=otel.set_span_in_context(parent))
    parent.end()
    assert deferred.force_flush() and eager.force_flush()
    assert table_counts(tmp_path / "deferred.db") == (0, 4)  # nothing normalized on the worker
    assert deferred.stats()["deferred"] == 4 and eager.stats()["written"] == 5
    assert dumped(tmp_path / "deferred.db") == dumped(tmp_path / "eager.db")
    assert table_counts(tmp_path / "deferred.db") == (5, 0)
    deferred.shutdown()
    eager.shutdown()


def test_no_secret_reaches_the_file_before_or_after_settling(tmp_path: Path) -> None:
    deferred, eager, provider = twin(tmp_path)
    tracer = provider.get_tracer("t")
    agent_run(
        tracer,
        prompt=f"my key is {SECRETS[0]}, mail {SECRETS[1]}",
        args=orjson.dumps({"query": "x", "card": SECRETS[2], "api_key": "plain-looking-value"}).decode(),
        result=f"token for you: {SECRETS[3]}",
        answer=f"db at https://admin:{SECRETS[4]}@db.local",
    )
    assert deferred.force_flush() and eager.force_flush()
    deferred.shutdown()
    eager.shutdown()

    def raw() -> bytes:
        return b"".join(readable(p) for p in tmp_path.iterdir() if p.name.startswith("deferred.db"))

    for leaked in [*SECRETS, "plain-looking-value"]:
        assert leaked.encode() not in raw(), leaked
    assert dumped(tmp_path / "deferred.db") == dumped(tmp_path / "eager.db")
    for leaked in [*SECRETS, "plain-looking-value"]:
        assert leaked.encode() not in raw(), leaked


def test_what_sampling_needs_to_judge_is_normalized_on_the_worker(tmp_path: Path) -> None:
    deferred, eager, provider = twin(tmp_path, sample_rate=0.5)
    tracer = provider.get_tracer("t")
    for i in range(40):
        agent_run(tracer, prompt=f"run {i}", tool_error=RuntimeError("down") if i % 4 == 0 else None)
    assert deferred.force_flush() and eager.force_flush()
    st = deferred.stats()
    kept_whole = st["deferred"]
    assert 0 < kept_whole < 40 and st["traces"] == 40
    assert st["runs_seen"] == 40 - kept_whole  # the sampled-out ones, read to keep their failures
    assert table_counts(tmp_path / "deferred.db") == (st["written"], kept_whole)
    assert dumped(tmp_path / "deferred.db") == dumped(tmp_path / "eager.db")
    with TraceStore(tmp_path / "deferred.db") as s:
        for run in s.runs():
            assert run.failed or sampled_in(run.trace_id, 0.5)
    deferred.shutdown()
    eager.shutdown()


@pytest.mark.parametrize(
    "redact",
    [
        {"patterns": [r"ORD-\d+"]},
        {"fields": {"kb_search": ["args.query"]}},
        Redactor(key="k"),
        type("Mine", (Redactor,), {})(),
    ],
)
def test_a_redaction_the_reader_cannot_repeat_is_done_on_the_worker(tmp_path: Path, redact: Any) -> None:
    proc = HarvestingSpanProcessor(str(tmp_path / "t.db"), redact=redact)
    assert proc.writer.defer is False
    proc.shutdown()


def test_a_trace_in_parts_is_settled_whole(tmp_path: Path) -> None:
    proc, tracer, _ = setup(tmp_path, max_trace_age_s=0.05)
    session = tracer.start_span("chat session")
    ctx = otel.set_span_in_context(session)
    agent_run(tracer, prompt="turn 1", context=ctx)
    proc.force_flush()
    time.sleep(0.1)
    proc.force_flush()  # the busy trace gives up its ended run: one inbox part
    agent_run(tracer, prompt="turn 2", context=ctx)
    session.end()
    proc.force_flush()  # the rest: a second part of the same trace
    assert table_counts(tmp_path / "t.db")[1] == 2
    with sqlite3.connect(tmp_path / "t.db") as c:  # both pieces are marked: settled in order, under the lock
        assert c.execute("SELECT SUM(pieces) FROM inbox").fetchone() == (2,)
    with TraceStore(tmp_path / "t.db") as s:
        runs = list(s.runs(newest_first=False))
        assert [r.prompt for r in runs] == ["turn 1", "turn 2"]
        assert len(s.spans(runs[0].trace_id)) == 9  # each span once
    proc.shutdown()


def test_traces_list_settles_a_store_it_opens_read_only_and_shows_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc, tracer, _ = setup(tmp_path, batch_size=2)
    for i in range(5):
        agent_run(tracer, prompt=f"run {i}")
    proc.shutdown()
    monkeypatch.setattr(cli_module, "SETTLE_BAR_MIN", 3)
    res = CliRunner().invoke(cli, ["traces", "list", "--json", "--store", str(tmp_path / "t.db")])
    assert res.exit_code == 0, res.output
    assert "normalizing captured traces" in res.stderr
    assert len([orjson.loads(line) for line in res.stdout.splitlines()]) == 5
    assert table_counts(tmp_path / "t.db") == (5, 0)


def _read_count(path: str, out: Any) -> None:
    with TraceStore(path) as s:
        out.put(s.count())


def test_readers_in_two_processes_settle_each_batch_once(tmp_path: Path) -> None:
    proc, tracer, _ = setup(tmp_path, batch_size=10)
    for i in range(200):
        agent_run(tracer, prompt=f"run {i}")
    proc.shutdown()
    assert table_counts(tmp_path / "t.db") == (0, 200)
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    readers = [ctx.Process(target=_read_count, args=(str(tmp_path / "t.db"), out)) for _ in range(2)]
    for r in readers:
        r.start()
    for r in readers:
        r.join(60)
    assert [out.get(timeout=5), out.get(timeout=5)] == [200, 200]
    assert table_counts(tmp_path / "t.db") == (200, 0)


def test_an_unreadable_inbox_row_is_counted_and_the_rest_settles(tmp_path: Path) -> None:
    proc, tracer, _ = setup(tmp_path, batch_size=1)
    agent_run(tracer, prompt="before")
    proc.force_flush()
    with sqlite3.connect(tmp_path / "t.db") as c:
        c.execute(
            "INSERT INTO inbox (received, redact, count, pieces, traces) VALUES (0, 1, 3, 0, ?)", (b"[[{}, [[1, 2]]]]",)
        )
    agent_run(tracer, prompt="after")
    proc.shutdown()
    with TraceStore(tmp_path / "t.db") as s:
        done = []
        s.on_settle = lambda n, total: done.append((n, total))
        counts = s.settle()
        assert counts["unreadable"] == 3 and counts["runs"] == 2
        assert done[-1] == (5, 5)
        assert sorted(r.prompt for r in s.runs()) == ["after", "before"]
    assert table_counts(tmp_path / "t.db") == (2, 0)


def _schema_1_store(path: Path) -> None:
    with TraceStore(path) as s:
        s.add_many([])
    with sqlite3.connect(path) as c:
        c.execute("DROP TABLE inbox")
        c.execute("UPDATE harvester_meta SET value = '1' WHERE key = 'version'")


def test_a_schema_1_store_gains_an_inbox_and_a_read_only_open_leaves_it_alone(tmp_path: Path) -> None:
    _schema_1_store(tmp_path / "t.db")
    with TraceStore(tmp_path / "t.db", readonly=True) as s:
        assert s.count() == 0 and s.pending() == 0
    with sqlite3.connect(tmp_path / "t.db") as c:
        assert c.execute("SELECT value FROM harvester_meta WHERE key = 'version'").fetchone() == ("1",)
    proc, tracer, _ = setup(tmp_path)
    agent_run(tracer)
    proc.shutdown()
    with sqlite3.connect(tmp_path / "t.db") as c:
        assert c.execute("SELECT value FROM harvester_meta WHERE key = 'version'").fetchone() == (str(SCHEMA_VERSION),)
    with TraceStore(tmp_path / "t.db", readonly=True) as s:
        assert s.count() == 1


def test_a_read_that_cannot_settle_says_why(tmp_path: Path) -> None:
    proc, tracer, _ = setup(tmp_path)
    agent_run(tracer)
    proc.shutdown()
    with TraceStore(tmp_path / "t.db") as s:
        s._connect().execute("PRAGMA query_only = ON")  # what a read-only file or mount does to writes
        with pytest.raises(StoreError, match="1 captured traces wait to be normalized"):
            s.count()


def _inbox_of(store: TraceStore, traces: list[list[Any]], pieces: int = 0) -> None:
    store.add_many([], inbox=[inbox_row([spans_blob(t) for t in traces], redacted=True, pieces=pieces)])


def _nested_run_spans(tmp_path: Path) -> list[Any]:
    """The spans of one OpenLLMetry run: invoke_agent > workflow > (chat, tool, chat), as SpanData."""
    proc, tracer, _ = setup(tmp_path, defer_normalize=False)
    agent_run(tracer, kind="openllmetry_nested")
    proc.shutdown()
    with TraceStore(tmp_path / "t.db") as s:
        (run,) = s.runs()
        return s.spans(run.trace_id)


def test_a_read_settles_what_was_there_when_it_began_while_capture_goes_on(tmp_path: Path) -> None:
    spans = _nested_run_spans(tmp_path)
    with TraceStore(tmp_path / "busy.db") as store:
        for _ in range(3):
            _inbox_of(store, [spans])
        with TraceStore(tmp_path / "busy.db") as app:
            store.on_settle = lambda done, total: _inbox_of(app, [spans])  # a batch lands after each one settled
            store.settle()
        assert store.pending() == 3  # the three that landed meanwhile wait for the next read


def test_runs_stored_meanwhile_by_another_writer_are_merged_not_overwritten(tmp_path: Path) -> None:
    """Settling normalizes outside the write lock; if the trace's stored runs changed meanwhile (an
    ingest of more of it), it reads them again, so the result is what a settle after them would give."""
    spans = _nested_run_spans(tmp_path)
    outer = [s for s in spans if s.parent_id is None]
    inner = [s for s in spans if s.parent_id is not None]
    outer_row = run_row(run_data_from_spans(outer)[0], outer)

    with TraceStore(tmp_path / "after.db") as store:  # the order with nothing in flight
        store.add_many([outer_row])
        _inbox_of(store, [inner])
        expected = [(r.run_id, r.trajectory()) for r in store.runs()]
    assert len(expected) == 1

    with TraceStore(tmp_path / "race.db") as store, TraceStore(tmp_path / "race.db") as ingest_meanwhile:
        _inbox_of(store, [inner])
        normalize = store._normalize
        calls = []

        def racing(*args: Any) -> Any:
            calls.append(store._conn.in_transaction)  # type: ignore[union-attr]
            if len(calls) == 1:
                ingest_meanwhile.add_many([outer_row])
            return normalize(*args)

        store._normalize = racing  # type: ignore[method-assign]
        assert [(r.run_id, r.trajectory()) for r in store.runs()] == expected
        assert calls == [False, False]  # outside the write lock, and read again once


def test_pieces_of_traces_are_settled_inside_one_transaction(tmp_path: Path) -> None:
    spans = _nested_run_spans(tmp_path)
    with TraceStore(tmp_path / "p.db") as store:
        _inbox_of(store, [spans], pieces=1)
        normalize = store._normalize
        seen = []
        store._normalize = lambda *a: seen.append(store._conn.in_transaction) or normalize(*a)  # type: ignore
        assert store.count() == 1 and seen == [True]


@pytest.mark.parametrize("framework", ["pydantic_ai", "langchain-openinference", "langchain-openllmetry"])
@pytest.mark.parametrize("scenario", ["happy", "tool_error", "retry", "denied"])
def test_real_framework_runs_come_out_of_traces_show_the_same_deferred_or_not(
    tmp_path: Path, framework: str, scenario: str
) -> None:
    from tests.frameworks import langchain_agent, pydantic_ai_agent

    deferred, eager, provider = twin(tmp_path)
    if framework == "pydantic_ai":
        pydantic_ai_agent.run_scenario(scenario, provider)
    else:
        langchain_agent.run_scenario(scenario, provider, instrumentor=framework.split("-")[1])
    deferred.shutdown()
    eager.shutdown()

    def shown(store: str) -> list[Any]:
        runner = CliRunner()
        listed = runner.invoke(cli, ["traces", "list", "--json", "--store", str(tmp_path / store)])
        ids = [orjson.loads(line)["trace_id"] for line in listed.stdout.splitlines()]
        assert ids, listed.output
        return [
            orjson.loads(runner.invoke(cli, ["traces", "show", tid, "--json", "--store", str(tmp_path / store)]).stdout)
            for tid in ids
        ]

    assert shown("deferred.db") == shown("eager.db")


def test_an_inbox_row_id_is_never_reused(tmp_path: Path) -> None:
    """A reader deletes the batch it read by id: an emptied inbox must not hand that id to a new batch."""
    spans = _nested_run_spans(tmp_path)
    with TraceStore(tmp_path / "ids.db") as store:
        ids = []
        for _ in range(3):
            _inbox_of(store, [spans])
            ids.append(store._conn.execute("SELECT MAX(id) FROM inbox").fetchone()[0])  # type: ignore[union-attr]
            assert store.count() == 1 and store.pending() == 0
        assert ids == sorted(set(ids))


def test_a_listing_in_progress_blocks_no_write_and_sees_one_snapshot(tmp_path: Path) -> None:
    """A read streams its rows; another thread's write on the same store object must go through even
    when another process wrote meanwhile, and the listing must not show the rows written under it."""
    with TraceStore(tmp_path / "l.db") as store:
        from tests.builders.store import make_run

        store.add_many([make_run(i) for i in range(600)])
        listing = store.runs()
        next(listing)
        with TraceStore(tmp_path / "l.db") as other_process:
            other_process.add_many([make_run(1000)])
        store.add_many([make_run(1001)])  # the capture worker's flush, on the same object
        assert 1 + sum(1 for _ in listing) == 600
        assert store.count() == 602


def test_a_run_stored_in_the_place_of_another_is_seen_as_a_change(tmp_path: Path) -> None:
    """The check that stored runs did not change while a batch was normalized must not be fooled by a
    replaced run that got the same row id back (an ingest of the rest of the trace)."""
    spans = _nested_run_spans(tmp_path)
    outer = [s for s in spans if s.parent_id is None]
    inner = [s for s in spans if s.parent_id is not None]
    tid = spans[0].trace_id

    def moved(span_id: str) -> str:  # another id, never the same one
        return f"{int(span_id[0], 16) ^ 8:x}{span_id[1:]}"

    other = [
        dataclasses.replace(
            s,
            span_id=moved(s.span_id),
            parent_id=s.parent_id and moved(s.parent_id),
            attributes={**s.attributes, "gen_ai.agent.name": "sibling"},
        )
        for s in spans
    ]
    with TraceStore(tmp_path / "aba.db") as store, TraceStore(tmp_path / "aba.db") as ingest_meanwhile:
        _inbox_of(store, [inner])
        assert store.count() == 1  # the inner run, stored alone
        _inbox_of(store, [other])  # a whole second run of the same trace, captured elsewhere
        normalize = store._normalize

        def racing(*args: Any) -> Any:
            if racing.calls == 0:  # type: ignore[attr-defined]
                whole = store.spans_of([tid])[tid] + outer
                ingest_meanwhile.add_many(
                    run_rows(run_data_from_spans(whole), whole, None, lambda r: None), replace_traces=[tid]
                )
            racing.calls += 1  # type: ignore[attr-defined]
            return normalize(*args)

        racing.calls = 0  # type: ignore[attr-defined]
        store._normalize = racing  # type: ignore[method-assign]
        runs = store.get(tid)
        assert sorted(str(r.agent) for r in runs) == ["sibling", "support"] and racing.calls == 2  # type: ignore[attr-defined]
        assert len(store.spans(tid)) == 2 * len(spans)


def test_a_damaged_store_read_while_settling_is_a_store_error(tmp_path: Path) -> None:
    spans = _nested_run_spans(tmp_path)
    path = tmp_path / "damaged.db"
    with TraceStore(path) as store:
        _inbox_of(store, [spans])
        assert store.count() == 1
        _inbox_of(store, [spans])  # more of a stored trace waits in the inbox
    with sqlite3.connect(path) as c:
        root = c.execute("SELECT rootpage FROM sqlite_master WHERE name = 'sqlite_autoindex_runs_1'").fetchone()[0]
        page = c.execute("PRAGMA page_size").fetchone()[0]
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    with open(path, "r+b") as f:  # the (trace_id, run_id) index, and nothing else
        f.seek((root - 1) * page)
        f.write(b"\xff" * 64)
    with TraceStore(path) as store, pytest.raises(StoreError, match="cannot read") as err:
        store.count()
    assert "write access" not in str(err.value)


def test_settling_inside_an_open_listing_takes_each_batch_once(tmp_path: Path) -> None:
    """A read nested in a listing (``for run in store.runs(): store.get(...)``) runs on a connection whose
    open cursor holds an older snapshot: batches it settled still show there. It used to take them
    again, forever, once an app captured a batch meanwhile; each batch is now taken once, in id order."""
    from harvester.intake import ingest_files
    from tests.builders.store import agent_trace, write_otlp

    path = tmp_path / "t.db"
    f = write_otlp(tmp_path / "t.jsonl", [agent_trace(f"cd{i:030x}") for i in range(300)], lines=True)
    with TraceStore(path) as store:
        ingest_files([str(f)], store, jobs=1)
    capture = TraceStore(path)
    capture.add_many([], inbox=[inbox_row([spans_blob(agent_trace("e" * 32))], redacted=True)])
    reader = TraceStore(path, readonly=True)
    calls = []

    def captured_meanwhile(done: int, total: int) -> None:
        calls.append(done)
        assert len(calls) < 20, "settle took the same batches again and again"
        if len(calls) == 1:
            capture.add_many([], inbox=[inbox_row([spans_blob(agent_trace("f" * 32))], redacted=True)])

    reader.on_settle = captured_meanwhile
    read = 0
    for run in reader.runs():  # more than 256 rows: the cursor stays open between fetches
        read += len(reader.get(run.trace_id))
    assert read == 301 and len(calls) <= 3  # the 300 ingested, and the batch settled before the listing began
    assert reader.count() == 302 and capture.pending() == 0
    capture.close()
    reader.close()
