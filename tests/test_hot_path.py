"""The capture/ingest hot path keeps runs as plain dicts: it must store exactly what the model path would."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from harvester.conventions import run_data_from_spans
from harvester.model import Run
from harvester.redact import Redactor
from harvester.spans import iter_otlp_documents, spans_from_otlp
from harvester.store import run_row
from harvester.store._codec import run_data_of

TRACES = sorted(p for p in (Path(__file__).resolve().parent.parent / "traces").rglob("*.json*") if p.is_file())


def _spans(path: Path) -> list:
    return [s for doc in iter_otlp_documents(path.read_bytes()) for s in spans_from_otlp(doc)]


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_plain_dict_run_is_the_model_json(path: Path) -> None:
    for data in run_data_from_spans(_spans(path)):
        run = Run.model_validate(data)
        stored = run_data_of(run_row(data, None)[9])  # the model's JSON, less the lists a read derives
        derived = ("requested_tools", "blocked_tools")
        assert stored == {k: v for k, v in orjson.loads(run.to_json()).items() if k not in derived}
        assert Run.from_data(stored) == run
        assert run.model_dump(mode="json") == {
            **data,
            "requested_tools": run.requested_tools(),
            "blocked_tools": run.blocked_tools(),
        }


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_redact_data_matches_redact_trace(path: Path) -> None:
    spans = _spans(path)
    secret = Redactor(patterns={"order": r"A\d{4}"})  # something to replace in most traces
    for redactor in (Redactor(), secret):
        for data in run_data_from_spans(spans):
            mine = [s for s in spans if s.trace_id == data["trace_id"]]
            out, out_spans = redactor.redact_data(data, mine)
            (run,), ref_spans = redactor.redact_trace([Run.model_validate(data)], mine)
            assert Run.model_validate(out) == run
            assert [s.to_dict() for s in out_spans] == [s.to_dict() for s in ref_spans]


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_runs_read_from_redacted_spans_are_the_redacted_runs(path: Path) -> None:
    """Stored spans re-read (``traces export`` then ``ingest`` elsewhere) give the stored, redacted run."""
    spans = _spans(path)
    secret = Redactor(patterns={"order": r"A\d{4}"})  # something to replace in most traces
    for redactor in (Redactor(), secret):
        for data in run_data_from_spans(spans):
            mine = [s for s in spans if s.trace_id == data["trace_id"]]
            (expected,), _ = redactor.redact_trace([Run.model_validate(data)], mine)
            got = [d for d in run_data_from_spans(redactor.redact_spans(mine)) if d["run_id"] == data["run_id"]]
            assert [Run.model_validate(d) for d in got] == [expected]


def _sdk_spans() -> list:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import Status, StatusCode

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span(
        "invoke_agent a", attributes={"gen_ai.operation.name": "invoke_agent", "tags": ("x", "y")}
    ) as root:
        with tracer.start_as_current_span("execute_tool t", attributes={"gen_ai.operation.name": "execute_tool"}) as s:
            s.add_event("exception", {"exception.type": "ValueError", "exception.message": "bad"})
            s.set_status(Status(StatusCode.ERROR, "bad"))
        root.set_attribute("final_result", "ok")
    return list(memory.get_finished_spans())


def test_from_readable_fields_fast_path_is_the_property_path() -> None:
    """SDK spans are read from their fields; a subclass with its own properties is read through them."""
    from opentelemetry.sdk.trace import ReadableSpan

    from harvester.spans import from_readable

    class Renamed(ReadableSpan):
        @property
        def name(self) -> str:
            return "renamed " + self._name

    for sp in _sdk_spans():
        fast = from_readable(sp)
        assert fast.to_dict() == {
            "trace_id": f"{sp.context.trace_id:032x}",
            "span_id": f"{sp.context.span_id:016x}",
            "parent_id": f"{sp.parent.span_id:016x}" if sp.parent else None,
            "name": sp.name,
            "start_ns": sp.start_time,
            "end_ns": sp.end_time,
            "kind": sp.kind.name,
            "status": sp.status.status_code.name,
            "status_message": sp.status.description or "",
            "attributes": {k: list(v) if isinstance(v, tuple) else v for k, v in sp.attributes.items()},
            "events": [{"name": e.name, "time_ns": e.timestamp, "attributes": dict(e.attributes)} for e in sp.events],
            "scope": "t",
            "resource": dict(sp.resource.attributes),
        }
        other = Renamed(
            name=sp.name,
            context=sp.context,
            parent=sp.parent,
            resource=sp.resource,
            attributes=sp.attributes,
            events=sp.events,
            kind=sp.kind,
            status=sp.status,
            start_time=sp.start_time,
            end_time=sp.end_time,
            instrumentation_scope=sp.instrumentation_scope,
        )
        assert from_readable(other).to_dict() == {**fast.to_dict(), "name": "renamed " + sp.name}


def test_iso_times_across_seconds() -> None:
    from harvester.conventions._values import iso as _iso

    for ns in (
        1_764_464_523_456_789_012,
        1_764_464_523_999_000_000,
        1_764_464_524_001_000_000,
        1_764_464_523_000_000_001,
        86_400_000_000_000,
    ):
        from datetime import datetime, timezone

        dt = datetime.fromtimestamp(ns // 10**9, tz=timezone.utc)
        assert _iso(ns) == dt.strftime("%Y-%m-%dT%H:%M:%S") + f".{(ns // 10**6) % 1000:03d}Z"
    assert _iso(0) is None and _iso(10**30) is None
