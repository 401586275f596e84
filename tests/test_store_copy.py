"""``harvester traces copy SRC DST``: every run, as stored, between SQLite and PostgreSQL either way; resumable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from harvester.cli import main
from harvester.store import TraceStore, copy_store, inbox_row, spans_blob
from tests.builders.store import agent_trace, make_run, make_span

ENGINES = {"sqlite": None, "postgres": "postgres_url"}


def _store(request: pytest.FixtureRequest, engine: str, tmp_path: Path, name: str) -> str:
    if engine == "sqlite":
        return str(tmp_path / f"{name}.db")
    return str(request.getfixturevalue("postgres_url")) if name == "src" else _second_database(request)


def _second_database(request: pytest.FixtureRequest) -> str:
    """Another database on the same server: ``postgres_url`` gives one per test."""
    server = request.getfixturevalue("postgres_server")
    import psycopg

    name = "copy_dst"
    with psycopg.connect(server.url("postgres"), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
        conn.execute(f"CREATE DATABASE {name}")
    return str(server.url(name))


def _fill(url: str, n: int = 30) -> None:
    with TraceStore(url) as store:
        runs = []
        for i in range(n):
            run = make_run(i, failed=i % 4 == 0)
            run.prompt = f"refund order A{i:04d}, please " * 20
            runs.append((run, [make_span(run.trace_id, f"{j + 1:016x}", x=f"span {j} of {i} " * 30) for j in range(3)]))
        store.add_many(runs)
        # and a trace captured but not yet read into runs: copied as its run
        store.add_many([], inbox=[inbox_row([spans_blob(agent_trace("f" * 32))], redacted=True)])


def _content(url: str) -> dict[str, Any]:
    with TraceStore(url, readonly=True) as store:
        return {
            r.trace_id: (r.model_dump(mode="json"), sorted(orjson.dumps(s.to_dict()) for s in store.spans(r.trace_id)))
            for r in store.runs()
        }


@pytest.mark.parametrize(
    "src_engine, dst_engine",
    [
        ("sqlite", "sqlite"),
        pytest.param("sqlite", "postgres", marks=pytest.mark.postgres),
        pytest.param("postgres", "sqlite", marks=pytest.mark.postgres),
    ],
)
def test_a_copy_holds_every_run_and_its_spans(request, tmp_path, src_engine: str, dst_engine: str) -> None:
    src, dst = _store(request, src_engine, tmp_path, "src"), _store(request, dst_engine, tmp_path, "dst")
    _fill(src)
    with TraceStore(src, readonly=True) as s, TraceStore(dst) as d:
        done = copy_store(s, d, batch=7)
    assert (done.copied, done.present) == (31, 0)
    assert _content(dst) == _content(src) and len(_content(src)) == 31


def test_a_stopped_copy_resumes_and_copies_each_run_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src, dst = str(tmp_path / "src.db"), str(tmp_path / "dst.db")
    _fill(src)
    real = TraceStore.add_many
    calls = {"n": 0}

    def fails_on_the_third(self: TraceStore, items: Any, **kw: Any) -> int:
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(self, items, **kw)

    monkeypatch.setattr(TraceStore, "add_many", fails_on_the_third)
    with TraceStore(src, readonly=True) as s, TraceStore(dst) as d, pytest.raises(KeyboardInterrupt):
        copy_store(s, d, batch=10)
    monkeypatch.setattr(TraceStore, "add_many", real)
    with TraceStore(dst) as d:
        assert d.count() == 20  # two batches landed whole, the third not at all
    result = CliRunner().invoke(main, ["traces", "copy", src, dst])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"copied 11 runs from {src} into {dst} (20 runs already there)"
    assert _content(dst) == _content(src)
    again = CliRunner().invoke(main, ["traces", "copy", src, dst, "--json"])
    assert orjson.loads(again.output) == {"copied": 0, "already_there": 31}


def test_copy_refuses_a_missing_source_in_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["traces", "copy", str(tmp_path / "none.db"), str(tmp_path / "dst.db")])
    assert result.exit_code == 2 and len(result.output.strip().splitlines()) == 1
    assert "no trace store here yet" in result.output
    assert not (tmp_path / "dst.db").exists()
