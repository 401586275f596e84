"""Ingest's test traffic and how its stored rows are compared: agent traces with their parts scattered
over the Collector's JSON lines, ingested with N jobs, the rows read back as the store reads them."""

from __future__ import annotations

import random
import sqlite3
from pathlib import Path
from typing import Any

import orjson

from harvester.intake import ingest_files
from harvester.model import Run
from harvester.spans import SpanData, to_otlp
from harvester.store import TraceStore, spans_from_blob
from harvester.store._codec import unpacked
from tests.builders.store import agent_trace, make_span

T0 = 1_790_000_000_000_000_000


def traffic(n: int = 60) -> list[SpanData]:
    """Agent traces (some with two runs), traces without an agent span; start times with ties."""
    spans: list[SpanData] = []
    for i in range(n):
        trace = agent_trace(
            f"{i + 1:032x}",
            secret=f"user{i}@example.com",
            tool_result=f"Refunds within {i} days. Call +44 20 7946 09{i % 100:02d}.",
        )
        if i % 7 == 3:  # a second run beside the first, under one HTTP span
            second = agent_trace(trace[0].trace_id)
            for s in second:
                s.span_id = s.span_id.replace("1", "a").replace("2", "b").replace("3", "c")
                s.parent_id = s.parent_id and s.parent_id.replace("1", "a")
            http = make_span(trace[0].trace_id, "f" * 16, None, **{"http.route": "/chat"})
            trace[2].parent_id = second[2].parent_id = http.span_id
            trace += [*second, http]
        for s in trace:
            s.start_ns = T0 + (i // 3) * 1_000_000_000 + int(s.span_id[:2], 16)
            s.end_ns = s.start_ns + 500_000_000
        spans += trace
        if i % 10 == 5:
            spans.append(make_span(f"e{i:031x}", "4" * 16, None, **{"http.route": "/health"}))
    return spans


def write_lines(path: Path, spans: list[SpanData], per_line: int = 5, seed: int = 7) -> Path:
    """The Collector's JSON lines, with every trace's spans scattered over several lines."""
    spans = spans[:]
    random.Random(seed).shuffle(spans)
    docs = [to_otlp(spans[i : i + per_line]) for i in range(0, len(spans), per_line)]
    docs[3]["resourceSpans"][0]["scopeSpans"][0]["spans"].append({"traceId": "zz", "spanId": 3})  # skipped
    path.write_bytes(b"\n".join(orjson.dumps(d) for d in docs) + b"\n")
    return path


def stored(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as conn:
        return conn.execute(
            "SELECT id, trace_id, run_id, agent, started_at, ts, stop, failed, failure, size, "
            "run, spans FROM runs ORDER BY id"
        ).fetchall()


def ingest_with(jobs: int, tmp_path: Path, files: list[Path], **kw: Any) -> tuple[dict[str, Any], list[Any]]:
    db = tmp_path / f"jobs{jobs}-{len(list(tmp_path.glob('*.db')))}.db"
    with TraceStore(db) as store:
        stats = ingest_files([str(f) for f in files], store, jobs=jobs, **kw)
    return stats.to_dict(), stored(db)


def runs_of(rows: list[tuple[Any, ...]]) -> dict[tuple[str, str], tuple[Any, ...]]:
    """The stored runs by (trace, run) as the store reads them: a trace stored again from its stored
    spans and a new part gets new row ids, and its raw spans are kept in another order."""
    return {
        (r[1], r[2]): (
            *r[3:9],
            Run.from_data(orjson.loads(unpacked(r[10]))),
            sorted(orjson.dumps(s.to_dict()) for s in spans_from_blob(unpacked(r[11]))),
        )
        for r in rows
    }
