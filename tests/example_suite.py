"""Regenerate ``traces/example/`` (the example agent's production traffic) and ``cases/`` (the suite).

    python -m tests.example_suite

Ids come from a counting generator and timestamps are replaced by their rank (1 ms apart, order
kept), so re-running produces identical files. ``cases/`` is what the demo's reviewer makes of the
harvest: the same ``apply_reviews`` the demo uses.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import orjson
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

from harvester.demo import agent as support
from harvester.demo.scenario import TRAFFIC, apply_reviews, write_config
from harvester.harvest import harvest, slug
from harvester.intake import ingest_files
from harvester.spans import SpanData, from_readable, to_otlp
from harvester.store import TraceStore
from harvester.suite import bump_suite

from .frameworks._otel import CountingIds, capture, finished
from .frameworks.record import salted_id

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "traces" / "example"
CASES = ROOT / "cases"
BASE_NS = 1_796_000_000_000_000_000  # 2026-11-30


def record(dest: Path = TRACES) -> list[Path]:
    """Serve the demo's traffic once and write one OTLP/JSON file per trace."""
    provider = TracerProvider(resource=Resource({"service.name": "support-agent"}), id_generator=CountingIds(7))
    provider, exporter = capture(provider)
    agent = support.SupportAgent(tracer_provider=provider)
    for prompt, _ in TRAFFIC:
        agent.run(prompt)
    spans = [from_readable(s) for s in finished(exporter)]
    ranks = {t: i for i, t in enumerate(sorted({t for s in spans for t in (s.start_ns, s.end_ns)}))}
    by_trace: dict[str, list[SpanData]] = {}
    for s in spans:
        s.trace_id, s.span_id, s.parent_id = (
            salted_id(s.trace_id, "example"),
            salted_id(s.span_id, "example"),
            salted_id(s.parent_id, "example"),
        )
        s.start_ns, s.end_ns = BASE_NS + ranks[s.start_ns] * 1_000_000, BASE_NS + ranks[s.end_ns] * 1_000_000
        for e in s.events:
            e["time_ns"] = s.end_ns
            e["attributes"].pop("exception.stacktrace", None)
        by_trace.setdefault(s.trace_id, []).append(s)
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    paths = []
    for n, ((_, items), (prompt, _)) in enumerate(zip(by_trace.items(), TRAFFIC), 1):
        path = dest / f"{n:02d}-{slug(prompt)}.json"
        path.write_bytes(orjson.dumps(to_otlp(items), option=orjson.OPT_INDENT_2) + b"\n")
        paths.append(path)
    return paths


def harvest_traces(traces: Path, cases: Path) -> None:
    """Ingest ``traces`` into a scratch store and harvest it into ``cases/pending/``."""
    with tempfile.TemporaryDirectory() as tmp:
        config = write_config(Path(tmp))
        with TraceStore(str(Path(tmp) / "traces.db")) as store:
            ingest_files([str(p) for p in sorted(traces.glob("*.json"))], store)
            harvest(store, cases, config=config)


def build_cases(traces: Path = TRACES, cases: Path = CASES) -> None:
    if cases.exists():
        shutil.rmtree(cases)
    harvest_traces(traces, cases)
    apply_reviews(cases)
    bump_suite(cases, name="support-demo")


if __name__ == "__main__":
    record()
    build_cases()
    print(f"wrote {TRACES.relative_to(ROOT)} and {CASES.relative_to(ROOT)}")
