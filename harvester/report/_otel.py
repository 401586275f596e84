"""A replay's verdicts as OpenTelemetry spans, so a tracing backend shows them beside production.

People who run Phoenix, Langfuse or Jaeger look there, not at a CI log: each case's verdict should sit next
to the production trace it was harvested from. So every result of a report becomes one span, named like
the replay's own case root (``harvester.replay <case id>``), with

- one ``gen_ai.evaluation.result`` event per check and one for the case's overall verdict, using the
  GenAI semantic conventions' evaluation attributes (``gen_ai.evaluation.name``, ``.score.value``,
  ``.score.label``, ``.explanation``) so backends that understand evaluations read them as such;
- a span Link to the case's source production run (its trace id and run span id, from the case file),
  since a verdict made hours later cannot be a child of that trace.

A verdict span must never come back as a production run: a collector may forward it to ``harvester
serve``. Each span carries the W3C ``tracestate`` replay marker and the replay root's name and
``harvester.case`` attribute, the two things ``seam.replay_span`` drops (counted in the receiver's
``replay_spans``), and no GenAI operation a convention reader would take for an agent run.

The spans are made by a private ``TracerProvider`` (never the global one, which the app may own) and
handed to the real ``OTLPSpanExporter`` in one call per batch, so the caller learns whether the export
worked. An unreachable endpoint is an ``EmitResult`` with an ``error``, within ``timeout`` seconds, never
an exception: a replay's other outputs matter more. The exporter package is optional and imported only
here, lazily, so ``import harvester`` stays cheap.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .. import seam
from ..errors import HarvesterError, InputError

if TYPE_CHECKING:
    from ..case import AgentCase, Source
    from ._report import Report
    from ._results import CaseResult

__all__ = [
    "DEFAULT_ENDPOINT",
    "EVALUATION_EVENT",
    "EXPLANATION",
    "EmitResult",
    "ExporterMissing",
    "NAME",
    "SCORE_LABEL",
    "SCORE_VALUE",
    "VERDICT",
    "emit_verdicts",
    "exporter_available",
    "resolve_endpoint",
]

# The GenAI semantic conventions' evaluation event (semantic-conventions-genai, model/gen-ai/events.yaml).
EVALUATION_EVENT = "gen_ai.evaluation.result"
NAME = "gen_ai.evaluation.name"  # required
SCORE_VALUE = "gen_ai.evaluation.score.value"  # a double
SCORE_LABEL = "gen_ai.evaluation.score.label"
EXPLANATION = "gen_ai.evaluation.explanation"
VERDICT = "harvester.verdict"  # the evaluation name of the case's overall verdict event

DEFAULT_ENDPOINT = "http://localhost:4318/v1/traces"  # the OTel SDK's default for OTLP/HTTP traces
TRACES_PATH = "/v1/traces"
PACKAGE = "opentelemetry-exporter-otlp-proto-http"
MAX_TEXT = 4096  # an explanation longer than this is cut: a backend shows it in a tooltip, not a page
BATCH = 512  # spans per export request (the SDK's BatchSpanProcessor default)
_LOGGER = "opentelemetry.exporter.otlp"


class ExporterMissing(HarvesterError):
    """The optional OTLP/HTTP exporter is not installed."""

    def __init__(self) -> None:
        super().__init__(f"exporting verdicts needs {PACKAGE}: pip install {PACKAGE}")


@dataclass(frozen=True)
class EmitResult:
    """What an export did: ``spans`` case spans carrying ``checks`` check events were sent to ``endpoint``,
    or not (``error`` says why, in a few words)."""

    endpoint: str
    spans: int
    checks: int
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def line(self) -> str:
        """The one line a command prints."""
        if self.error is not None:
            return f"warning: could not export verdicts to {self.endpoint}: {self.error}"
        return f"exported {self.spans} verdict{'s' * (self.spans != 1)} ({self.checks} checks) to {self.endpoint}"


def exporter_available() -> bool:
    """The OTLP/HTTP exporter can be imported (checked before a replay, so a missing one costs no run)."""
    try:
        import opentelemetry.exporter.otlp.proto.http.trace_exporter  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_endpoint(endpoint: str | None) -> str:
    """The traces URL to send to. ``None``: the OTel SDK's environment variables (the signal's own
    ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` as is, else ``OTEL_EXPORTER_OTLP_ENDPOINT`` + ``/v1/traces``,
    else localhost:4318). A given URL with no path gets ``/v1/traces``; one with a path is used as is
    (Langfuse's and Phoenix's endpoints have their own). ``InputError`` for what is not an http(s) URL."""
    if endpoint is None:
        traces = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
        if traces:
            return _checked(traces, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
        if not base:
            return DEFAULT_ENDPOINT
        return _checked(base.rstrip("/") + TRACES_PATH, "OTEL_EXPORTER_OTLP_ENDPOINT")
    url = _checked(endpoint.strip(), "--otlp-endpoint")
    return url.rstrip("/") + TRACES_PATH if urlsplit(url).path in ("", "/") else url


def _checked(url: str, where: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"{url!r} is not an http(s) URL (e.g. http://127.0.0.1:4318/v1/traces)", field=where)
    return url


def emit_verdicts(
    report: Report,
    endpoint: str | None = None,
    *,
    cases: Iterable[AgentCase] | Mapping[str, Source] | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float = 10.0,
    service_name: str = "harvester",
) -> EmitResult:
    """Export one span per result of ``report`` to an OTLP/HTTP ``endpoint`` (``None``: the environment's).

    ``cases``: the replayed cases (or ``{case id: case.source}``), whose source trace and run the spans link
    to; a report does not hold them. ``headers`` are sent with the request, on top of those in
    ``OTEL_EXPORTER_OTLP_HEADERS`` (the exporter reads it). ``timeout`` bounds the whole export, retries
    included. Raises ``ExporterMissing`` or ``InputError`` (a malformed URL); a failed export is returned.
    """
    url = resolve_endpoint(endpoint)
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise ExporterMissing() from None
    sources = _sources(cases)
    spans, checks = _spans(report, sources, service_name)
    exporter = OTLPSpanExporter(endpoint=url, headers=dict(headers or {}), timeout=timeout)
    failure: str | None = None
    deadline = time.monotonic() + timeout
    with _exporter_log() as records:
        try:
            for start in range(0, len(spans), BATCH):
                if time.monotonic() >= deadline:
                    failure = f"no answer within {timeout:g} s"
                    break
                result = exporter.export(spans[start : start + BATCH])
                if result.name != "SUCCESS":
                    failure = _reason(records, timeout)
                    break
        except Exception as exc:  # the exporter logs and returns; a transport that raises is a failed export too
            failure = f"{type(exc).__name__}: {exc}"
        finally:
            exporter.shutdown()
    return EmitResult(url, len(spans), checks, failure)


def _sources(cases: Iterable[AgentCase] | Mapping[str, Source] | None) -> dict[str, Source]:
    if cases is None:
        return {}
    if isinstance(cases, Mapping):
        return dict(cases)
    return {c.id: c.source for c in cases}


def _spans(report: Report, sources: Mapping[str, Source], service_name: str) -> tuple[list[Any], int]:
    """The finished spans, made by a private provider that sends them nowhere but back to us."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
    from opentelemetry.trace import TraceState

    marked = TraceState([(seam.MARK_KEY, seam.MARK_VALUE)])

    class Marked(Sampler):
        """Sample everything and put the replay marker in each span's tracestate (a root has no parent
        to inherit it from)."""

        def should_sample(
            self,
            parent_context: Any,
            trace_id: int,
            name: str,
            kind: Any = None,
            attributes: Any = None,
            *a: Any,
            **k: Any,
        ) -> Any:
            return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes, marked)  # the span keeps ``attributes``

        def get_description(self) -> str:
            return "HarvesterVerdicts"

    class Collect(SpanProcessor):
        def __init__(self) -> None:
            self.spans: list[ReadableSpan] = []

        def on_end(self, span: ReadableSpan) -> None:
            self.spans.append(span)

    collected = Collect()
    resource = Resource.create({"service.name": service_name, "harvester.verdicts": True})
    limits = SpanLimits(max_events=100_000, max_span_attributes=128, max_attribute_length=MAX_TEXT)
    provider = TracerProvider(resource=resource, sampler=Marked(), span_limits=limits, shutdown_on_exit=False)
    provider.add_span_processor(collected)
    tracer = provider.get_tracer("harvester.report")
    checks = 0
    now = time.time_ns()
    try:
        for result in report.results:
            checks += len(result.checks)
            _case_span(tracer, report, result, sources.get(result.id), now)
    finally:
        provider.shutdown()
    return collected.spans, checks


def _case_span(tracer: Any, report: Report, r: CaseResult, source: Source | None, now: int) -> None:
    from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

    attrs: dict[str, Any] = {
        seam.CASE_ATTRIBUTE: r.id,
        "harvester.suite": report.suite,
        "harvester.case.passed": r.passed,
        "harvester.case.trials": r.trials,
        "harvester.case.passes": r.passes or 0,
        "harvester.case.pass_rate": r.pass_rate,
        "harvester.case.tags": list(r.tags),
        "harvester.case.stop": r.stop,
        "harvester.case.steps": r.steps,
        "harvester.report.created_at": report.created_at,
    }
    optional = {
        "harvester.suite.version": report.suite_version,
        "harvester.case.why": r.why or None,
        "harvester.case.errored": r.errored or None,
        "harvester.case.flaky": r.flaky or None,
        "harvester.case.confirmation": r.confirmation,
        "harvester.case.error": r.error,
        "harvester.case.cost": r.cost,
        "harvester.case.divergence": r.divergence.summary() if r.divergence else None,
        "harvester.case.no_fixture": r.no_fixture or None,
        "harvester.case.unauthorised": r.unauthorised or None,
        "harvester.case.variant_of": r.variant_of,
        "harvester.case.injected": f"{r.injected.tool}:{r.injected.mode}" if r.injected else None,
        "harvester.source.trace_id": source.trace_id if source else None,
        "harvester.source.run_id": source.run_id if source else None,
    }
    attrs.update({k: v for k, v in optional.items() if v is not None})
    links = []
    trace_id, span_id = _hex(source.trace_id if source else None, 32), _hex(source.run_id if source else None, 16)
    if trace_id and span_id:
        ctx = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
        links.append(Link(ctx, {"harvester.link": "source"}))
    start = now - int(max(r.duration_ms, 0.0) * 1e6)
    span = tracer.start_span(
        f"{seam.ROOT_PREFIX}{r.id}", kind=SpanKind.INTERNAL, attributes=attrs, links=links, start_time=start
    )
    for check in r.checks:
        label = "not_checked" if check.passed is None else "pass" if check.passed else "fail"
        event: dict[str, Any] = {NAME: check.name, SCORE_LABEL: label, EXPLANATION: _cut(check.detail)}
        if check.passed is not None:
            event[SCORE_VALUE] = 1.0 if check.passed else 0.0
        span.add_event(EVALUATION_EVENT, event, timestamp=now)
    span.add_event(EVALUATION_EVENT, _verdict(r), timestamp=now)
    if r.errored or not r.passed:
        span.set_status(Status(StatusCode.ERROR, _cut(_explain(r), 256)))
    else:
        span.set_status(Status(StatusCode.OK))
    span.end(end_time=now)


def _verdict(r: CaseResult) -> dict[str, Any]:
    """The case's overall verdict: its pass rate over the trials, labelled pass, fail or error."""
    event: dict[str, Any] = {NAME: VERDICT, EXPLANATION: _cut(_explain(r))}
    if r.errored:
        event[SCORE_LABEL] = "error"
        event["error.type"] = (r.error or "harness").split(":", 1)[0]
    else:
        event[SCORE_LABEL] = "pass" if r.passed else "fail"
        event[SCORE_VALUE] = float(r.pass_rate)
    return event


def _explain(r: CaseResult) -> str:
    trials = f"{r.passes or 0}/{r.trials} trials passed" if r.trials > 1 else ""
    if r.errored:
        return "not evaluated: " + (r.error or "the harness could not run it")
    if r.passed:
        parts = [trials or "passed", f"confirmation {r.confirmation}" if r.confirmation else ""]
    else:
        parts = [trials, *r.reasons()]
    differences = r.differences()
    return "; ".join(p for p in [*parts, differences or ""] if p) or ("passed" if r.passed else "failed")


def _hex(value: str | None, digits: int) -> int | None:
    """A valid (non-zero) trace or span id from its hex form, else None (a case file may hold anything)."""
    if not value or len(value) != digits or not re.fullmatch(r"[0-9a-fA-F]+", value):
        return None
    return int(value, 16) or None


def _cut(text: str, limit: int = MAX_TEXT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@contextmanager
def _exporter_log() -> Iterator[list[logging.LogRecord]]:
    """Hold the exporter's log records instead of printing them: its retries and tracebacks would bury
    the one line the command prints, which names the cause read from them."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    logger = logging.getLogger(_LOGGER)
    handler, propagate = Keep(), logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def _reason(records: list[logging.LogRecord], timeout: float) -> str:
    """A few words on why the export failed, from what the exporter logged."""
    text = " ".join(_message(r) for r in records)
    errno = re.findall(r"\[Errno -?\d+\] ([^'\")\]]+)", text)
    if errno:
        return errno[-1].strip().lower()
    code = re.search(r"code: (\d+), reason: ([^,]*?)(?:$| Failed| Transient)", text)
    if code and code.group(1) != "None":
        return f"HTTP {code.group(1)} {code.group(2).strip()}".strip()
    transient = re.findall(r"Transient error (.+?) encountered while exporting", text)
    if transient and not re.search(r"timed? ?out", transient[-1], re.IGNORECASE):
        return f"{_cut(transient[-1], 120)}, still failing after retrying for {timeout:g} s"
    if re.search(r"timed? ?out", text, re.IGNORECASE):
        return f"no answer within {timeout:g} s"
    return _cut(records[-1].getMessage(), 200) if records else "export failed"


def _message(record: logging.LogRecord) -> str:
    try:
        return record.getMessage()
    except Exception:
        return str(record.msg)
