"""``ingest_files`` on worker processes stores exactly what the in-process path stores, and fails the same way."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import orjson
import pytest

from harvester.errors import HarvesterError, OtlpFormatError
from harvester.intake import _ingest as ingest
from harvester.intake import _input, _worker, _workers, ingest_files
from harvester.spans import to_otlp
from harvester.store import TraceStore
from tests.builders.ingest import ingest_with, runs_of, stored, traffic, write_lines


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Send even tiny files to the workers, cut into many chunks (a few lines each)."""
    monkeypatch.setattr(ingest, "PARALLEL_MIN_BYTES", 1)
    monkeypatch.setattr(_input, "CHUNK_BYTES", 4000)
    monkeypatch.setattr(_input, "SLICE_SPANS", 7)


def test_workers_store_the_same_rows_as_in_process(tmp_path: Path, small_chunks: None) -> None:
    f = write_lines(tmp_path / "traces.jsonl", traffic())
    assert f.stat().st_size > 20 * _input.CHUNK_BYTES  # many chunks, so traces straddle workers
    one, rows1 = ingest_with(1, tmp_path, [f])
    two, rows2 = ingest_with(2, tmp_path, [f])
    assert one == two
    assert one["runs"] == 69 and one["no_agent_traces"] == 6 and one["skipped"] == 1
    assert rows1 == rows2
    assert b"user1@example.com" not in b"".join(r[10] + (r[11] or b"") for r in rows2)


@pytest.mark.slow
@pytest.mark.parametrize("jobs", [1, 2])
def test_segments_store_the_runs_of_the_whole_file(
    tmp_path: Path, small_chunks: None, monkeypatch: pytest.MonkeyPatch, jobs: int
) -> None:
    """A big file is written a segment at a time (memory holds one, not the file); a trace whose parts
    lie in several segments, its agent span in any of them, still becomes the runs of the whole file,
    counted once; a trace with no agent span in any part is counted once, at the end."""
    f = write_lines(tmp_path / "traces.jsonl", traffic())
    whole, whole_rows = ingest_with(2, tmp_path, [f])  # one segment
    monkeypatch.setattr(_input, "SEGMENT_BYTES", 3 * _input.CHUNK_BYTES)  # about ten segments
    assert sum(1 for c in _input.Input(open(f, "rb"), b"", str(f), str(f)).chunks() if c is _input.SEGMENT_END) >= 8
    cut, cut_rows = ingest_with(jobs, tmp_path, [f])
    assert cut == whole and cut["runs"] == 69 and cut["traces"] == 66 and cut["no_agent_traces"] == 6
    assert runs_of(cut_rows) == runs_of(whole_rows) and len(cut_rows) == len(whole_rows)


@pytest.mark.slow
def test_jobs_1_cuts_a_big_file_as_the_workers_do(
    tmp_path: Path, small_chunks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--jobs 1`` used to read a big file whole; now it reads the workers' segments, and stores their rows."""
    monkeypatch.setattr(_input, "SEGMENT_BYTES", 3 * _input.CHUNK_BYTES)
    f = write_lines(tmp_path / "traces.jsonl", traffic())
    assert ingest_with(1, tmp_path, [f]) == ingest_with(2, tmp_path, [f])


def test_a_second_file_and_batches(tmp_path: Path, small_chunks: None) -> None:
    spans = traffic(30)
    a = write_lines(tmp_path / "a.jsonl", spans, per_line=3, seed=1)
    b = write_lines(tmp_path / "b.jsonl", spans[: len(spans) // 2], per_line=4, seed=2)  # replaces some runs
    assert ingest_with(1, tmp_path, [a, b], batch_size=7) == ingest_with(2, tmp_path, [a, b], batch_size=7)


def test_one_big_document_is_shared_by_resource_spans(tmp_path: Path, small_chunks: None) -> None:
    spans = traffic(20)
    doc = to_otlp(spans)
    # several resources, so the document is cut into several slices
    doc["resourceSpans"] = [
        {"resource": rs["resource"], "scopeSpans": [{"scope": ss["scope"], "spans": ss["spans"][i : i + 4]}]}
        for rs in doc["resourceSpans"]
        for ss in rs["scopeSpans"]
        for i in range(0, len(ss["spans"]), 4)
    ]
    doc["resourceSpans"].insert(2, "not an object")
    f = tmp_path / "one.json"
    f.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    one, two = ingest_with(1, tmp_path, [f]), ingest_with(2, tmp_path, [f])
    assert one == two and one[0]["skipped"] == 1 and one[0]["runs"] == 23


def test_stdin_is_sent_to_the_workers_as_bytes(
    tmp_path: Path, small_chunks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = write_lines(tmp_path / "traces.jsonl", traffic(30))
    expected = ingest_with(1, tmp_path, [f])
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(f.read_bytes())))
    db = tmp_path / "stdin.db"
    with TraceStore(db) as store:
        stats = ingest_files(["-"], store, jobs=2)
    assert (stats.to_dict(), stored(db)) == expected


@pytest.mark.parametrize(
    "bad, where",
    [
        (b"{not json", "line 9"),
        (b'{"hello": 1}', "line 9: resourceSpans: not an OTLP/JSON traces document"),
        (b'{"resourceSpans": {}}', "line 9: resourceSpans: must be a list"),
    ],
)
def test_a_bad_line_fails_as_in_process(tmp_path: Path, small_chunks: None, bad: bytes, where: str) -> None:
    good = write_lines(tmp_path / "good.jsonl", traffic(10))
    lines = write_lines(tmp_path / "x.jsonl", traffic(40)).read_bytes().split(b"\n")
    lines[5:5] = [b"", b"   "]  # blank lines count
    lines.insert(8, bad)
    lines.insert(30, b"{also not json")  # a later error never wins
    bad_file = tmp_path / "bad.jsonl"
    bad_file.write_bytes(b"\n \n" + b"\n".join(lines))  # leading whitespace is stripped before numbering
    messages = []
    for jobs in (1, 2):
        db = tmp_path / f"bad{jobs}.db"
        with TraceStore(db) as store:
            with pytest.raises(OtlpFormatError) as err:
                ingest_files([str(good), str(bad_file)], store, jobs=jobs)
            assert err.value.file == str(bad_file)
            messages.append(str(err.value))
        assert {r[1] for r in stored(db)} == {f"{i + 1:032x}" for i in range(10)}  # the good file, nothing more
    assert messages[0] == messages[1] and where in messages[0]


def test_a_file_that_is_not_json_lines_fails_as_in_process(tmp_path: Path, small_chunks: None) -> None:
    for i, data in enumerate([b'{\n  "resourceSpans": [\n', b"garbage\n" + b"x" * 10_000, b"[1, 2]\n[3]"]):
        f = tmp_path / f"f{i}.json"
        f.write_bytes(data)
        messages = []
        for jobs in (1, 2):
            with TraceStore(tmp_path / f"n{i}{jobs}.db") as store:
                with pytest.raises(OtlpFormatError) as err:
                    ingest_files([str(f)], store, jobs=jobs)
            messages.append(str(err.value))
        assert messages[0] == messages[1]


def test_small_inputs_stay_in_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = write_lines(tmp_path / "traces.jsonl", traffic(10))
    monkeypatch.setattr(ingest, "Workers", None)  # would fail if used
    with TraceStore(tmp_path / "t.db") as store:
        assert ingest_files([str(f)], store).runs == 11
    with pytest.raises(ValueError):
        ingest_files([str(f)], TraceStore(tmp_path / "u.db"), jobs=0)


needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="the workers must see the monkeypatch")


@pytest.fixture
def forked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fork the workers even when an earlier test left a thread behind (an asyncio executor), which
    makes ingest pick forkserver, whose workers would not see the monkeypatch."""
    monkeypatch.setattr(_workers, "start_method", lambda: "fork")


@needs_fork
def test_a_worker_that_dies_is_an_error_not_a_hang(
    tmp_path: Path, small_chunks: None, forked: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = write_lines(tmp_path / "traces.jsonl", traffic(20))
    monkeypatch.setattr(_worker, "parse_chunk", lambda *a: os._exit(3))
    with TraceStore(tmp_path / "t.db") as store:
        with pytest.raises(HarvesterError, match=r"ingest worker \d .*stopped unexpectedly \(exit code 3\)"):
            ingest_files([str(f)], store, jobs=2)
        assert store.count() == 0


@needs_fork
def test_a_worker_bug_is_reported(
    tmp_path: Path, small_chunks: None, forked: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = write_lines(tmp_path / "traces.jsonl", traffic(20))

    def broken(self: object, spans: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(ingest.RunWriter, "process_trace", broken)
    with TraceStore(tmp_path / "t.db") as store:
        with pytest.raises(HarvesterError, match=r"ingest worker \d failed: RuntimeError: boom"):
            ingest_files([str(f)], store, jobs=2)


def test_progress_is_called_once_per_stored_file(tmp_path):
    example = Path(__file__).resolve().parents[1] / "traces" / "example"
    files = [str(p) for p in sorted(example.glob("*.json"))[:3]]
    seen: list[tuple[int, int | None]] = []
    with TraceStore(tmp_path / "t.db") as store:
        stats = ingest_files(files, store, jobs=1, progress=lambda done, total: seen.append((done, total)))
        assert seen == [(1, 3), (2, 3), (3, 3)] and stats.runs == 3 and store.count() == 3
        ingest_files(iter(files[:1]), store, jobs=1, progress=lambda done, total: seen.append((done, total)))
        assert seen[-1] == (1, None)  # an iterator's length is not known
