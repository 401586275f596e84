"""Malformed OTLP/JSON around and inside spans: never a traceback, never a run lost without a word.

A bad value costs only itself (the span, and so the run, is kept); a wrapper of the wrong type costs
only what it wraps; and anything read but not stored is counted in ``lost``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from harvester.cli import main as cli
from harvester.intake import _ingest as ingest
from harvester.intake import ingest_files
from harvester.redact import Redactor
from harvester.spans import SpanData, to_otlp
from harvester.store import TraceStore
from tests.builders.store import agent_trace

TRACE = "ab" * 16


def _doc() -> dict[str, Any]:
    return to_otlp(agent_trace(TRACE))


def _spans(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return doc["resourceSpans"][0]["scopeSpans"][0]["spans"]


def _agent(doc: dict[str, Any]) -> dict[str, Any]:
    return next(s for s in _spans(doc) if s["name"] == "s" and "parentSpanId" not in s)


def _with(change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    doc = _doc()
    change(doc)
    return doc


def _bytes(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc).encode()  # orjson refuses to write the 300-deep case


def _attr(doc: dict[str, Any], key: str, value: Any) -> None:
    _agent(doc)["attributes"].append({"key": key, "value": value})


def _deep(n: int) -> dict[str, Any]:
    value: dict[str, Any] = {"stringValue": "x"}
    for _ in range(n):
        value = {"arrayValue": {"values": [value]}}
    return value


KEPT = {  # the agent run is stored in full; the bad part is named in skip_reasons
    "resource attribute not an int": (
        lambda d: d["resourceSpans"][0]["resource"]["attributes"].append({"key": "pid", "value": {"intValue": "zz"}}),
        "resource attribute pid",
    ),
    "resource a string": (lambda d: d["resourceSpans"][0].__setitem__("resource", "x"), "resource not an object"),
    "scope a string": (lambda d: d["resourceSpans"][0]["scopeSpans"][0].__setitem__("scope", "x"), None),
    "agent attribute intValue 12.5": (lambda d: _attr(d, "retries", {"intValue": "12.5"}), "attribute retries"),
    "integer past 64 bits": (lambda d: _attr(d, "wei", {"intValue": "1" * 30}), None),
    "start time past 64 bits": (lambda d: _agent(d).__setitem__("startTimeUnixNano", "9" * 25), "startTimeUnixNano"),
    "array nested 300 deep": (lambda d: _attr(d, "deep", _deep(300)), "attribute deep"),
    "event not an object": (lambda d: _agent(d).__setitem__("events", [5]), "event"),
    "attributes a plain map": (
        lambda d: _spans(d)[0].__setitem__("attributes", {a["key"]: a["value"] for a in _spans(d)[0]["attributes"]}),
        None,
    ),
    "event attributes a number": (
        lambda d: _agent(d).__setitem__("events", [{"name": "e", "attributes": 5}]),
        "attributes (not a list)",
    ),
}


@pytest.mark.parametrize("case", KEPT, ids=list(KEPT))
def test_a_bad_value_costs_only_itself(tmp_path: Path, case: str) -> None:
    change, reason = KEPT[case]
    path = tmp_path / "in.json"
    path.write_bytes(_bytes(_with(change)))
    res = CliRunner().invoke(cli, ["ingest", str(path), "--store", str(tmp_path / "t.db"), "--json"])
    assert res.exit_code == 0, res.output
    out = orjson.loads(res.output)
    assert out["runs"] == 1 and out["lost"] == {}, out
    if reason:
        assert any(reason in r for r in out["skip_reasons"]), out["skip_reasons"]
    with TraceStore(tmp_path / "t.db") as store:
        (run,) = store.runs()
    assert run.trajectory() == ["kb_search"] and run.prompt == "hi "


WRAPPERS = {  # what the wrapper held is skipped and counted; the file and the rest of it are fine
    "scopeSpans an int": lambda d: d["resourceSpans"][0].__setitem__("scopeSpans", 5),
    "spans an int": lambda d: d["resourceSpans"][0]["scopeSpans"][0].__setitem__("spans", 5),
}


@pytest.mark.parametrize("case", WRAPPERS, ids=list(WRAPPERS))
def test_a_wrapper_of_the_wrong_type_is_one_line_not_a_traceback(tmp_path: Path, case: str) -> None:
    path = tmp_path / "in.jsonl"
    path.write_bytes(_bytes(_with(WRAPPERS[case])) + b"\n" + orjson.dumps(to_otlp(agent_trace("cd" * 16))) + b"\n")
    res = CliRunner().invoke(cli, ["ingest", str(path), "--store", str(tmp_path / "t.db")])
    assert res.exit_code == 0 and res.output.startswith("ingested 1 run from 3 spans"), res.output


@pytest.mark.parametrize("trace_id", ["", "0" * 32])
def test_an_empty_trace_id_is_a_skipped_span(tmp_path: Path, trace_id: str) -> None:
    doc = _doc()
    for s in _spans(doc):
        s["traceId"] = trace_id
    path = tmp_path / "in.json"
    path.write_bytes(orjson.dumps(doc))
    with TraceStore(tmp_path / "t.db") as store:
        stats = ingest_files([str(path)], store, jobs=1)
        assert stats.skipped == 3 and stats.runs == 0 and list(store.runs()) == []


class _Exploding(Redactor):
    def redact_data(self, data: Any, spans: Any) -> Any:
        raise RuntimeError("redactor bug")


def test_runs_read_but_not_stored_are_reported(tmp_path: Path) -> None:
    path = tmp_path / "in.json"
    path.write_bytes(orjson.dumps(_doc()))
    with TraceStore(tmp_path / "t.db") as store:
        stats = ingest_files([str(path)], store, jobs=1, redact=_Exploding())
    assert stats.runs == 0 and stats.lost == {"redact_error": 1}


def test_the_workers_read_bad_wrappers_as_the_parent_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ingest, "PARALLEL_MIN_BYTES", 1)
    lines = [_bytes(_with(change)) for change, _ in KEPT.values()]
    lines += [_bytes(_with(change)) for change in WRAPPERS.values()]
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    results = []
    for jobs in (1, 2):
        with TraceStore(tmp_path / f"{jobs}.db") as store:
            stats = ingest_files([str(path)], store, jobs=jobs)
            results.append((copy.deepcopy(stats.to_dict()), [r.to_json() for r in store.runs()]))
    assert results[0] == results[1]
    assert results[0][0]["runs"] == 1 and results[0][0]["lost"] == {}


@pytest.mark.parametrize("jobs", [1, 2])
def test_more_of_a_stored_trace_completes_it_and_a_part_never_shrinks_it(
    tmp_path: Path, jobs: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trace split over two of the Collector's files, imported apart: the run is read from all of it."""
    monkeypatch.setattr(ingest, "PARALLEL_MIN_BYTES", 1)
    chat, tool, root = agent_trace(TRACE)
    first, second, again = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    first.write_bytes(orjson.dumps(to_otlp([chat, root])))
    second.write_bytes(orjson.dumps(to_otlp([tool])))
    again.write_bytes(orjson.dumps(to_otlp([root, chat])))  # a re-import of a part
    with TraceStore(tmp_path / "t.db") as store:
        ingest_files([str(first)], store, jobs=jobs)
        assert next(iter(store.runs())).awaiting_tools() == ["kb_search"]  # its tool span not seen yet
        ingest_files([str(second)], store, jobs=jobs)
        ingest_files([str(again)], store, jobs=jobs)
        (run,) = store.runs()
        assert run.trajectory() == ["kb_search"] and run.blocked_tools() == [] and run.calls[0].status == "ok"
        assert len(store.spans(TRACE)) == 3


def test_a_broken_pretty_document_names_its_line_and_column(tmp_path: Path) -> None:
    text = json.dumps(_doc(), indent=2)
    lines = text.splitlines()
    k = next(i for i in range(30, len(lines)) if lines[i].endswith(","))
    lines[k] = lines[k][:-1]  # one missing comma deep inside: the parser stops on the next line
    path = tmp_path / "pretty.json"
    path.write_text("\n".join(lines))
    res = CliRunner().invoke(cli, ["ingest", str(path), "--store", str(tmp_path / "t.db")])
    assert res.exit_code == 2 and res.output.startswith(f"error: {path}: line {k + 2} column"), res.output


@pytest.mark.parametrize(
    "data,message",
    [
        (b"\x1f\x8b\x08\x00rest", "gzip-compressed; decompress it first"),
        ('{"resourceSpans": [], "x": "caf\u00e9"}'.encode("latin-1"), "line 1 column 32: not UTF-8 text (byte 0xe9)"),
    ],
)
def test_encodings_get_a_message_that_says_so(tmp_path: Path, data: bytes, message: str) -> None:
    path = tmp_path / "in.json"
    path.write_bytes(data)
    res = CliRunner().invoke(cli, ["ingest", str(path), "--store", str(tmp_path / "t.db")])
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output, res.output


def test_a_byte_order_mark_is_fine(tmp_path: Path) -> None:
    path = tmp_path / "in.json"
    path.write_bytes(b"\xef\xbb\xbf" + orjson.dumps(_doc()))
    res = CliRunner().invoke(cli, ["ingest", str(path), "--store", str(tmp_path / "t.db")])
    assert res.exit_code == 0 and res.output.startswith("ingested 1 run"), res.output


def test_a_run_first_stored_alone_that_turns_out_a_sub_agent_is_replaced(tmp_path: Path) -> None:
    """Part 1 holds a sub-agent's spans (read as a run of its own); part 2 the agent around it. Read
    again from all the spans, the trace has ONE run: the sub-agent's earlier row must go."""
    chat, tool, inner = agent_trace(TRACE)
    outer = SpanData(
        TRACE,
        "9" * 16,
        None,
        "invoke_agent boss",
        start_ns=0,
        end_ns=9,
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "boss"},
    )
    inner.parent_id = outer.span_id
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_bytes(orjson.dumps(to_otlp([chat, tool, inner])))
    second.write_bytes(orjson.dumps(to_otlp([outer])))
    with TraceStore(tmp_path / "t.db") as store:
        ingest_files([str(first)], store, jobs=1)
        assert [r.run_id for r in store.runs()] == [inner.span_id]
        ingest_files([str(second)], store, jobs=1)
        (run,) = store.runs()
        assert run.run_id == outer.span_id and run.agent == "boss" and run.trajectory() == ["kb_search"]


def test_an_attribute_key_that_is_not_a_string_costs_only_itself(tmp_path: Path) -> None:
    doc = _doc()
    doc["resourceSpans"][0]["resource"]["attributes"].append({"key": ["x"], "value": {"stringValue": "v"}})
    _agent(doc)["attributes"].append({"key": {"k": 1}, "value": {"stringValue": "v"}})
    path = tmp_path / "in.json"
    path.write_bytes(orjson.dumps(doc))
    res = CliRunner().invoke(cli, ["ingest", str(path), "--store", str(tmp_path / "t.db"), "--json"])
    assert res.exit_code == 0 and orjson.loads(res.output)["runs"] == 1, res.output
