"""Commands that freeze runs into cases: harvest (a whole store) and incident (one reported run)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from ..case import CaseFolder, case_signatures
from ..config import Config
from ..errors import InputError, NotFoundError, OtlpFormatError
from ..intake.backends import labels, url_forms
from ..model import Run
from ..redact import redaction_for
from . import ENCODABLE, ProgressBar, echo_json, handle_errors, json_option, main, open_store, store_option
from .cases import cases_options, listing

__all__ = ["harvest", "incident", "rerecord"]


# -- harvest ------------------------------------------------------------------------------------
@main.command("harvest")
@click.option("--failed-only", is_flag=True, help="Only runs that failed (errors, denials, negative feedback...).")
@click.option("--since", metavar="T", help="Only runs started at or after T (ISO 8601, or an age like 24h or 7d).")
@click.option("--agent", metavar="A", type=ENCODABLE, help="Only runs of agent A.")
@click.option("--limit", type=click.IntRange(min=1), metavar="N", help="Read at most N runs.")
@click.option(
    "--sample",
    type=click.IntRange(min=0),
    metavar="N",
    help="Keep every failed run and a reproducible sample of N of the others.",
)
@click.option(
    "--by-cluster",
    is_flag=True,
    help="One case per failure cluster no case covers yet (see harvester triage), from its latest run.",
)
@click.option(
    "--refresh",
    is_flag=True,
    help="First rerecord every accepted case that has a newer run of its situation (the reviewer's fields kept).",
)
@store_option
@cases_options
@json_option
@handle_errors
def harvest(
    failed_only: bool,
    since: str | None,
    agent: str | None,
    limit: int | None,
    sample: int | None,
    by_cluster: bool,
    refresh: bool,
    store_path: str | None,
    config: Config,
    folder: CaseFolder,
    as_json: bool,
) -> None:
    """Turn stored runs into pending cases (cases/pending/), one case per distinct situation.

    Runs with the same normalized prompt, trajectory and failure kind become one case whose
    source.seen counts them. Reviewed (accepted or rejected) cases are never touched, unless
    --refresh: then each accepted case with a newer run of the same prompt and agent is rerecorded
    from it first (as harvester rerecord does), keeping what its reviewer decided. --by-cluster
    proposes one case per failure cluster instead (see harvester triage), none for a cluster a case
    already covers, and says how many runs each accepted case covers.
    """
    from ..harvest import harvest as run_harvest
    from ..harvest import refresh as refresh_cases

    store = open_store(store_path, config)
    if by_cluster:
        if limit is not None or sample is not None or refresh:
            raise InputError("--by-cluster reads every failing run of the window: drop --limit, --sample, --refresh")
        from ..harvest import harvest_clusters

        clustered = harvest_clusters(store, folder.root, since=since, agent=agent, config=config)
        echo_json(clustered.to_dict()) if as_json else click.echo("\n".join(clustered.lines()))
        return
    refreshed = refresh_cases(store, folder.root, config=config) if refresh else []
    show = not as_json and sys.stderr.isatty()
    # the store counts by status only: with other filters the total is unknown and a running count shows
    total = None if (agent or since) else store.count(failed=True if failed_only else None)
    if limit is not None:
        total = min(limit, total) if total is not None else limit
    with ProgressBar("harvesting", show=show, total=total, unit="runs") as bar:
        result = run_harvest(
            store,
            folder.root,
            failed_only=failed_only,
            since=since,
            agent=agent,
            limit=limit,
            sample=sample,
            config=config,
            progress=bar,
        )
    if as_json:
        echo_json(
            {
                **result.to_dict(),
                "cases_dir": str(folder.root),
                **({"refreshed": {r.case.id: r.changes for r in refreshed}} if refresh else {}),
            }
        )
        return
    for r in refreshed:
        _show_changes(r)
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    for note in result.notes:
        click.echo(f"note: {note}", err=True)
    click.echo(result.summary())
    if result.twins:
        click.echo(f"{result.twins} of them repeat a reported incident: tagged twin, its harmful calls forbidden")
    if result.new:
        click.echo(f"review them with: harvester review (files in {folder.folder_for('pending')})")


def _trace_options(file_needs: str = "") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--run`` and ``--file``: which run of a trace, and a trace read from a file (incident, rerecord)."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn = click.option(
            "--file",
            "otlp_file",
            type=click.Path(dir_okay=False),
            help=f"Read the trace from a file instead of the store: OTLP/JSON, or a {labels()} export{file_needs}.",
        )(fn)
        fn = click.option(
            "--from",
            "backend_url",
            metavar="URL",
            type=ENCODABLE,
            help=f"Pull the trace from a backend into the store first: {url_forms()}{file_needs}.",
        )(fn)
        return click.option(
            "--run", "run_id", metavar="RUN_ID", type=ENCODABLE, help="Which run, when the trace holds several."
        )(fn)

    return deco


# -- incident -----------------------------------------------------------------------------------
@main.command("incident")
@click.argument("trace_id", type=ENCODABLE)
@click.option(
    "--why", required=True, type=ENCODABLE, help="What went wrong, in words a reviewer will understand next year."
)
@click.option("--expected", type=ENCODABLE, help="What the agent should have done or answered.")
@click.option(
    "--require",
    "required",
    multiple=True,
    metavar="S",
    type=ENCODABLE,
    help="Text the answer must contain (repeatable).",
)
@click.option("--forbid", multiple=True, metavar="TOOL", type=ENCODABLE, help="A tool that must not run (repeatable).")
@click.option("--tag", "tags", multiple=True, metavar="T", type=ENCODABLE, help="Extra tag (repeatable).")
@_trace_options()
@store_option
@cases_options
@json_option
@handle_errors
def incident(
    trace_id: str,
    why: str,
    expected: str | None,
    required: tuple[str, ...],
    forbid: tuple[str, ...],
    tags: tuple[str, ...],
    run_id: str | None,
    otlp_file: str | None,
    backend_url: str | None,
    store_path: str | None,
    config: Config,
    folder: CaseFolder,
    as_json: bool,
) -> None:
    """Freeze one reported run (TRACE_ID) into a regression case in cases/pending/.

    The trace comes from the store, from a file (--file), or from the backend that holds it (--from:
    it is stored first, redacted, as an import would). A trace from a file or a backend gets a line
    saying which of prompt, answer, tool args, tool results and token counts it held, kept in the
    case's review notes.
    """
    if not why.strip():
        raise click.BadParameter("say what went wrong: the case's why is how a reviewer judges it", param_hint="--why")
    from ..harvest import case_from_run
    from ..intake.backends import fidelity

    runs, origin = _trace_runs(trace_id, otlp_file, backend_url, store_path, config)
    run = _pick_run(runs, trace_id, run_id)
    known = case_signatures(folder.root, max_bytes=folder.max_bytes)  # each file read lightly: ids and runs
    twins = [c.id or c.path.stem for c in known if c.trace_id == run.trace_id]
    if twins:  # allowed (another angle on the same run), but never silent
        click.echo(f"note: this run is already case {', '.join(twins)}", err=True)
    if not config.mutating_tools and not forbid:
        ran = listing(dict.fromkeys(c.name for c in run.calls if c.executed))
        click.echo(
            "note: the config names no mutating_tools, so nothing this run executed is forbidden in its case; "
            f"if a tool did harm, run again with --forbid TOOL (it executed: {ran})",
            err=True,
        )
    case = case_from_run(
        run,
        config=config,
        why=why,
        expected=expected,
        required_elements=required,
        forbid=forbid,
        tags=tags,
        incident=True,
    )
    held = fidelity(run).line(origin) if origin else None
    if held:
        case.review_notes.append(held)
    case.id = folder.unique_id(case.id)
    path = folder.save(case)
    if as_json:
        echo_json({"id": case.id, "path": str(path), "case": case.model_dump(mode="json", by_alias=True)})
        return
    click.echo(f"case {case.id} -> {path}")
    if held:
        click.echo(f"  from:        {held}")
    click.echo(f"  kind:        {case.source.failure_kind}")
    click.echo(f"  trajectory:  {' -> '.join(case.recorded.trajectory) or '(no successful tool calls)'}")
    if case.recorded.denied:
        click.echo(f"  denied:      {listing(case.recorded.denied)} (requested, never executed)")
    if case.recorded.awaiting:
        click.echo(f"  awaiting:    {listing(case.recorded.awaiting)} (the run stopped waiting for a human)")
    click.echo(f"  fixtures:    {len(case.fixtures)} ({listing(f.tool for f in case.fixtures)})")
    click.echo(f"  min_steps:   {case.min_steps}")
    click.echo(f"  appropriate: {listing(case.appropriate_tools)}")
    click.echo(f"  forbidden:   {listing(case.forbidden_tools)}")
    if case.order:
        click.echo(f"  order:       {'; '.join(r.summary() for r in case.order)}")
    click.echo(f"  tags:        {listing(case.tags)}")
    for note in case.review_notes:
        if note != held:
            click.echo(f"  review:      {note}")
    click.echo(f"next: harvester review {case.id}")


# -- rerecord -----------------------------------------------------------------------------------
@main.command("rerecord")
@click.argument("case_id", metavar="ID")
@click.option(
    "--trace",
    "trace_id",
    metavar="TRACE_ID",
    type=ENCODABLE,
    help="The run to record from (default: the newest of its prompt).",
)
@_trace_options(" (needs --trace)")
@store_option
@cases_options
@json_option
@handle_errors
def rerecord(
    case_id: str,
    trace_id: str | None,
    run_id: str | None,
    otlp_file: str | None,
    backend_url: str | None,
    store_path: str | None,
    config: Config,
    folder: CaseFolder,
    as_json: bool,
) -> None:
    """Refresh a stale case from a newer run: new fixtures and recording, the reviewer's fields kept.

    Keeps why, status, tags, checks (a trajectory_match keeps its mode and takes the new reference),
    required elements, expected, forbidden tools, ignore_args and injected failures; prints what changed.
    Without --trace, the newest stored run of the case's prompt and agent, after its recording.
    """
    from ..harvest import matching_runs, same_situation
    from ..harvest import rerecord as rerecord_case

    case = folder.load(case_id)
    if (otlp_file or backend_url) and not trace_id:
        raise click.BadParameter(
            "name the run to record from with --trace", param_hint="--file" if otlp_file else "--from"
        )
    if trace_id:
        runs, _ = _trace_runs(trace_id, otlp_file, backend_url, store_path, config)
        if not run_id:  # a trace of several runs (agents handing over): the one of this case's situation
            runs = [r for r in runs if same_situation(case, r)] or runs
        run = _pick_run(runs, trace_id, run_id)
    else:
        found = next(matching_runs(open_store(store_path, config).runs(newest_first=True), [case], config=config), None)
        if found is None:
            kind = case.source.failure_kind or "none"
            raise NotFoundError(
                f"no stored run of case {case_id!r}'s prompt and failure kind ({kind}) newer than its recording; "
                "name one with --trace TRACE_ID"
            )
        run = found[1]
    refreshed = rerecord_case(case, run, config=config)
    path = folder.save(refreshed.case)
    if as_json:
        echo_json({"id": case_id, "path": str(path), "trace_id": run.trace_id, "changes": refreshed.changes})
        return
    _show_changes(refreshed)
    click.echo(f"rerecorded {case_id} from trace {run.trace_id[:12]} -> {path}")


def _show_changes(refreshed: Any) -> None:
    click.echo(f"{refreshed.case.id}: " + ("no change in the recording" if not refreshed.changes else "changed:"))
    for line in refreshed.changes:
        click.echo(f"  {line}")


def _trace_runs(
    trace_id: str, otlp_file: str | None, backend_url: str | None, store_path: str | None, config: Config
) -> tuple[list[Run], str | None]:
    """The runs of the trace, and where they came from when not the store (for the fidelity line)."""
    if otlp_file and backend_url:
        raise click.BadParameter("a trace comes from a file or a backend, not both", param_hint="--from")
    if otlp_file:
        return _runs_from_file(otlp_file, trace_id, config), "the file"
    if not backend_url:
        return _runs_from_store(store_path, config, trace_id), None
    from ..intake.backends import pull
    from .importing import pull_limits, store_pulled

    got = pull(backend_url, [trace_id], limits=pull_limits(config))  # read whole before the store is touched
    runs = store_pulled(got, store_path, config)[1][got.asked[trace_id]]
    if not runs:
        raise InputError(
            f"trace {trace_id!r} from {got.target} has no agent run (no invoke_agent or AGENT span of a known "
            "convention): nothing to make a case of"
        )
    return runs, got.target.backend


def _runs_from_store(store_path: str | None, config: Config, trace_id: str) -> list[Run]:
    store = open_store(store_path, config)
    runs = store.get(trace_id)
    if runs:
        return runs
    near = store.ids_like(trace_id)
    hint = f"nearest stored ids: {', '.join(near)}" if near else "the store is empty"
    raise NotFoundError(
        f"trace {trace_id!r} is not in the store ({hint}); "
        "ingest it first with: harvester ingest FILE (or pass --file OTLP.json)"
    )


def _runs_from_file(otlp_file: str, trace_id: str, config: Config) -> list[Run]:
    """The runs of one trace of an OTLP/JSON file, redacted as ``ingest`` would store them: a case made
    from a file never holds what the store would not (nor does its id, a slug of the redacted prompt)."""
    from ..conventions import runs_from_spans
    from ..intake.backends import spans_of_export
    from ..redact import Redactor

    path = Path(otlp_file)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise OtlpFormatError(f"cannot read ({exc.strerror})", file=otlp_file) from None
    every = spans_of_export(data, otlp_file)
    traces = {s.trace_id for s in every}
    wanted = trace_id.lower().removeprefix("tr-").rjust(32, "0")  # MLflow's tr-<hex>, Jaeger's 16-digit ids
    spans = [s for s in every if s.trace_id == wanted]
    if not spans:
        raise NotFoundError(
            f"{otlp_file}: no spans of trace {trace_id!r} "
            f"(traces in the file: {', '.join(sorted(traces)[:5]) or 'none'})"
        )
    runs = runs_from_spans(spans)
    if not runs:
        raise InputError(
            f"trace {trace_id!r} has {len(spans)} spans but no agent run (no invoke_agent or AGENT "
            "span of a known convention): nothing to make a case of",
            file=otlp_file,
        )
    redactor = Redactor.from_option(redaction_for(config))
    if redactor is not None:
        runs, _ = redactor.redact_trace(runs, spans)
    return runs


def _pick_run(runs: list[Run], trace_id: str, run_id: str | None) -> Run:
    """The asked-for run; else the only one; else the first that failed (the one someone reported)."""
    if run_id:
        for run in runs:
            if run.run_id == run_id:
                return run
        raise NotFoundError(f"trace {trace_id!r} has no run {run_id!r} (runs: {listing(r.run_id for r in runs)})")
    if not runs:
        raise InputError(f"trace {trace_id!r} has no agent run: nothing to make a case of")
    return next((r for r in runs if r.failed), runs[0])
