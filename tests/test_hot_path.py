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

TRACES = sorted(p for p in (Path(__file__).resolve().parent.parent / "traces").rglob("*.json*") if p.is_file())


def _spans(path: Path) -> list:
    return [s for doc in iter_otlp_documents(path.read_bytes()) for s in spans_from_otlp(doc)]


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_plain_dict_run_is_the_model_json(path: Path) -> None:
    for data in run_data_from_spans(_spans(path)):
        run = Run.model_validate(data)
        assert orjson.loads(run_row(data, None)[9]) == orjson.loads(run.to_json())
        assert run.model_dump(mode="json") == {**data, "requested_tools": run.requested_tools(),
                                               "blocked_tools": run.blocked_tools()}


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
