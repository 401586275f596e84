"""``harvester ingest`` and ``harvester traces list/show/export/prune/copy``: the trace store from a shell."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterable
from datetime import datetime

import click
import orjson

from .._files import write_file
from ..config import Config
from ..errors import NotFoundError
from ..model import Run
from ..store import TraceStore, failure_summary
from . import ENCODABLE, ProgressBar, echo_json, json_option, main, open_store, plural, store_option, with_config

__all__ = ["ingest", "traces", "traces_copy", "traces_export", "traces_list", "traces_prune", "traces_show"]


@main.command()
@click.argument("files", nargs=-1, required=True, metavar="FILE...")
@store_option
@click.option("--no-redact", is_flag=True, help="Store payloads as they are (redaction is on by default).")
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Worker processes for big inputs (default: one per core, at most 2; 1 = all in this process).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the counts as JSON.")
@with_config
def ingest(
    files: tuple[str, ...], store_path: str | None, no_redact: bool, jobs: int | None, as_json: bool, config: Config
) -> None:
    """Import OTLP/JSON trace files into the trace store (FILE - reads stdin).

    Accepts one OTLP/JSON document per file or the Collector file exporter's JSON lines. Spans are
    grouped by trace, normalized into runs, redacted and stored; malformed spans are skipped and
    counted. A file that is not OTLP/JSON stops the import (earlier files stay imported). Files of
    8 MB or more are parsed and normalized on --jobs worker processes; the stored runs are the same.
    """
    from ..intake import ingest_files  # the capture pipeline and the redaction rules: loaded when ingest runs
    from ..redact import redaction_for

    redact = False if no_redact else redaction_for(config)
    # A bar over the files when there are several and someone is watching (stderr is a terminal).
    show = len(files) > 1 and sys.stderr.isatty() and not as_json
    with open_store(store_path, config, create=True) as store, ProgressBar("ingesting", show=show) as bar:
        stats = ingest_files(files, store, redact=redact, jobs=jobs, progress=bar)
    if as_json:
        echo_json(stats.to_dict())
    else:
        extra = f", {stats.no_agent} traces without an agent span" if stats.no_agent else ""
        if stats.lost:
            extra += f", {sum(stats.lost.values())} lost: " + ", ".join(
                f"{k} {n}" for k, n in sorted(stats.lost.items())
            )
        click.echo(
            f"ingested {plural(stats.runs, 'run')} from {plural(stats.spans, 'span')} ({stats.skipped} skipped{extra})"
        )


@main.group()
def traces() -> None:
    """Look at the runs in the trace store: list, show, export, prune."""


def _abridge(text: str | None, width: int) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= width else text[: width - 1] + "…"


def _when(run: Run) -> str:
    if not run.started_at:
        return "-"
    try:
        return datetime.fromisoformat(run.started_at.replace("Z", "+00:00")).strftime("%Y-%m-%d %H:%M")
    except ValueError:
        return run.started_at[:16]


@traces.command("list")
@store_option
@click.option(
    "--failed", is_flag=True, help="Only failed runs (error stop, failed or blocked calls, negative feedback)."
)
@click.option("--agent", metavar="NAME", type=ENCODABLE, help="Only runs of this agent.")
@click.option("--since", metavar="TIME", help="Only runs started after TIME: ISO time or age (30m, 12h, 7d).")
@click.option("--limit", type=click.IntRange(min=1), default=50, show_default=True, help="Show at most N runs.")
@click.option("--json", "as_json", is_flag=True, help="Print the runs as JSON lines.")
@with_config
def traces_list(
    store_path: str | None,
    failed: bool,
    agent: str | None,
    since: str | None,
    limit: int,
    as_json: bool,
    config: Config,
) -> None:
    """List stored runs, newest first.

    LOST: why capture lost spans of the run's trace (its queue full, the trace too big or too old):
    the run may lack model or tool calls. "-": stored whole.
    """
    with open_store(store_path, config, readonly=True) as store:
        runs = store.runs(failed=True if failed else None, agent=agent, since=since, limit=limit)
        if as_json:
            for run in runs:
                sys.stdout.write(run.to_json().decode() + "\n")
            return
        rows = [
            (
                run.trace_id[:12],
                _when(run),
                _abridge(run.agent or "-", 16),
                run.stop,
                run.incomplete or "-",
                _abridge(failure_summary(run) or "-", 28),
                _abridge(" > ".join(run.trajectory()) or "-", 36),
                _abridge(run.prompt, 48),
            )
            for run in runs
        ]
    if not rows:
        click.echo(
            "no runs stored" + (" match" if failed or agent or since else "") + "; import traces with "
            "`harvester ingest FILE` or capture them with HarvestingSpanProcessor"
        )
        return
    header = ("TRACE", "STARTED", "AGENT", "STOP", "LOST", "FAILURE", "TRAJECTORY", "PROMPT")
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    for row in [header, *rows]:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())


def _not_found(store: TraceStore, trace_id: str) -> NotFoundError:
    near = store.ids_like(trace_id)
    hint = f"; nearest: {', '.join(near)}" if near else ""
    return NotFoundError(f"no trace {trace_id!r} in {store.path}{hint}; import traces with `harvester ingest FILE`")


@traces.command("show")
@click.argument("trace_id", type=ENCODABLE)
@store_option
@click.option("--json", "as_json", is_flag=True, help="Print the Run JSON (one object per run of the trace).")
@with_config
def traces_show(trace_id: str, store_path: str | None, as_json: bool, config: Config) -> None:
    """Show the runs of one trace (TRACE_ID may be a unique prefix)."""
    with open_store(store_path, config, readonly=True) as store:
        runs = store.get(trace_id)
        if not runs:
            raise _not_found(store, trace_id)
    if as_json:
        # One run: exactly the Run JSON (docs/concepts.md). Several runs in one trace: a list of them.
        dumped = [run.to_data() for run in runs]
        echo_json(dumped[0] if len(dumped) == 1 else dumped)
        return
    for run in runs:
        click.echo(f"trace {run.trace_id}  run {run.run_id}  agent {run.agent or '-'}  model {run.model or '-'}")
        click.echo(
            f"started {run.started_at or '-'}  {run.duration_ms or 0:.0f} ms  stop {run.stop}  "
            f"tokens {run.usage.text()}"
        )
        if run.error:
            click.echo(f"error {run.error.type}: {_abridge(run.error.message, 100)}")
        click.echo(f"prompt: {_abridge(run.prompt, 200)}")
        for i, call in enumerate(run.calls, 1):
            if call.status == "blocked":
                outcome = "denied, never executed"
            elif call.error:
                outcome = f"{call.error.type}: {_abridge(call.error.message, 60)}"
            else:
                outcome = _abridge(
                    call.result if isinstance(call.result, str) else orjson.dumps(call.result).decode(), 60
                )
            click.echo(
                f"  {i}. {call.name} [{call.status}] {_abridge(orjson.dumps(call.args).decode(), 50)} -> {outcome}"
            )
        click.echo(f"answer: {_abridge(run.answer, 200) if run.answer else '(none)'}")
        if not run.content_captured:
            click.echo("(content capture was off for part of this run: some payloads are unknown)")


@traces.command("export")
@click.argument("trace_ids", nargs=-1, metavar="[TRACE_ID...]", type=ENCODABLE)
@store_option
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), help="Write to FILE (default: stdout).")
@click.option("--failed", is_flag=True, help="Without ids: only traces with a failed run.")
@click.option("--since", metavar="TIME", help="Without ids: only runs started after TIME.")
@click.option(
    "--lines",
    is_flag=True,
    help="JSON lines, a document per 100 traces, streamed (memory stays flat however big the store; "
    "what the Collector's file exporter writes and `harvester ingest` reads).",
)
@with_config
def traces_export(
    trace_ids: tuple[str, ...],
    store_path: str | None,
    output: str | None,
    failed: bool,
    since: str | None,
    lines: bool,
    config: Config,
) -> None:
    """Export stored raw spans as one OTLP/JSON document, or JSON lines (all traces when no id is given)."""
    from ..store import export_otlp, export_otlp_lines

    with open_store(store_path, config, readonly=True) as store:
        ids, only_failed = list(trace_ids) or None, True if failed else None
        data: Iterable[bytes]
        try:
            if lines:  # the ids are resolved at the first line: a missing one is an error before any output
                streamed = export_otlp_lines(store, ids, failed=only_failed, since=since)
                data = itertools.chain([next(streamed, b"")], streamed)
            else:
                data = [orjson.dumps(export_otlp(store, ids, failed=only_failed, since=since))]
        except NotFoundError:
            missing = next(t for t in trace_ids if store.resolve(t) is None)
            raise _not_found(store, missing) from None
        if output:
            write_file(output, data, atomic=True)
            click.echo(f"wrote {output}", err=True)
        else:
            out = getattr(sys.stdout, "buffer", None)  # a text stream without one (an embedding app's) gets text
            for part in data if lines else itertools.chain(data, [b"\n"]):
                if out is not None:
                    out.write(part)
                else:
                    sys.stdout.write(part.decode())


@traces.command("prune")
@store_option
@click.option("--keep-days", type=click.FloatRange(min=0), help="Delete successful runs older than N days.")
@click.option("--keep-failed-days", type=click.FloatRange(min=0), help="Delete failed runs older than N days.")
@click.option(
    "--max-mb", type=click.FloatRange(min=0), help="Then delete the oldest runs (successes first) until the store fits."
)
@json_option
@with_config
def traces_prune(
    store_path: str | None,
    keep_days: float | None,
    keep_failed_days: float | None,
    max_mb: float | None,
    as_json: bool,
    config: Config,
) -> None:
    """Apply retention: old successes go first, failures are kept longest."""
    if keep_days is None and max_mb is None and keep_failed_days is None:
        raise click.UsageError("give --keep-days, --keep-failed-days and/or --max-mb")
    with open_store(store_path, config) as store:
        deleted = store.prune(keep_days=keep_days, max_mb=max_mb, keep_failed_days=keep_failed_days)
        left = store.count()
    if as_json:
        echo_json({"deleted": deleted, "left": left})
    else:
        click.echo(f"deleted {plural(deleted, 'run')}, {left} left")


BAR_MIN = 5_000  # runs; fewer are copied in a second or two


@traces.command("copy")
@click.argument("src", metavar="SRC")
@click.argument("dst", metavar="DST")
@json_option
@with_config
def traces_copy(src: str, dst: str, as_json: bool, config: Config) -> None:
    """Copy every run from the store SRC into DST (SQLite paths or postgresql:// URLs, either way).

    Runs DST already holds are left as they are, so a copy that was stopped resumes when run again.
    DST is created when it does not exist.
    """
    from ..store import copy_store

    with (
        open_store(src, config, readonly=True) as source,
        open_store(dst, config, create=True) as target,
        ProgressBar("copying", show=sys.stderr.isatty() and not as_json, min_total=BAR_MIN, unit="runs") as bar,
    ):
        done = copy_store(source, target, progress=bar)
        names = source.path, target.path
    if as_json:
        echo_json({"copied": done.copied, "already_there": done.present})
    else:
        there = f" ({plural(done.present, 'run')} already there)" if done.present else ""
        click.echo(f"copied {plural(done.copied, 'run')} from {names[0]} into {names[1]}{there}")
