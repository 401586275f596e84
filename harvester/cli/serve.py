"""``harvester serve``: the OTLP/HTTP receiver in the foreground, until Ctrl-C or SIGTERM."""

from __future__ import annotations

import ipaddress
import os
import signal
import threading

import click

from ..config import load_config
from ..errors import ReceiverError
from ..redact import redaction_for
from . import handle_errors, main, plural

__all__ = ["exposure_warning", "serve"]


def exposure_warning(host: str, token: str | None) -> str | None:
    """A receiver reachable from other machines without a token stores whatever anyone sends it.

    Only a loopback address (parsed: ``127.0.0.9`` is one, ``127.example.com`` is not) or the name
    ``localhost`` is trusted; any other name may resolve to an address other machines reach.
    """
    if token or host == "localhost" or _is_loopback(host):
        return None
    return f"warning: {host or 'every address'} accepts traces from other machines and no --token is set"


def _is_loopback(host: str) -> bool:
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1
    return address.is_loopback or (mapped is not None and mapped.is_loopback)


@main.command()
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to bind. Loopback by default; use 0.0.0.0 (with --token) to accept other machines.",
)
@click.option(
    "--port",
    default=4318,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="TCP port (4318 is the OTLP/HTTP default; 0 picks a free one).",
)
@click.option(
    "--store",
    "store",
    default=None,
    metavar="PATH",
    help="Trace store [default: $HARVESTER_STORE, the config's store, or .harvester/traces.db].",
)
@click.option(
    "--idle-seconds",
    default=2.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="A run is complete once its agent span is in and its trace got no span for this long. "
    "Raise it when agents nest or several services send spans of one trace.",
)
@click.option(
    "--max-body-mb",
    default=16.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Larger request bodies are refused (413).",
)
@click.option(
    "--header-timeout",
    default=5.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds a request's headers may take to arrive (from a new connection's start, or a "
    "request's first byte); the connection is closed past it.",
)
@click.option(
    "--body-timeout",
    default=60.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds a request's whole body may take to arrive (408 past it).",
)
@click.option(
    "--min-body-kib-s",
    default=64.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="KiB a second a body must average after its first 5 s (408 below it; 0: no minimum).",
)
@click.option(
    "--max-client-connections",
    default=32,
    show_default=True,
    type=click.IntRange(min=1),
    help="Connections one client address may hold at once (of 128 in all; 503 past it). "
    "Raise it for many exporters behind one NAT or proxy.",
)
@click.option(
    "--token",
    envvar="HARVESTER_TOKEN",
    default=None,
    metavar="TOKEN",
    help="Require 'Authorization: Bearer TOKEN' on every request, /healthz included (401 otherwise) "
    "[env: HARVESTER_TOKEN].",
)
@click.option(
    "--sample-rate",
    default=1.0,
    show_default=True,
    type=click.FloatRange(0, 1),
    help="Share of successful runs stored; failed and flagged runs are always kept.",
)
@click.option(
    "--config",
    "config_path",
    default=None,
    metavar="PATH",
    help="Config file for the store and the redaction rules "
    "[default: harvester.toml or [tool.harvester] found from the cwd upward].",
)
@handle_errors
def serve(
    host: str,
    port: int,
    store: str | None,
    idle_seconds: float,
    max_body_mb: float,
    header_timeout: float,
    body_timeout: float,
    min_body_kib_s: float,
    max_client_connections: int,
    token: str | None,
    sample_rate: float,
    config_path: str | None,
) -> None:
    """Receive traces over OTLP/HTTP (POST /v1/traces, protobuf or JSON) into the trace store.

    Point an OTLP exporter or a Collector's otlphttp exporter at the printed URL. Each complete run
    is sampled, redacted (with the project's rules) and stored as the in-process
    HarvestingSpanProcessor would. GET /healthz reports counters (with --token, it needs the token
    too). Ctrl-C or SIGTERM stores the open runs, then exits 0.
    """
    try:
        from ..intake import Receiver
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith(("opentelemetry.proto", "google")):
            raise
        raise ReceiverError(
            "harvester serve needs opentelemetry-proto: pip install opentelemetry-proto "
            "(or install harvester with its serve extra)"
        ) from None

    config = load_config(config_path)
    if store is None and not os.environ.get("HARVESTER_STORE"):
        store = config.store
    receiver = Receiver(
        store,
        sample_rate=sample_rate,
        redact=redaction_for(config),
        host=host,
        port=port,
        idle_seconds=idle_seconds,
        max_body_bytes=int(max_body_mb * (1 << 20)),
        header_timeout=header_timeout,
        body_timeout=body_timeout,
        min_body_rate=min_body_kib_s * 1024,
        max_client_connections=max_client_connections,
        token=token,
        on_flush=lambda n: click.echo(f"completed {n} trace{'s' * (n != 1)}"),
        store_process=True,
    )
    done = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: done.set())
    try:
        receiver.start()
        click.echo(f"listening on {receiver.url}", nl=True)
        warning = exposure_warning(host, token)
        if warning:
            click.echo(warning, err=True)
        try:
            while not done.wait(1.0):  # a timeout, so Ctrl-C is delivered on every platform
                pass
        except KeyboardInterrupt:
            pass
        click.echo("stopping: storing open runs")
    finally:
        signal.signal(signal.SIGTERM, previous)
        receiver.stop()
    health = receiver.health()
    # Traces sampled in are stored whole and read into runs at the store's first read; runs written now
    # are those of traces sampled out that failed (or all of them with the project's own redaction rules).
    counts = ((health["traces_written"], "trace"), (health["runs_written"], "run"))
    stored = [plural(n, unit) for n, unit in counts if n]
    click.echo(f"received {health['received_spans']} spans, stored {' and '.join(stored) or '0 runs'}")
