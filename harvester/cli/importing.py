"""``harvester import URL [TRACE_ID...]``: traces from an observability backend into the store.

The backends, their URL forms and their credentials come from the backends' registry: this module
names none of them.
"""

from __future__ import annotations

import re
import sys
import time
from datetime import datetime, timezone
from typing import Any

import click

from ..config import Config
from ..errors import InputError
from ..intake.backends import BACKENDS, url_forms
from ..redact import redaction_for
from . import ENCODABLE, ProgressBar, echo_json, json_option, main, open_store, plural, store_option, with_config

__all__ = ["import_command", "pull_limits", "since_ns", "store_pulled"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def since_ns(text: str | None) -> int | None:
    """``--since``: an age (``90m``, ``24h``, ``7d``, ``2w``) or an ISO date/time (UTC unless it says),
    no further back than 1970 (an age past that, or a date before it, is a usage error)."""
    if text is None:
        return None
    now, shown = time.time(), repr(text if len(text) <= 40 else text[:40] + "...")
    if m := re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*", text.lower()):
        seconds = float(m[1]) * _UNITS[m[2]]
        if not seconds <= now:  # also inf, from an age of 400 digits
            raise InputError(f"--since {shown} reaches back before 1970; use a shorter age (30m, 24h, 7d)")
        return int((now - seconds) * 1e9)
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise InputError(f"--since {shown}: use an age (30m, 24h, 7d) or an ISO date (2026-12-01T08:00)") from None
    when = when if when.tzinfo else when.replace(tzinfo=timezone.utc)
    if when < _EPOCH:
        raise InputError(f"--since {shown} is before 1970; use a later date")
    return int(when.timestamp() * 1e9)


def pull_limits(config: Config, deadline: float | None = None) -> Any:
    """The ``Limits`` of a pull: ``[tool.harvester.import]``, ``deadline`` (``--deadline``) first."""
    from ..intake.backends import Limits

    policy = config.imports
    return Limits(deadline if deadline is not None else policy.deadline, policy.max_pages,
                  policy.max_answer_mib << 20)  # fmt: skip


def store_pulled(got: Any, store_path: str | None, config: Config) -> tuple[Any, dict[str, Any]]:
    """Traces ``pull`` read whole, stored (merged, redacted) as ingest stores a file; then each stored
    trace's runs, read back as every later command will read them."""
    from ..intake import ingest_traces

    with open_store(store_path, config, create=True) as store:
        stats = ingest_traces(got.traces, store, redact=redaction_for(config))
        return stats, {tid: store.get(tid) for tid in got.traces}


_HELP = f"""Pull traces from an observability backend into the trace store, for harvest and incident.

URL names the backend: {url_forms()} (+https for TLS, e.g. {BACKENDS[0].name}+https://host). Credentials come
only from the environment variables of docs/backends/index.md. With TRACE_IDs, those traces;
without, the newest --limit the backend finds (--since, --failed filter on the server where it can).
Every trace is read whole before anything is stored, redacted as every write is. The whole pull ends
within --deadline, and each trace or listing within import.max_pages pages (docs/backends/index.md).
"""


@main.command("import", help=_HELP)
@click.argument("url", type=ENCODABLE)
@click.argument("trace_ids", nargs=-1, metavar="[TRACE_ID]...", type=ENCODABLE)
@click.option("--since", metavar="AGE|DATE", help="Only traces started since then (24h, 7d, 2026-12-01).")
@click.option("--failed", is_flag=True, help="Only traces with a failed span.")
@click.option("--limit", type=int, default=100, show_default=True, help="At most this many traces (newest first).")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=30.0, show_default=True, help="Seconds a request.")
@click.option(
    "--deadline",
    type=click.FloatRange(min=0.1),
    help="Seconds the whole import may take  [default: import.deadline, 600]",
)
@store_option
@json_option
@with_config
def import_command(
    url: str,
    trace_ids: tuple[str, ...],
    since: str | None,
    failed: bool,
    limit: int,
    timeout: float,
    deadline: float | None,
    store_path: str | None,
    as_json: bool,
    config: Config,
) -> None:
    """``_HELP``: read whole, then stored; one line per run of what its spans held."""
    from ..intake.backends import fidelity, pull

    show = sys.stderr.isatty() and not as_json
    with ProgressBar("importing", show=show, unit="traces") as bar:  # read whole before the store is touched
        got = pull(url, trace_ids, since_ns=since_ns(since), failed=failed, limit=limit, timeout=timeout,
                   limits=pull_limits(config, deadline), progress=bar)  # fmt: skip
    stats, stored = store_pulled(got, store_path, config)
    rows: list[dict[str, Any]] = []
    for tid, runs in stored.items():
        for run in runs:
            fid = fidelity(run)
            rows.append({"trace_id": tid, "run_id": run.run_id, "agent": run.agent, "failed": run.failed,
                         "held": fid.held, "missing": fid.missing})  # fmt: skip
    if as_json:
        echo_json({"backend": str(got.target), "traces": len(got.traces), "runs": len(rows), "imported": rows})
        return
    click.echo(f"imported {plural(len(got.traces), 'trace')} ({plural(len(rows), 'run')}) from {got.target}")
    for row in rows:
        held = ", ".join(row["held"]) or "nothing"
        missing = f"; missing: {', '.join(row['missing'])}" if row["missing"] else ""
        mark = "failed " if row["failed"] else ""
        click.echo(f"  {row['trace_id'][:12]} {row['agent'] or '?'} {mark}held: {held}{missing}")
    if stats.no_agent:
        click.echo(f"  {plural(stats.no_agent, 'trace')} without an agent span (nothing to make a case of)")
    if rows:
        click.echo("next: harvester harvest  (or harvester incident TRACE_ID --why ...)")
