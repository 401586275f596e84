"""TraceStore: schema guard, idempotent writes, filters, retention, concurrency, OTLP in and out."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import zlib
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from harvester.config import load_config
from harvester.errors import InputError, NotFoundError, OtlpFormatError, StoreError
from harvester.intake import ingest_files
from harvester.model import Run, ToolCall
from harvester.spans import SpanData, spans_from_otlp, to_otlp
from harvester.store import SCHEMA_VERSION, TraceStore, export_otlp, failure_summary, inbox_row, spans_blob
from harvester.store._codec import PACKED, packed, unpacked
from tests.builders.files import readable
from tests.builders.store import agent_trace, make_run, make_span, run_together, write_otlp


@pytest.fixture
def store(store_url: str) -> TraceStore:
    with TraceStore(store_url) as s:
        yield s


def test_add_get_roundtrip_and_idempotent(store: TraceStore) -> None:
    run = make_run(1)
    spans = [make_span(run.trace_id, "a" * 16, None, x=1)]
    store.add(run, spans)
    store.add(run.model_copy(update={"answer": "new"}), spans)
    assert store.count() == 1
    (got,) = store.get(run.trace_id)
    assert got.answer == "new" and got.calls == run.calls
    assert store.spans(run.trace_id) == spans
    assert store.get(run.trace_id[:28])[0].run_id == run.run_id  # unique prefix
    assert store.get("f" * 32) == [] and store.spans("f" * 32) == []


def test_default_path_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARVESTER_STORE", str(tmp_path / "env.db"))
    with TraceStore() as s:
        assert s.path == str(tmp_path / "env.db")
    monkeypatch.delenv("HARVESTER_STORE")
    monkeypatch.chdir(tmp_path)
    with TraceStore() as s:
        assert (tmp_path / ".harvester" / "traces.db").exists()


def test_filters_streaming_and_limit(store: TraceStore) -> None:
    store.add_many(
        [
            (
                make_run(i, failed=i % 3 == 0, agent="a" if i % 2 else "b", started=f"2026-11-{10 + i:02d}T00:00:00Z"),
                None,
            )
            for i in range(10)
        ]
    )
    assert store.count() == 10 and store.count(failed=True) == 4
    assert [r.run_id for r in store.runs(limit=2)] == [f"{9:016x}", f"{8:016x}"]
    assert all(r.failed for r in store.runs(failed=True))
    assert {r.agent for r in store.runs(agent="a")} == {"a"}
    since = [r for r in store.runs(since="2026-11-15T00:00:00Z", until="2026-11-18T00:00:00Z")]
    assert len(since) == 3
    it = store.runs()
    assert next(it).trace_id and hasattr(it, "__next__")
    assert list(store.runs(since="1d")) == []  # all older than a day
    with pytest.raises(InputError, match="cannot read time"):  # a bad --since is the user's input, not the store
        list(store.runs(since="yesterday-ish"))


def test_ambiguous_prefix_and_ids_like(store: TraceStore) -> None:
    store.add(make_run(1, trace="abc1" + "0" * 28))
    store.add(make_run(2, trace="abc2" + "0" * 28))
    with pytest.raises(NotFoundError, match="ambiguous"):
        store.get("abc")
    assert store.ids_like("abc9") == ["abc1" + "0" * 28, "abc2" + "0" * 28]
    assert store.ids_like("zzz")  # nothing shares a prefix: the newest ids


def test_failure_summary() -> None:
    assert failure_summary(make_run(1)) is None
    assert failure_summary(make_run(1, failed=True)) == "stop error: Timeout"
    run = make_run(1).model_copy(update={"calls": [ToolCall(name="pay", status="blocked")]})
    assert failure_summary(run) == "pay blocked"


def test_not_sqlite_is_refused_untouched(tmp_path: Path) -> None:
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"hello, not a database" * 10)
    before = bad.read_bytes()
    with pytest.raises(StoreError, match="bad.db.*not an SQLite"):
        TraceStore(bad)
    assert bad.read_bytes() == before


def test_corrupt_sqlite_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "corrupt.db"
    bad.write_bytes(b"SQLite format 3\x00" + os.urandom(4000))
    with pytest.raises(StoreError, match="corrupt.db"):
        TraceStore(bad)


def test_foreign_sqlite_is_refused_untouched(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE users (id INTEGER)")
    con.commit()
    con.close()
    before = other.read_bytes()
    with pytest.raises(StoreError, match="other.db.*not a harvester trace store.*users"):
        TraceStore(other)
    assert other.read_bytes() == before and not (tmp_path / "other.db-wal").exists()


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    TraceStore(path).close()
    con = sqlite3.connect(path)
    con.execute("UPDATE harvester_meta SET value = '99' WHERE key = 'version'")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="newer harvester"):
        TraceStore(path)


def test_readonly_missing(store_url: str) -> None:
    with pytest.raises(StoreError, match="ingest"):
        TraceStore(store_url, readonly=True)


def test_prune_keeps_failures_longest(store: TraceStore) -> None:
    old = "2020-01-01T00:00:00Z"
    store.add_many(
        [(make_run(i, failed=i < 3, started=old), [make_span(f"{i:032x}", "a" * 16, x="y" * 2000)]) for i in range(10)]
    )
    store.add(make_run(99))  # recent
    assert store.prune(keep_days=30) == 7
    assert store.count() == 4 and store.count(failed=True) == 3
    assert store.prune(keep_days=30, keep_failed_days=30) == 3
    # ~12 KB a row as stored (random hex deflates to 60%: rows are compressed, sizes are what they take)
    store.add_many(
        [(make_run(i, failed=i < 3), [make_span(f"{i:032x}", "a" * 16, x=os.urandom(10_000).hex())]) for i in range(10)]
    )
    store.prune(max_mb=0.04)
    assert store.count(failed=True) == 3 and store.count() == 3  # successes went first
    store.prune(max_mb=0)
    assert store.count() == 0


def _writer(path: str, start: int) -> None:
    with TraceStore(path) as s:
        for k in range(10):
            s.add_many([(make_run(start + k * 10 + j), None) for j in range(10)])


def test_concurrent_writers(store_url: str) -> None:
    path = store_url
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(path, n * 1000)) for n in range(4)]
    run_together(procs, 60)
    with TraceStore(path) as s:
        assert s.count() == 400


def test_write_error_is_store_error(store_url: str) -> None:
    s = TraceStore(store_url, readonly=False)
    s.close()
    ro = TraceStore(store_url, readonly=True)
    with pytest.raises(StoreError, match="read-only"):
        ro.add(make_run(1))


def test_surrogates_and_binary_are_stored(store: TraceStore) -> None:
    store.add(make_run(7, agent="nul\x00agent"))  # PostgreSQL's text takes no NUL: still stored, not the batch lost
    assert store.count() == 1
    run = make_run(1).model_copy(update={"answer": "bad \udce9 byte"})
    store.add(run, [make_span(run.trace_id, "a" * 16, v="x\udcff")])
    assert store.get(run.trace_id)[0].answer == "bad \ufffd byte" or "bad" in store.get(run.trace_id)[0].answer
    assert store.spans(run.trace_id)[0].attributes["v"].startswith("x")


# -- OTLP in and out --------------------------------------------------------------------------
def test_ingest_and_export_roundtrip(store: TraceStore, tmp_path: Path) -> None:
    traces = [agent_trace(f"{i:032x}") for i in range(1, 6)]
    f1 = write_otlp(tmp_path / "a.json", traces[:3])
    f2 = write_otlp(tmp_path / "b.jsonl", traces[3:] + [[make_span("e" * 32, "4" * 16)]], lines=True)
    stats = ingest_files([str(f1), str(f2)], store)
    assert (stats.files, stats.runs, stats.spans, stats.no_agent) == (2, 5, 16, 1)
    doc = export_otlp(store, [f"{1:032x}"])
    assert sorted(s.span_id for s in spans_from_otlp(doc)) == sorted(s.span_id for s in traces[0])
    everything = export_otlp(store)
    assert len(list(spans_from_otlp(everything))) == 15
    with pytest.raises(NotFoundError):
        export_otlp(store, ["9" * 32])


def test_ingest_skips_malformed_spans_and_names_bad_files(store: TraceStore, tmp_path: Path) -> None:
    doc = to_otlp(agent_trace("1" * 32))
    doc["resourceSpans"][0]["scopeSpans"][0]["spans"].append({"traceId": "zz", "spanId": 3})
    good = tmp_path / "good.json"
    good.write_bytes(orjson.dumps(doc))
    stats = ingest_files([str(good)], store)
    assert stats.runs == 1 and stats.skipped == 1
    bad = tmp_path / "bad.json"
    bad.write_text('{"resourceSpans": []}\n{not json')
    with pytest.raises(OtlpFormatError, match="bad.json.*line 2"):
        ingest_files([str(bad)], store)
    with pytest.raises(OtlpFormatError, match="nope.json"):
        ingest_files([str(tmp_path / "nope.json")], store)
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}')
    with pytest.raises(OtlpFormatError, match="other.json.*resourceSpans"):
        ingest_files([str(other)], store)


def test_ingest_redacts_and_keeps_big_results(store: TraceStore, tmp_path: Path) -> None:
    big = "x" * (5 * 1024 * 1024)
    f = write_otlp(tmp_path / "s.json", [agent_trace("1" * 32, secret="bob@example.com", tool_result=big)])
    ingest_files([str(f)], store)
    (run,) = store.get("1" * 32)
    assert run.calls[0].result == big
    store.close()
    if store.path.startswith("postgresql://"):
        raw = b"".join(unpacked(blob) for row in _pg_rows(store, "SELECT run, spans FROM runs") for blob in row if blob)
    else:
        raw = readable(Path(store.path)) + (
            readable(Path(store.path + "-wal")) if Path(store.path + "-wal").exists() else b""
        )
    assert b"bob@example.com" not in raw and b"x" * 1000 in raw


def _pg_rows(store: TraceStore, sql: str) -> list[tuple]:
    import psycopg

    with psycopg.connect(store._url) as conn:  # type: ignore[attr-defined]
        return conn.execute(sql).fetchall()


def test_a_write_that_waits_for_another_process_says_so_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    from harvester.store import _connection

    monkeypatch.setattr(_connection, "BUSY_TIMEOUT_MS", 50)
    path = tmp_path / "t.db"
    with TraceStore(path) as store:
        said: list[str] = []
        store.on_wait = said.append
        other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        other.execute("BEGIN IMMEDIATE")  # another writer holds the lock
        timer = threading.Timer(0.3, lambda: other.execute("COMMIT"))
        timer.start()
        store.add(make_run(1))
        timer.join()
        other.close()
        assert store.count() == 1
    assert len(said) == 1 and "another process is writing to it; waiting" in said[0]


def test_a_store_deleted_or_replaced_while_open_is_reopened_at_its_path(tmp_path: Path) -> None:
    """A cleanup job deletes the file under a running writer: the runs must land at the path, not in
    the unlinked file the old connection still holds."""
    path = tmp_path / "t.db"
    with TraceStore(path) as store:
        store.add(make_run(1))
        for name in os.listdir(tmp_path):
            os.remove(tmp_path / name)
        store.add(make_run(2))
        assert store.count() == 1
    with TraceStore(path) as again:
        assert [r.trace_id for r in again.runs()] == [make_run(2).trace_id]


def test_new_stores_use_64_kb_pages(tmp_path: Path) -> None:
    with TraceStore(tmp_path / "t.db") as store:
        store.add(make_run(1))
    assert sqlite3.connect(tmp_path / "t.db").execute("PRAGMA page_size").fetchone() == (65536,)


def test_a_relative_store_path_survives_a_change_of_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "app").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "app")
    with TraceStore(".harvester/traces.db") as store:
        store.add(make_run(1))
        monkeypatch.chdir(tmp_path / "elsewhere")
        store.add(make_run(2))
        assert store.count() == 2
    assert not (tmp_path / "elsewhere" / ".harvester").exists()


def test_spans_stored_by_schema_1_as_objects_still_read(tmp_path: Path) -> None:
    run = make_run(1)
    spans = [
        SpanData(
            run.trace_id,
            f"{i:016x}",
            None if i == 1 else f"{1:016x}",
            f"span {i}",
            start_ns=i,
            attributes={"k": i},
            resource={"service.name": "svc"},
        )
        for i in (1, 2)
    ]
    with TraceStore(tmp_path / "t.db") as store:
        store.add(run, spans)
    with sqlite3.connect(tmp_path / "t.db") as c:
        (blob,) = c.execute("SELECT spans FROM runs").fetchone()
        assert blob.startswith(b"[[{")  # the compact form: [resources, spans]
        c.execute("UPDATE runs SET spans = ?", (orjson.dumps([s.to_dict() for s in spans]),))
    with TraceStore(tmp_path / "t.db") as store:
        assert store.spans(run.trace_id) == spans
        assert store.spans_of([run.trace_id]) == {run.trace_id: spans}


# -- store URLs ---------------------------------------------------------------------------------
def test_a_store_url_is_refused_not_taken_for_a_file_name(tmp_path, monkeypatch):
    """``--store postgresql://...`` used to create a SQLite file called ``postgresql:``; now it opens a
    PostgreSQL store (here one that is down: one line naming host and port, never the password), and
    a URL of any other scheme is refused."""
    from click.testing import CliRunner
    from opentelemetry.sdk.trace import TracerProvider

    from harvester import HarvestingSpanProcessor
    from harvester.cli import main
    from harvester.errors import StoreError
    from harvester.instrument import agent_run
    from tests.builders.cli import one_line_error

    monkeypatch.chdir(tmp_path)
    pytest.importorskip("psycopg")
    url = "postgresql://harvester:hunter2@127.0.0.1:1/traces"  # nothing listens on port 1
    down = "cannot connect to PostgreSQL at 127.0.0.1:1"
    (tmp_path / "harvester.toml").write_text(f'store = "{url}"\n')
    for spelling in (url, url.replace("postgresql://", "postgres://")):
        with pytest.raises(StoreError, match=down) as caught:
            TraceStore(spelling)
        assert "\n" not in str(caught.value) and "hunter2" not in str(caught.value)
        assert str(caught.value).startswith(spelling.split("://")[0] + "://harvester@127.0.0.1:1/traces: ")
    with pytest.raises(StoreError, match="unknown store URL scheme"):
        TraceStore("redis://cache:6379")
    runner = CliRunner()
    for args, env in [
        (["traces", "list", "--store", url], {}),
        (["traces", "list"], {"HARVESTER_STORE": url}),
        (["ingest", "-", "--store", url], {}),
        (["traces", "list", "--config", "harvester.toml"], {}),  # a config's store used to be joined to its folder
    ]:
        line = one_line_error(runner.invoke(main, args, env=env, input=b""), down)
        assert "hunter2" not in line
    proc = HarvestingSpanProcessor(store=url)  # an app starts at once: the database is first asked at a write
    assert "store_unusable" not in proc.stats()  # asked now, the refused connection would have made it unusable
    provider = TracerProvider()
    provider.add_span_processor(proc)
    with agent_run("support", "refund A1001", tracer_provider=provider) as run:
        run.finish("done")
    provider.force_flush()
    assert proc.stats()["dropped"].get("store_error_traces", 0) + proc.stats()["dropped"].get("store_error", 0) == 1
    assert "hunter2" not in str(proc.stats())
    provider.shutdown()
    assert [p.name for p in tmp_path.iterdir()] == ["harvester.toml"]  # no file named postgresql: or else
    with TraceStore("sqlite:///named.db") as store:  # SQLAlchemy's spelling of a relative file
        assert store.path == "named.db"
    assert (tmp_path / "named.db").is_file()
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "harvester.toml").write_text('store = "sqlite:///beside.db"\n')
    assert load_config(str(tmp_path / "sub" / "harvester.toml")).store == f"sqlite:///{tmp_path / 'sub' / 'beside.db'}"


# -- compressed rows ----------------------------------------------------------------------------
def test_rows_are_stored_compressed_and_read_back_whole(tmp_path: Path) -> None:
    """A run's JSON and its spans repeat each other's content; each is deflated on the way in (the store
    takes a fraction of the bytes), told apart on the way out by its first byte."""
    run = make_run(1, failed=True)
    run.prompt = "Refund order A1001, please. " * 40
    spans = [make_span(run.trace_id, f"{i:016x}", x="the refund policy says thirty days " * 30) for i in range(5)]
    with TraceStore(tmp_path / "t.db") as store:
        store.add(run, spans)
        assert store.get(run.trace_id) == [run] and store.spans(run.trace_id) == sorted(spans, key=lambda s: s.start_ns)
    with sqlite3.connect(tmp_path / "t.db") as c:
        raw_run, raw_spans, size = c.execute("SELECT run, spans, size FROM runs").fetchone()
    assert raw_run[:2] == raw_spans[:2] == PACKED  # the tag of a raw deflate stream: not JSON
    assert size == len(raw_run) + len(raw_spans)  # retention counts what the rows take
    plain = len(orjson.dumps(run.model_dump(mode="json"))) + sum(len(orjson.dumps(s.to_dict())) for s in spans)
    assert size < plain / 5
    # the secret greps read the file through ``readable``: what a compressed row holds shows there only
    files = [p for p in tmp_path.iterdir() if p.name.startswith("t.db")]
    assert not any(b"thirty days" in p.read_bytes() for p in files)
    assert any(b"thirty days" in readable(p) for p in files)


OLDER_ROWS = [
    pytest.param("2", lambda blob: blob, id="schema-2-plain-json"),
    pytest.param("3", lambda blob: zlib.compress(blob, 1), id="schema-3-zlib-streams"),
]


@pytest.mark.parametrize(("older", "pack"), OLDER_ROWS)
def test_an_older_store_reads_as_it_is_and_becomes_current_when_written(
    tmp_path: Path, older: str, pack: Callable[[bytes], bytes]
) -> None:
    path = tmp_path / "t.db"
    old = make_run(1)
    old.prompt = "an older harvester wrote this row " * 30
    with TraceStore(path) as store:
        store.add(old, [make_span(old.trace_id, "a" * 16, x="plain " * 200)])
    with sqlite3.connect(path) as c:  # as an older harvester left it: its version, its rows
        run, spans = c.execute("SELECT run, spans FROM runs").fetchone()
        c.execute("UPDATE runs SET run = ?, spans = ?", (pack(unpacked(run)), pack(unpacked(spans))))
        c.execute("UPDATE harvester_meta SET value = ? WHERE key = 'version'", (older,))

    def version() -> str:
        with sqlite3.connect(path) as c:
            return c.execute("SELECT value FROM harvester_meta WHERE key = 'version'").fetchone()[0]

    with TraceStore(path, readonly=True) as store:
        assert store.get(old.trace_id) == [old] and len(store.spans(old.trace_id)) == 1
    assert version() == older  # reading changes nothing
    new = make_run(2)
    with TraceStore(path) as store:
        store.add(new)
        assert store.get(old.trace_id) == [old] and store.get(new.trace_id) == [new]
    assert version() == str(SCHEMA_VERSION)  # an older harvester now refuses the file instead of misreading rows


@pytest.mark.parametrize("older", ["2", "3"])
def test_settling_an_older_store_opened_read_only_marks_it_current(tmp_path: Path, older: str) -> None:
    """A read settles the inbox even on a read-only open, and the runs it writes are packed: the
    version must say so in the same transaction, or an older harvester misreads them."""
    path = tmp_path / "t.db"
    trace_id = "c" * 32
    with TraceStore(path) as store:
        store.add_many(
            [], inbox=[inbox_row([spans_blob([make_span(trace_id, "a" * 16, x="plain " * 200)])], redacted=True)]
        )
    with sqlite3.connect(path) as c:
        c.execute("UPDATE harvester_meta SET value = ? WHERE key = 'version'", (older,))
    with TraceStore(path, readonly=True) as store:
        assert store.settle()["traces"] == 1
    with sqlite3.connect(path) as c:
        assert c.execute("SELECT count(*) FROM inbox").fetchone() == (0,)
        assert c.execute("SELECT value FROM harvester_meta WHERE key = 'version'").fetchone() == (str(SCHEMA_VERSION),)


def test_a_damaged_packed_blob_is_a_value_error() -> None:
    assert unpacked(packed(b"[" + b"1," * 400 + b"1]")) == b"[" + b"1," * 400 + b"1]"
    with pytest.raises(ValueError, match="damaged compressed blob"):
        unpacked(PACKED + b"\xff" * 40)


def test_a_row_with_keys_this_version_does_not_know_still_reads(tmp_path: Path) -> None:
    """Rows are read with unknown keys ignored (a field a newer harvester added, the derived lists of
    schema 2), everywhere else in the model a typo is refused."""
    path = tmp_path / "t.db"
    run = make_run(1)
    with TraceStore(path) as store:
        store.add(run)
    with sqlite3.connect(path) as c:
        data = orjson.loads(unpacked(c.execute("SELECT run FROM runs").fetchone()[0]))
        data["added_later"] = {"by": "a newer harvester"}
        data["requested_tools"] = [c["name"] for c in data["calls"]]
        data["calls"][0]["latency_ms"] = 12.5
        c.execute("UPDATE runs SET run = ?", (packed(orjson.dumps(data)),))
    with TraceStore(path, readonly=True) as store:
        assert store.get(run.trace_id) == [run] and list(store.runs()) == [run]
    with pytest.raises(ValueError, match="added_later"):
        Run.model_validate(data)


def test_with_an_older_pydantic_core_rows_read_under_the_models_own_rules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pydantic-core before the per-call ``extra`` refuses the keyword: the read falls back to the
    models' own validation, which reads every row this version wrote."""
    current = Run.__pydantic_validator__

    class Older:
        def validate_python(self, data: object, **options: object) -> object:
            if "extra" in options:
                raise TypeError("validate_python() got an unexpected keyword argument 'extra'")
            return current.validate_python(data, **options)

    monkeypatch.setattr(Run, "__pydantic_validator__", Older())
    run = make_run(1, failed=True)
    with TraceStore(tmp_path / "t.db") as store:
        store.add(run)
        assert store.get(run.trace_id) == [run] and list(store.runs()) == [run]
