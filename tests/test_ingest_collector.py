"""What ingest does with Python's garbage collector: off while a chunk is parsed, the held spans frozen
until their segment is written, and a caller's own settings left as they were."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

from harvester.intake import _ingest, ingest_files
from harvester.intake._collector import Held, paused
from harvester.store import TraceStore
from tests.builders.store import agent_trace, write_otlp


def test_paused_turns_collections_off_inside_and_restores_what_was() -> None:
    assert gc.isenabled()
    with paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with paused():
            pass
        assert not gc.isenabled()  # a caller that had it off keeps it off
    finally:
        gc.enable()
    with pytest.raises(RuntimeError), paused():
        raise RuntimeError
    assert gc.isenabled()


def test_held_freezes_only_when_the_caller_had_nothing_frozen() -> None:
    assert gc.get_freeze_count() == 0
    held = Held()
    kept = [{"span": i} for i in range(100)]
    held.hold()
    assert gc.get_freeze_count() >= len(kept)
    held.release()
    assert gc.get_freeze_count() == 0
    gc.freeze()  # the caller's own
    try:
        frozen = gc.get_freeze_count()
        theirs = Held()
        theirs.hold()
        theirs.release()
        assert gc.get_freeze_count() == frozen  # not ours to undo
    finally:
        gc.unfreeze()


def test_a_big_file_in_one_process_parses_with_the_collector_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--jobs 1``: every chunk is parsed with collections off (orjson at full speed) and the collector
    is back on, with nothing left frozen, when the import ends."""
    monkeypatch.setattr(_ingest, "PARALLEL_MIN_BYTES", 1)
    states: list[bool] = []
    parse = _ingest.parse_chunk

    def watched(*args: object) -> object:
        states.append(gc.isenabled())
        return parse(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(_ingest, "parse_chunk", watched)
    f = write_otlp(tmp_path / "t.jsonl", [agent_trace(f"{i + 1:032x}") for i in range(20)], lines=True)
    with TraceStore(tmp_path / "t.db") as store:
        stats = ingest_files([str(f)], store, jobs=1)
        assert stats.runs == 20 and store.count() == 20
    assert states and not any(states)
    assert gc.isenabled() and gc.get_freeze_count() == 0
