"""Replay never pollutes production: spans of a replay are never stored as runs, wherever they go.

An app module that installs ``HarvestingSpanProcessor`` and an OTLP exporter (to ``harvester serve``)
at import is a safe ``--agent``: the replay runs in a real ``harvester replay`` process, and neither
the app's store nor the receiver's gains a run. A file of replay spans is not ingested either.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from harvester.canonical import fixture_key
from harvester.case import AgentCase
from harvester.intake import HarvestingSpanProcessor, Receiver, ingest_files
from harvester.replay import replay
from harvester.store import TraceStore
from tests.frameworks._otel import capture, finished

ROOT = Path(__file__).resolve().parents[1]
APP = textwrap.dedent('''
    """A support app that sets up its tracing when imported, as many do in their main module."""
    import os

    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    import harvester
    from harvester import HarvestingSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(HarvestingSpanProcessor("app.db"))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=os.environ["COLLECTOR"])))
    trace.set_tracer_provider(provider)


    @harvester.tool
    def get_order(order_id: str) -> dict:
        """Look up an order."""
        with open("live.log", "a") as f:
            f.write(order_id + "\\n")
        return {"order_id": order_id, "status": "delivered"}


    def build():
        def agent(prompt):
            with harvester.agent_run("support_agent", prompt) as run:
                run.model_call("m", tool_calls=[{"name": "get_order", "arguments": {"order_id": "A1001"}}])
                order = get_order(order_id="A1001")
                run.finish(f"A1001 is {order['status']}.")
                return run.answer
        return agent
''')


def _runs(path: Path) -> int:
    with TraceStore(str(path)) as ts:
        return len(list(ts.runs()))


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[Receiver]:
    rec = Receiver(str(tmp_path / "collector.db"), port=0, idle_seconds=60, redact=False)
    rec.start()
    yield rec
    rec.stop(timeout=5)


@pytest.mark.slow
def test_an_app_that_installs_capture_at_import_is_a_safe_agent(tmp_path: Path, receiver: Receiver) -> None:
    (tmp_path / "support_app.py").write_text(APP)
    env = {**os.environ, "COLLECTOR": receiver.url, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    env.pop("HARVESTER_STORE", None)
    env.pop("HARVESTER_CASES", None)
    (tmp_path / "harvester.toml").write_text('store = "app.db"\ncases_dir = "cases"\n')

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

    prod = run(sys.executable, "-c", "import support_app; print(support_app.build()('Where is A1001?'))")
    assert prod.returncode == 0, prod.stderr
    assert _runs(tmp_path / "app.db") == 1 and (tmp_path / "live.log").read_text() == "A1001\n"
    listed = run(sys.executable, "-m", "harvester", "traces", "list", "--json").stdout
    trace_id = orjson.loads(listed.splitlines()[0])["trace_id"]
    made = run(sys.executable, "-m", "harvester", "incident", trace_id, "--why", "order status answer", "--json")
    assert made.returncode == 0, made.stderr
    assert run(sys.executable, "-m", "harvester", "accept", orjson.loads(made.stdout)["id"]).returncode == 0
    before = (tmp_path / "app.db").stat().st_size

    replayed = run(sys.executable, "-m", "harvester", "replay", "--agent", "support_app:build")
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    assert "1/1 passed" in replayed.stdout
    receiver.stop(timeout=5)
    assert (tmp_path / "live.log").read_text() == "A1001\n"  # the replay never ran the tool
    assert _runs(tmp_path / "app.db") == 1 and (tmp_path / "app.db").stat().st_size == before
    assert _runs(tmp_path / "collector.db") == 1  # production's run, exported; the replay's spans left out
    assert receiver.health()["replay_spans"] >= 3  # its root, agent, model and tool spans


def _replay_spans(tmp_path: Path) -> list:
    """The SDK spans a replay emits on the global provider, as an exporter beside it gets them; a
    ``HarvestingSpanProcessor`` beside it stores none of them."""
    from opentelemetry import trace as otel_trace

    import harvester

    get_order = harvester.tool(name="get_order")(lambda order_id: {"status": "live"})
    args = {"order_id": "A1001"}
    spec = AgentCase.model_validate(
        {
            "id": "iso",
            "status": "accepted",
            "prompt": "Where is A1001?",
            "why": "w",
            "fixtures": [
                {"key": fixture_key("get_order", args), "tool": "get_order", "args": args, "result": {"s": 1}}
            ],
        }
    )

    def build():
        def agent(prompt: str) -> str:
            with harvester.agent_run("support_agent", prompt) as run:
                run.model_call("m", tool_calls=[{"name": "get_order", "arguments": args}])
                get_order(order_id="A1001")
                run.finish("done")
                return "done"

        return agent

    replay([], build)  # the global SDK provider exists from here on
    provider, exporter = capture(otel_trace.get_tracer_provider())
    processor = HarvestingSpanProcessor(str(tmp_path / "inproc.db"), redact=False)
    provider.add_span_processor(processor)
    (r,) = replay([spec], build).results
    assert r.passed, r.reasons()
    processor.shutdown()
    assert _runs(tmp_path / "inproc.db") == 0 and processor.stats()["dropped"]["replay"] >= 4
    return finished(exporter)


def test_replay_spans_are_marked_and_never_ingested(tmp_path: Path) -> None:
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    spans = _replay_spans(tmp_path)
    (root,) = [s for s in spans if s.name.startswith("harvester.replay ")]
    others = [s for s in spans if s is not root]
    assert len(others) >= 3 and all(s.context.trace_state.get("harvester") == "replay" for s in others)
    assert all(s.context.trace_id == root.context.trace_id for s in others)
    path = tmp_path / "replay.json"  # OTLP/JSON as the protobuf JSON mapping writes it (the Collector's file exporter)
    path.write_bytes(orjson.dumps(MessageToDict(encode_spans(spans))))
    with TraceStore(str(tmp_path / "ingested.db")) as store:
        stats = ingest_files([str(path)], store, redact=False)
    assert stats.runs == 0 and _runs(tmp_path / "ingested.db") == 0
    assert stats.reasons == {"replay span (a harvester replay's, never stored)": len(spans)}
