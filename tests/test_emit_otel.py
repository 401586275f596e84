"""Verdicts back into OpenTelemetry (issue #17 item 4): the real OTLP/HTTP exporter sends one span per case,
with ``gen_ai.evaluation.result`` events, linked to the case's source production run, to a loopback OTLP
server that decodes the protobuf; a backend that is down costs a warning line, within the timeout."""

from __future__ import annotations

import http.server
import socket
import threading
from collections.abc import Iterator
from typing import Any

import click
import pytest
from click.testing import CliRunner
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from harvester import seam
from harvester.case import load_cases
from harvester.case._format import Source
from harvester.cli._emit import emit_after, emit_options
from harvester.demo import agent as support
from harvester.replay import replay
from harvester.report import CaseResult, CheckResult, Report, _otel
from harvester.report._otel import EVALUATION_EVENT, emit_verdicts
from harvester.suite import suite_info

from .example_suite import CASES

ENV = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
)


class Collector:
    """A loopback OTLP/HTTP traces endpoint that keeps every decoded request and its headers."""

    def __init__(self, status: int = 200) -> None:
        self.requests: list[tuple[str, dict[str, str], ExportTraceServiceRequest]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                outer.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}, request))
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
        self.thread.start()

    def spans(self) -> list[Any]:
        return [s for _, _, r in self.requests for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def collector() -> Iterator[Collector]:
    c = Collector()
    yield c
    c.close()


@pytest.fixture(autouse=True)
def _no_otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def demo() -> tuple[Report, list[Any]]:
    """A real replay of the shipped example suite against the example agent."""
    cases = load_cases(CASES, status="accepted")
    return replay(cases, support.build, suite=suite_info(CASES)), cases


def _attrs(kvs: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kv in kvs:
        v = kv.value
        kind = v.WhichOneof("value")
        out[kv.key] = (
            [getattr(x, x.WhichOneof("value")) for x in v.array_value.values]
            if kind == "array_value"
            else getattr(v, kind)
        )
    return out


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_one_span_per_case_with_evaluation_events_linked_to_the_source_run(demo, collector):
    report, cases = demo
    result = emit_verdicts(report, collector.base + "/v1/traces", cases=cases, timeout=5)
    assert result.ok and result.spans == len(report.results) == 3
    assert result.line() == f"exported 3 verdicts ({result.checks} checks) to {collector.base}/v1/traces"
    [(path, headers, request)] = collector.requests
    assert path == "/v1/traces" and headers["content-type"] == "application/x-protobuf"
    assert _attrs(request.resource_spans[0].resource.attributes)["service.name"] == "harvester"
    spans = {_attrs(s.attributes)["harvester.case"]: s for s in collector.spans()}
    assert set(spans) == {c.id for c in cases}
    for case in cases:
        span, r = spans[case.id], report.result(case.id)
        assert r is not None
        assert span.name == f"harvester.replay {case.id}"
        attrs = _attrs(span.attributes)
        assert attrs["harvester.suite"] == "support-demo" and attrs["harvester.suite.version"] == "1.0.0"
        assert attrs["harvester.case.passed"] is True and attrs["harvester.case.trials"] == 1
        assert attrs["harvester.case.pass_rate"] == 1.0 and attrs["harvester.case.tags"] == list(r.tags)
        assert attrs["harvester.source.trace_id"] == case.source.trace_id
        # The link points at the production run the case was harvested from.
        [link] = span.links
        assert link.trace_id.hex() == case.source.trace_id and link.span_id.hex() == case.source.run_id
        assert span.trace_id.hex() != case.source.trace_id  # a trace of its own, not a child of production
        events = [e for e in span.events if e.name == EVALUATION_EVENT]
        assert len(events) == len(r.checks) + 1
        for event, check in zip(events, r.checks):
            expected = {"gen_ai.evaluation.name": check.name, "gen_ai.evaluation.explanation": check.detail}
            if check.passed is None:  # the run lacks what the check reads: a label, no score
                expected["gen_ai.evaluation.score.label"] = "not_checked"
            else:
                assert check.passed is True
                expected.update({"gen_ai.evaluation.score.label": "pass", "gen_ai.evaluation.score.value": 1.0})
            assert _attrs(event.attributes) == expected
        verdict = _attrs(events[-1].attributes)
        assert verdict["gen_ai.evaluation.name"] == "harvester.verdict"
        assert verdict["gen_ai.evaluation.score.label"] == "pass"
        assert verdict["gen_ai.evaluation.score.value"] == 1.0
        assert span.status.code == span.status.STATUS_CODE_OK
        # Marked as replay traffic, as seam.replay_span reads it in spans that left the process.
        assert seam.replay_span(span.trace_state, span.name, span.attributes)


def test_the_attribute_names_are_the_semantic_conventions_own():
    from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as genai

    assert _otel.NAME == genai.GEN_AI_EVALUATION_NAME
    assert _otel.SCORE_VALUE == genai.GEN_AI_EVALUATION_SCORE_VALUE
    assert _otel.SCORE_LABEL == genai.GEN_AI_EVALUATION_SCORE_LABEL
    assert _otel.EXPLANATION == genai.GEN_AI_EVALUATION_EXPLANATION


def _mixed_report() -> Report:
    return Report(
        suite="s",
        trials=4,
        results=[
            CaseResult(
                id="refund",
                passed=False,
                trials=4,
                passes=1,
                tags=["security"],
                checks=[
                    CheckResult(name="answered", passed=True, detail="answered"),
                    CheckResult(name="never_used", passed=False, detail="issue_refund executed"),
                    CheckResult(name="judge", passed=None, detail="no answer to judge"),
                ],
            ),
            CaseResult(id="boom", passed=False, errored=True, error="ImportError: no module"),
        ],
    )


def test_a_failing_case_has_fail_and_not_checked_labels_and_its_pass_rate(collector):
    sources = {"refund": Source(trace_id="ab" * 16)}  # no run id: nothing to link to, the id is still there
    result = emit_verdicts(_mixed_report(), collector.base, cases=sources, timeout=5)
    assert result.ok and result.endpoint == collector.base + "/v1/traces"  # a bare URL gets the traces path
    spans = {_attrs(s.attributes)["harvester.case"]: s for s in collector.spans()}
    refund = spans["refund"]
    assert list(refund.links) == [] and _attrs(refund.attributes)["harvester.source.trace_id"] == "ab" * 16
    assert refund.status.code == refund.status.STATUS_CODE_ERROR
    answered, never_used, judge, verdict = (_attrs(e.attributes) for e in refund.events)
    assert never_used["gen_ai.evaluation.score.value"] == 0.0
    assert never_used["gen_ai.evaluation.score.label"] == "fail"
    assert never_used["gen_ai.evaluation.explanation"] == "issue_refund executed"
    assert judge["gen_ai.evaluation.score.label"] == "not_checked" and "gen_ai.evaluation.score.value" not in judge
    assert verdict["gen_ai.evaluation.score.value"] == 0.25 and verdict["gen_ai.evaluation.score.label"] == "fail"
    assert "1/4 trials passed" in verdict["gen_ai.evaluation.explanation"]
    assert "never_used: issue_refund executed" in verdict["gen_ai.evaluation.explanation"]
    boom = _attrs(spans["boom"].events[-1].attributes)
    assert boom["gen_ai.evaluation.score.label"] == "error" and boom["error.type"] == "ImportError"
    assert "gen_ai.evaluation.score.value" not in boom


def test_emit_otel_reads_the_sdk_environment_and_sends_its_headers(collector, monkeypatch, demo):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.base + "/")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Bearer%20s3cret,x-team=agents")
    report, cases = demo
    line = emit_after(report, None, True, cases=cases)
    assert line is not None and line.startswith("exported 3 verdicts") and line.endswith(f"{collector.base}/v1/traces")
    [(path, headers, _)] = collector.requests
    assert path == "/v1/traces"
    assert headers["authorization"] == "Bearer s3cret" and headers["x-team"] == "agents"
    # The signal's own variable wins, used as is.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", collector.base + "/custom/traces")
    assert emit_after(report, None, True).endswith("/custom/traces")  # type: ignore[union-attr]
    assert collector.requests[-1][0] == "/custom/traces"
    assert emit_after(report, None, False) is None  # not asked: nothing sent, nothing printed
    assert len(collector.requests) == 2


@pytest.mark.slow
def test_an_unreachable_endpoint_is_one_warning_line(demo, capfd):
    report, cases = demo
    url = f"http://127.0.0.1:{_closed_port()}/v1/traces"
    line = emit_after(report, url, False, cases=cases, timeout=1.5)
    assert line == f"warning: could not export verdicts to {url}: connection refused"
    assert capfd.readouterr().err == ""  # the exporter's retry warnings are not printed over the report


def test_an_endpoint_that_answers_an_error_names_the_status():
    c = Collector(status=404)
    try:
        result = emit_verdicts(_mixed_report(), c.base + "/wrong", timeout=3)
    finally:
        c.close()
    assert not result.ok and result.error is not None and result.error.startswith("HTTP 404")


def test_verdict_spans_sent_to_harvesters_own_receiver_never_become_runs(tmp_path, demo):
    from harvester.intake import Receiver
    from harvester.store import TraceStore

    store = str(tmp_path / "traces.db")
    rec = Receiver(store, port=0, idle_seconds=0.05)
    rec.start()
    try:
        report, cases = demo
        assert emit_verdicts(report, rec.url, cases=cases, timeout=5).ok
    finally:
        rec.stop(timeout=2)
    health = rec.health()
    # Dropped as replay traffic on arrival (counted apart), before assembly could make anything of them.
    assert health["export_requests"] == 1 and health["replay_spans"] == 3 and health["received_spans"] == 0
    assert list(TraceStore(store).runs()) == []


def test_the_options_are_checked_before_anything_runs(monkeypatch):
    ran: list[Any] = []

    @click.command()
    @emit_options
    def cmd(otlp_endpoint: str | None, emit_otel: bool) -> None:
        ran.append((otlp_endpoint, emit_otel))

    runner = CliRunner()
    assert runner.invoke(cmd, ["--otlp-endpoint", "http://127.0.0.1:4318"]).exit_code == 0
    assert ran == [("http://127.0.0.1:4318", False)]
    bad = runner.invoke(cmd, ["--otlp-endpoint", "127.0.0.1:4318"])
    assert bad.exit_code == 2 and "is not an http(s) URL" in bad.output
    monkeypatch.setattr("harvester.report.exporter_available", lambda: False)  # where the CLI looks it up
    missing = runner.invoke(cmd, ["--emit-otel"])
    assert missing.exit_code == 2 and "pip install opentelemetry-exporter-otlp-proto-http" in missing.output
    assert len(ran) == 1


@pytest.mark.slow
def test_an_endpoint_that_never_answers_is_given_up_at_the_timeout():
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(4)  # accepts connections, never reads nor answers
    try:
        result = emit_verdicts(_mixed_report(), f"http://127.0.0.1:{silent.getsockname()[1]}", timeout=1)
    finally:
        silent.close()
    assert result.error == "no answer within 1 s"
