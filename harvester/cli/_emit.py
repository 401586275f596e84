"""``--otlp-endpoint URL`` and ``--emit-otel``: a replay's verdicts sent to a tracing backend.

The options are checked before anything runs (a malformed URL, or the exporter package missing, is a
usage error, exit 2, that costs no replay); the export itself runs after the replay and can only warn:
a tracing backend that is down must not fail a nightly job nor lose its report, so ``emit_after`` turns
every failure into the one line the command prints and never raises.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ..errors import HarvesterError, InputError

if TYPE_CHECKING:
    from ..case import AgentCase, Source
    from ..report import Report

__all__ = ["emit_after", "emit_options", "export_hosts"]

F = TypeVar("F", bound=Callable[..., Any])


def _need_exporter(option: str) -> None:
    from ..report import ExporterMissing, exporter_available

    if not exporter_available():
        raise click.BadParameter(f"{ExporterMissing()} (or give no {option})")


def _endpoint(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    from ..report import resolve_endpoint

    try:
        resolve_endpoint(value)
    except InputError as exc:
        raise click.BadParameter(exc.message) from None
    _need_exporter("--otlp-endpoint")
    return value


def _emit_flag(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value:
        from ..report import resolve_endpoint

        try:
            resolve_endpoint(None)  # a malformed OTEL_EXPORTER_OTLP_*ENDPOINT is caught before the replay
        except InputError as exc:
            raise click.BadParameter(str(exc)) from None
        _need_exporter("--emit-otel")
    return value


def emit_options(fn: F) -> F:
    """Add ``--otlp-endpoint URL`` and ``--emit-otel`` (parameters ``otlp_endpoint``, ``emit_otel``)."""
    fn = click.option(
        "--emit-otel",
        is_flag=True,
        callback=_emit_flag,
        help="Export each case's verdicts as OpenTelemetry spans to the endpoint in OTEL_EXPORTER_OTLP_ENDPOINT "
        "(or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT; headers from OTEL_EXPORTER_OTLP_HEADERS).",
    )(fn)
    fn = click.option(
        "--otlp-endpoint",
        metavar="URL",
        callback=_endpoint,
        help="Export each case's verdicts as OpenTelemetry spans (gen_ai.evaluation.result events) to this "
        "OTLP/HTTP URL (no path: /v1/traces). A backend that is down only prints a warning.",
    )(fn)
    return fn


def export_hosts(otlp_endpoint: str | None, emit_otel: bool) -> list[str]:
    """The ``host:port`` the verdicts are exported to (none when not asked, or when the endpoint is bad:
    ``emit_after`` says so)."""
    if otlp_endpoint is None and not emit_otel:
        return []
    from urllib.parse import urlsplit

    from ..report import resolve_endpoint

    try:
        parts = urlsplit(resolve_endpoint(otlp_endpoint))
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except (HarvesterError, ValueError):
        return []
    host = parts.hostname or ""
    return [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]


def emit_after(
    report: Report,
    otlp_endpoint: str | None,
    emit_otel: bool,
    *,
    cases: Iterable[AgentCase] | Mapping[str, Source] | None = None,
    timeout: float = 10.0,
) -> str | None:
    """Export the verdicts when asked; the line to print (None when not asked). Never raises: the
    replay's outputs are written whatever happens here. ``cases``: the replayed cases (or ``{case id:
    case.source}``), whose source production runs the spans link to."""
    if otlp_endpoint is None and not emit_otel:
        return None
    from ..report import emit_verdicts, resolve_endpoint

    try:
        return emit_verdicts(report, otlp_endpoint, cases=cases, timeout=timeout).line()
    except HarvesterError as exc:
        return f"warning: could not export verdicts: {exc}"
    except Exception as exc:  # a bug here must not cost the nightly job its report
        try:
            where = resolve_endpoint(otlp_endpoint)
        except HarvesterError:
            where = otlp_endpoint or "the OTLP endpoint"
        return f"warning: could not export verdicts to {where}: {type(exc).__name__}: {exc}"
