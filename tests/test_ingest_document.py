"""One OTLP/JSON document bigger than a segment, read a slice at a time (``intake/_document.py``):
the runs it stores are those of the same spans as JSON lines, whatever the document's layout, and
memory holds a slice, never the document."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from harvester.cli import main
from harvester.intake import _ingest, _input
from harvester.intake._document import Unfollowable, slices
from harvester.spans import OtlpStats, spans_from_otlp, to_otlp
from tests.builders.ingest import ingest_with, runs_of, traffic, write_lines


@pytest.fixture
def streamed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A document of 40 KB or more is read in pieces, cut into slices of 11 spans, 4 KB read at a time."""
    monkeypatch.setattr(_ingest, "PARALLEL_MIN_BYTES", 1)  # else a file under 8 MB is read whole
    monkeypatch.setattr(_input, "SEGMENT_BYTES", 40_000)
    monkeypatch.setattr(_input, "CHUNK_BYTES", 4_000)
    monkeypatch.setattr(_input, "SLICE_SPANS", 11)


def _layouts(doc: dict[str, Any]) -> Iterator[tuple[str, bytes]]:
    """The same spans written as exporters and people write OTLP/JSON."""
    yield "compact", orjson.dumps(doc)
    yield "indented", orjson.dumps(doc, option=orjson.OPT_INDENT_2)
    yield "stdlib, ascii escapes", json.dumps(doc, indent=1).encode()  # é as \\u00e9, / as is
    rs = doc["resourceSpans"]
    late = [{"scopeSpans": r["scopeSpans"], "schemaUrl": "x", "resource": r["resource"]} for r in rs]
    for r in late:  # a scope after its spans, and a resource after its scopes: held until they end
        r["scopeSpans"] = [{"spans": s["spans"], "scope": s.get("scope", {})} for s in r["scopeSpans"]]
    yield "context after the spans", orjson.dumps({"resourceSpans": late})
    legacy = [
        {
            "resource": r["resource"],
            "instrumentationLibrarySpans": [
                {"instrumentationLibrary": s.get("scope", {}), "spans": s["spans"]} for s in r["scopeSpans"]
            ],
        }
        for r in rs
    ]
    yield "instrumentationLibrarySpans", orjson.dumps({"resourceSpans": legacy})
    half = len(rs[0]["scopeSpans"][0]["spans"]) // 2

    def part(spans: list[Any], rest: list[Any]) -> dict[str, Any]:
        return {"resourceSpans": [{**rs[0], "scopeSpans": [{**rs[0]["scopeSpans"][0], "spans": spans}]}, *rest]}

    first, second = (
        part(rs[0]["scopeSpans"][0]["spans"][:half], []),
        part(rs[0]["scopeSpans"][0]["spans"][half:], rs[1:]),
    )
    yield "two documents, one after the other", orjson.dumps(first, option=orjson.OPT_INDENT_2) + orjson.dumps(second)


def _traffic_doc() -> dict[str, Any]:
    spans = traffic()
    for s in spans[::5]:  # strings a bracket counter would stumble on, and text that is not ASCII
        s.attributes["note"] = 'a "quoted" } ] { [ \\ value, é, 雪, \u2028 and an emoji 🎉'
    for s in spans[1::9]:
        s.resource = {"service.name": "billing"}  # two resources
    return to_otlp(spans)


@pytest.mark.slow
@pytest.mark.parametrize("jobs", [1, 2])
def test_a_big_document_stores_the_runs_of_its_spans_as_json_lines_do(
    tmp_path: Path, streamed: None, jobs: int
) -> None:
    doc = _traffic_doc()
    lines = write_lines(tmp_path / "traces.jsonl", [s for s in spans_from_otlp(doc)], per_line=7)
    reference, reference_rows = ingest_with(jobs, tmp_path, [lines])
    for name, data in _layouts(doc):
        f = tmp_path / f"{name}.json"
        f.write_bytes(data)
        assert len(data) > _input.SEGMENT_BYTES, name
        got, rows = ingest_with(jobs, tmp_path, [f])
        assert got["runs"] == reference["runs"] == 69, name
        assert got["spans"] == reference["spans"] and got["traces"] == reference["traces"], name
        assert runs_of(rows) == runs_of(reference_rows), name


@pytest.mark.slow
def test_slices_hold_a_slice_never_the_document() -> None:
    """A 24 MB document read 64 KB at a time: slices of 200 spans come out while it is read, and memory
    never holds much more than a slice and a piece."""
    span = {
        "traceId": "a" * 32,
        "spanId": "b" * 16,
        "name": "chat",
        "attributes": [{"key": "gen_ai.input.messages", "value": {"stringValue": "x" * 1000}}],
    }
    doc = (
        b'{"resourceSpans":[{"resource":{},"scopeSpans":[{"scope":{"name":"s"},"spans":['
        + b",".join([orjson.dumps(span)] * 20_000)
        + b"]}]}]}"
    )
    at = 0

    def more() -> bytes:
        nonlocal at
        at += 1 << 16
        return doc[at : at + (1 << 16)]

    tracemalloc.start()
    count = 0
    try:
        for piece in slices(more, doc[: 1 << 16], 200):
            assert len(orjson.loads(piece)["resourceSpans"][0]["scopeSpans"][0]["spans"]) == 200
            count += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 100 and peak < 4 * (1 << 20), peak  # a slice is ~230 KB; the document 24 MB


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b'{"resourceSpans": {"resource": {}}}', "'\\[' expected"),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"a": 1} {"b": 2}]}]}]}', "',' or ']' expected"),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"a": tru}]}]}]}', "invalid JSON"),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"a": "\xff"}]}]}]}', "not UTF-8"),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"a": "b"', "invalid JSON"),
        (b'{"resourceSpans": []} trailing', "'{' expected"),
    ],
)
def test_what_the_walk_cannot_follow_is_one_line_naming_the_file(
    tmp_path: Path, streamed: None, body: bytes, why: str
) -> None:
    with pytest.raises(Unfollowable, match=why):
        list(slices(lambda: b"", body, 5))
    padded = body.replace(b'{"resourceSpans"', b'{"padding": "' + b"p" * 50_000 + b'", "resourceSpans"', 1)
    f = tmp_path / "big.json"
    f.write_bytes(padded)
    res = CliRunner().invoke(main, ["ingest", str(f), "--store", str(tmp_path / "t.db")])
    assert res.exit_code == 2, res.output
    assert len(res.output.strip().splitlines()) == 1 and str(f) in res.output and "Traceback" not in res.output


def _feed(doc: bytes, cut: int, limit: int) -> list[bytes]:
    rest = [doc[cut:]]
    return list(slices(lambda: rest.pop() if rest else b"", doc[:cut], limit))


_SPAN = b'{"traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"b7ad6b7169203331"}'
_FIVE = b",".join([_SPAN] * 5)


@pytest.mark.parametrize("cut", range(1, 33))
def test_a_number_cut_by_a_read_is_read_whole(cut: int) -> None:
    """``1.`` of ``1.5e-3`` is a number too: one that ends near the end of what is read is read again."""
    doc = b'{"x":1.5e-3,"resourceSpans":[{"resource":{"y":-0.25E+2},"scopeSpans":[{"spans":[' + _SPAN + b"]}]}]}"
    assert [len(orjson.loads(s)["resourceSpans"][0]["scopeSpans"][0]["spans"]) for s in _feed(doc, cut, 2)] == [1]


@pytest.mark.parametrize(
    "doc",
    [
        b'{"resourceSpans":[{"scopeSpans":[{"scope":{},"spans":[' + _FIVE + b"]}]}]}",  # no resource
        b'{"resourceSpans":[{"resource":{},"scopeSpans":[{"spans":[' + _FIVE + b"]}]}]}",  # no scope
        b'{"resourceSpans":[{"resource":{},"scopeSpans":[{"spans":[' + _FIVE + b'],"scope":{}}]}]}',  # scope last
    ],
)
def test_spans_held_for_their_context_still_come_in_slices_of_the_limit(doc: bytes) -> None:
    assert [len(orjson.loads(s)["resourceSpans"][0]["scopeSpans"][0]["spans"]) for s in _feed(doc, 9, 2)] == [2, 2, 1]


def test_an_int_of_5000_digits_is_a_value_and_nesting_too_deep_is_one_error() -> None:
    assert _feed(b'{"x":' + b"1" * 5000 + b',"resourceSpans":[]}', 7, 2) == []
    with pytest.raises(Unfollowable, match="nested too deep"):
        _feed(b'{"resourceSpans":[],"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}", 50, 2)


@pytest.mark.parametrize(
    "doc",
    [
        b'{"resourceSpans":[null,{"resource":{},"scopeSpans":[{"scope":{},"spans":[' + _SPAN + b"]}]}]}",
        b'{"resourceSpans":[{"resource":{},"scopeSpans":[null,{"scope":{},"spans":[' + _SPAN + b"]}]}]}",
        b'{"resourceSpans":[{"resource":{},"scopeSpans":[{"scope":{},"spans":null}]},{"scopeSpans":null}]}',
    ],
)
def test_null_where_otlp_has_a_list_or_an_entry_reads_as_the_whole_document_does(doc: bytes) -> None:
    """The proto3 JSON mapping allows null for a field: no spans, and a null entry counted skipped."""
    whole, cut = OtlpStats(), OtlpStats()
    reference = list(spans_from_otlp(orjson.loads(doc), whole))
    got = [s for piece in _feed(doc, 11, 2) for s in spans_from_otlp(orjson.loads(piece), cut)]
    assert got == reference and cut.skipped == whole.skipped
