"""Runs are whole or flagged, and losses are counted in runs (issue 31, item 8).

A span the processor drops (its trace too big, too old) may belong to a run whose other spans are
stored. Such a run is stored marked ``incomplete`` with the reason (the full queue drops whole
traces: ``tests/test_capture_process.py`` floods it), and
``stats()["lost_traces"]`` counts every trace that lost a span, so that runs stored whole plus
``lost_traces`` is the traces the app produced. Real SDK ``TracerProvider``, real processor.
"""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner
from opentelemetry import trace as otel

from harvester.cli import main
from harvester.harvest import case_from_run
from harvester.model import Run
from tests.builders.capture import agent_run, setup, stored

DEADLINE_MS = 20_000  # only so that a broken guarantee fails instead of hanging


def test_a_trace_whose_tool_span_the_full_queue_dropped_is_dropped_whole(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path, max_queue=1, capture_process=False)
    with proc._flush_lock:  # the worker waits here before its next drain: the queue stays full
        agent = tracer.start_span("invoke_agent support", attributes={"gen_ai.operation.name": "invoke_agent"})
        ctx = otel.set_span_in_context(agent)
        tracer.start_span("chat m", context=ctx, attributes={"gen_ai.operation.name": "chat"}).end()  # queued
        tool = tracer.start_span(
            "execute_tool kb_search",
            context=ctx,
            attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "kb_search"},
        )
        tool.end()  # refused: the queue holds its one span, and with it goes the trace
    assert proc.force_flush(DEADLINE_MS)  # the model span is taken, and dropped with its trace
    agent.end()  # the queue has room again, but the trace is refused: its agent span too
    proc.shutdown()
    assert stored(path) == []  # never a run cut in two
    st = proc.stats()
    assert st["dropped"] == {"queue_full": 1} and st["lost_traces"] == 1 and st["open_traces"] == 0


def test_a_run_whose_span_its_trace_bound_dropped_is_stored_marked(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path, max_spans_per_trace=2)
    agent_run(tracer)  # chat and tool held; the answering chat is over the bound; the agent span is kept
    proc.shutdown()
    (run,) = stored(path)
    assert run.incomplete == "trace_too_big" and run.answer is None
    assert proc.stats()["lost_traces"] == 1


def test_a_whole_run_is_not_marked_and_its_json_is_unchanged(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path)
    agent_run(tracer)
    proc.shutdown()
    (run,) = stored(path)
    assert run.incomplete is None and "incomplete" not in run.to_data()
    assert proc.stats()["lost_traces"] == 0


def test_a_marked_run_is_shown_in_traces_list_and_harvested_with_a_review_note(tmp_path: Path) -> None:
    proc, tracer, path = setup(tmp_path, max_spans_per_trace=2)
    agent_run(tracer, prompt="lost its answer")
    proc.shutdown()
    proc, tracer, _ = setup(tmp_path)  # the same store: a whole run beside it
    agent_run(tracer, prompt="whole")
    proc.shutdown()
    res = CliRunner().invoke(main, ["traces", "list", "--store", path])
    assert res.exit_code == 0, res.output
    header, *rows = res.output.splitlines()
    lost = header.index("LOST")  # the column's offset: STARTED holds a space
    assert sorted(row[lost:].split()[0] for row in rows) == ["-", "trace_too_big"]
    by_prompt = {r.prompt: r for r in stored(path)}
    notes = case_from_run(by_prompt["lost its answer"]).review_notes
    assert any("capture lost spans of this trace (trace_too_big)" in n for n in notes), notes
    assert not any("capture lost spans" in n for n in case_from_run(by_prompt["whole"]).review_notes)


def test_a_run_stored_before_the_mark_loads_unchanged() -> None:
    run = Run(trace_id="ab" * 16, run_id="cd" * 8, stop="answered")
    old = {k: v for k, v in run.to_data().items() if k != "incomplete"}
    assert Run.from_data(old).incomplete is None  # type: ignore[arg-type]
