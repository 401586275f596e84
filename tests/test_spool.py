"""The receiver's write-ahead spool: what a 200 promises (issue 31, item 5). The SIGKILL test under load
is in tests/test_crash_loss.py; these pin the parts: a torn tail, replay at start, segments deleted
once stored, the cap, group commit, one receiver per spool folder."""

from __future__ import annotations

import http.client
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from harvester.intake import Receiver
from harvester.intake import _spool as spool_module
from harvester.intake._spool import Spool, spool_folder
from harvester.spans import to_otlp
from tests.builders.capture import stored
from tests.builders.store import agent_trace

JSON = "application/json"


@pytest.fixture
def store(tmp_path: Path) -> str:
    return str(tmp_path / "traces.db")


def _body(trace_id: str) -> bytes:
    return orjson.dumps(to_otlp(agent_trace(trace_id)))


def _post(rec: Receiver, body: bytes) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", rec.port, timeout=10)
    try:
        conn.request("POST", "/v1/traces", body=body, headers={"Content-Type": JSON})
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def _until(condition: Callable[[], bool], deadline: float = 20.0) -> None:
    """Wait for something the server's threads do; the deadline only stops a broken test from hanging."""
    end = time.monotonic() + deadline
    while not condition():
        assert time.monotonic() < end, "condition never became true"
        time.sleep(0.01)


def _segments(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.wal"))


def test_a_torn_or_corrupt_record_ends_its_segment_and_the_rest_replays(tmp_path: Path):
    """A crash mid-append leaves a partial record (its request got no 200): dropped, the whole ones kept."""
    folder = tmp_path / "spool"
    spool = Spool(folder)
    for i in range(3):
        spool.append(0, f"body {i}".encode(), {f"{i:032x}"})
    spool.close(stored=False)
    (segment,) = _segments(folder)
    whole = segment.read_bytes()
    segment.write_bytes(whole + whole[:11])  # the head and a few bytes of a fourth record
    again = Spool(folder)
    assert [(kind, body) for _, kind, body in again.recover()] == [(0, b"body 0"), (0, b"body 1"), (0, b"body 2")]
    again.close(stored=False)
    segment.write_bytes(whole[:-1] + b"X")  # the last record's checksum no longer matches
    third = Spool(folder)
    assert [body for _, _, body in third.recover()] == [b"body 0", b"body 1"]
    third.close(stored=True)
    assert _segments(folder) == []


def test_what_a_crashed_receiver_spooled_is_stored_at_the_next_start(store: str):
    """The segments a killed ``harvester serve`` left beside the store are replayed into the open
    traces when it starts again, stored, and then deleted."""
    folder = spool_folder(store)
    crashed = Spool(folder)
    crashed.append(1, _body("ab" * 16), {"ab" * 16})
    os.close(crashed._fd)  # the process died: its lock went with it, its segment stayed
    os.close(crashed._owner)
    rec = Receiver(store, port=0, idle_seconds=0.05, redact=False, store_process=True)
    rec.start()
    try:
        assert rec.health()["replayed_spans"] == len(agent_trace("ab" * 16))
        _until(lambda: rec.health()["spool_bytes"] == 0)  # stored, so its segment went
    finally:
        rec.stop(timeout=5)
    assert [run.trace_id for run in stored(store)] == ["ab" * 16]
    assert _segments(folder) == []


def test_a_trace_stays_spooled_until_stored_and_its_segment_then_goes(store: str):
    rec = Receiver(store, port=0, idle_seconds=0.05, redact=False, store_process=True)
    rec.start()
    try:
        assert _post(rec, _body("cd" * 16)) == 200
        assert rec.health()["spool_bytes"] > 0  # on disk before the 200
        _until(lambda: rec.health()["spool_bytes"] == 0)
        assert sum(p.stat().st_size for p in _segments(spool_folder(store))) == 0
        assert rec.health()["traces_written"] == 1
    finally:
        rec.stop(timeout=5)


def test_a_full_spool_answers_503_until_the_store_catches_up(store: str):
    """Over the cap a request is refused, retryable (503), and nothing of it is held."""
    rec = Receiver(store, port=0, idle_seconds=60, redact=False, store_process=True, max_spool_bytes=1)
    rec.start()
    try:
        assert _post(rec, _body("01" * 16)) == 200
        assert _post(rec, _body("02" * 16)) == 503  # the first trace is still open: its segment stays
        assert rec.health()["open_traces"] == 1
    finally:
        rec.stop(timeout=5)
    assert [run.trace_id for run in stored(store)] == ["01" * 16]


def test_concurrent_requests_share_one_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Group commit: while one fsync runs, the records written meanwhile wait for the next, shared one."""
    spool = Spool(tmp_path / "spool")
    synced: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        _until(lambda: spool._written == 8)  # the first sync lasts until every writer has written
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(spool_module.os, "fsync", fsync)
    writers = [threading.Thread(target=spool.append, args=(0, b"x" * 100, {f"{i:032x}"})) for i in range(8)]
    for t in writers:
        t.start()
    for t in writers:
        t.join(30)
    assert len(synced) == 2  # the first writer's, then one for the seven that came during it
    monkeypatch.undo()
    spool.close(stored=True)


def test_receivers_on_one_store_each_get_a_spool_folder_of_their_own(store: str):
    """Replicas on one store never share (or replay) each other's live segments; a receiver started
    after one died takes its folder over."""
    base = spool_folder(store)
    first = Spool.first_free(base, 1 << 20)
    second = Spool.first_free(base, 1 << 20)
    assert (first.folder, second.folder) == (base, base.with_name(base.name + "-2"))
    first.close(stored=True)
    third = Spool.first_free(base, 1 << 20)
    assert third.folder == base
    third.close(stored=True)
    second.close(stored=True)


def test_the_spool_of_a_postgresql_store_is_named_by_its_url():
    a = spool_folder("postgresql://u@db1:5432/traces")
    assert a.parent == Path(".harvester") and a != spool_folder("postgresql://u@db2:5432/traces")
    assert spool_folder("/data/traces.db") == Path("/data/traces.db.spool")
