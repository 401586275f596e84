"""Commands that make and review cases: harvest, incident, review, accept, reject, cases, suite."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import click
import orjson
from pydantic import ValidationError

from ..case import CASES_ENV, AgentCase, CaseFolder, load_cases
from ..suite import bump_suite, read_suite
from ..config import Config
from ..errors import InputError, NotFoundError, OtlpFormatError, pydantic_field
from ..model import Run
from . import (HarvesterCliError, ProgressBar, config_option, echo_json, handle_errors, json_option, main, open_store,
               project_config, store_option)

EDITABLE = ("why", "expected", "required_elements", "forbidden_tools", "appropriate_tools", "min_steps",
            "max_cost", "tags", "prompt")


# -- shared options -----------------------------------------------------------------------------
def cases_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--cases DIR`` and ``--config PATH``, resolved into a ``CaseFolder`` and a ``Config``.

    Precedence: the option, then ``$HARVESTER_CASES``, then the config's ``cases_dir``.
    """

    @handle_errors
    @config_option
    @click.option("--cases", "cases_dir", type=click.Path(file_okay=False),
                  help=f"Cases folder (default: ${CASES_ENV}, the config's cases_dir, or ./cases).")
    @functools.wraps(fn)
    def wrapper(*args: Any, config_path: Optional[str], cases_dir: Optional[str], **kwargs: Any) -> Any:
        config = project_config(config_path)
        folder = CaseFolder(cases_dir or os.environ.get(CASES_ENV) or config.cases_dir)
        return fn(*args, config=config, folder=folder, **kwargs)

    return wrapper



# -- rendering ----------------------------------------------------------------------------------
def _abridge(value: Any, width: int = 90) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _listing(values: Iterable[Any]) -> str:
    return ", ".join(str(v) for v in values) or "-"


def render_case(case: AgentCase, path: Path | None = None) -> str:
    """What a reviewer needs on one screen: the prompt, what the run did, the answer, what is proposed."""
    lines = [click.style(f"{case.id}", bold=True) + f"  [{case.status}]" + (f"  {path}" if path else ""),
             f"  why:        {case.why}",
             f"  prompt:     {_abridge(case.prompt, 200)}",
             f"  recorded:   {' -> '.join(case.recorded.trajectory) or '(no successful tool calls)'}"
             f"  (stop {case.recorded.stop}, {case.recorded.steps} step{'s' if case.recorded.steps != 1 else ''}"
             + (f", cost {case.recorded.cost:.6f}" if case.recorded.cost is not None else "") + ")"]
    if case.recorded.denied:
        lines.append(f"  denied:     {_listing(case.recorded.denied)} (requested, never executed)")
    for i, fx in enumerate(case.fixtures, 1):
        outcome = f"error {fx.error.type}: {fx.error.message}" if fx.error else _abridge(fx.result, 70)
        mark = " [TRUNCATED]" if fx.truncated else ""
        lines.append(f"    {i}. {fx.tool}({_abridge(fx.args, 60)}) -> {outcome}{mark}")
    lines += [f"  answer:     {_abridge(case.recorded.answer or '(none)', 200)}",
              "  proposed:" if case.status == "pending" else "  fields:",
              f"    expected:          {case.expected or '-'}",
              f"    required_elements: {_listing(case.required_elements)}",
              f"    min_steps:         {case.min_steps if case.min_steps is not None else '-'}",
              f"    appropriate_tools: {_listing(case.appropriate_tools)}",
              f"    forbidden_tools:   {_listing(case.forbidden_tools)}",
              f"    max_cost:          {case.max_cost if case.max_cost is not None else '-'}",
              f"    checks:            {_listing(c.label() for c in case.compiled_checks())}",
              f"    tags:              {_listing(case.tags)}",
              f"    seen:              {case.source.seen}"
              + (f"  (failure kind {case.source.failure_kind})" if case.source.failure_kind else "")]
    if case.rejected_why:
        lines.append(f"  rejected:   {case.rejected_why}")
    lines += [click.style(f"  review: {note}", fg="yellow") for note in case.review_notes]
    return "\n".join(lines)


# -- harvest ------------------------------------------------------------------------------------
@main.command("harvest")
@click.option("--failed-only", is_flag=True, help="Only runs that failed (errors, denials, negative feedback...).")
@click.option("--since", metavar="T", help="Only runs started at or after T (ISO 8601, or an age like 24h or 7d).")
@click.option("--agent", metavar="A", help="Only runs of agent A.")
@click.option("--limit", type=click.IntRange(min=1), metavar="N", help="Read at most N runs.")
@click.option("--sample", type=click.IntRange(min=0), metavar="N",
              help="Keep every failed run and a reproducible sample of N of the others.")
@store_option
@cases_options
@json_option
@handle_errors
def harvest(failed_only: bool, since: Optional[str], agent: Optional[str], limit: Optional[int],
                sample: Optional[int], store_path: Optional[str], config: Config, folder: CaseFolder,
                as_json: bool) -> None:
    """Turn stored runs into pending cases (cases/pending/), one case per distinct situation.

    Runs with the same normalized prompt, trajectory and failure kind become one case whose
    source.seen counts them. Reviewed (accepted or rejected) cases are never touched.
    """
    from ..harvest import harvest as run_harvest

    store = open_store(store_path, config)
    show = not as_json and sys.stderr.isatty()
    # the store counts by status only: with other filters the total is unknown and a running count shows
    total = None if (agent or since) else store.count(failed=True if failed_only else None)
    if limit is not None:
        total = min(limit, total) if total is not None else limit
    with ProgressBar("harvesting", show=show, total=total, unit="runs") as bar:
        result = run_harvest(store, folder.root, failed_only=failed_only, since=since, agent=agent, limit=limit,
                             sample=sample, config=config, progress=bar)
    if as_json:
        echo_json({**result.to_dict(), "cases_dir": str(folder.root)})
        return
    click.echo(result.summary())
    if result.new:
        click.echo(f"review them with: harvester review (files in {folder.folder_for('pending')})")


# -- incident -----------------------------------------------------------------------------------
@main.command("incident")
@click.argument("trace_id")
@click.option("--why", required=True, help="What went wrong, in words a reviewer will understand next year.")
@click.option("--expected", help="What the agent should have done or answered.")
@click.option("--require", "required", multiple=True, metavar="S", help="Text the answer must contain (repeatable).")
@click.option("--forbid", multiple=True, metavar="TOOL", help="A tool that must not run (repeatable).")
@click.option("--tag", "tags", multiple=True, metavar="T", help="Extra tag (repeatable).")
@click.option("--run", "run_id", metavar="RUN_ID", help="Which run, when the trace holds several.")
@click.option("--file", "otlp_file", type=click.Path(dir_okay=False),
              help="Read the trace from an OTLP/JSON file instead of the store.")
@store_option
@cases_options
@json_option
@handle_errors
def incident(trace_id: str, why: str, expected: Optional[str], required: tuple[str, ...],
                 forbid: tuple[str, ...], tags: tuple[str, ...], run_id: Optional[str], otlp_file: Optional[str],
                 store_path: Optional[str], config: Config, folder: CaseFolder, as_json: bool) -> None:
    """Freeze one reported run (TRACE_ID) into a regression case in cases/pending/."""
    if not why.strip():
        raise click.BadParameter("say what went wrong: the case's why is how a reviewer judges it", param_hint="--why")
    from ..harvest import case_from_run

    runs = _runs_from_file(otlp_file, trace_id) if otlp_file else _runs_from_store(store_path, config, trace_id)
    run = _pick_run(runs, trace_id, run_id)
    twins = [c.id for c in (load_cases(folder.root) if folder.root.is_dir() else ())
             if c.source.trace_id == run.trace_id]
    if twins:  # allowed (another angle on the same run), but never silent
        click.echo(f"note: this run is already case {', '.join(twins)}", err=True)
    case = case_from_run(run, config=config, why=why, expected=expected, required_elements=required,
                         forbid=forbid, tags=tags, incident=True)
    case.id = folder.unique_id(case.id)
    path = folder.save(case)
    if as_json:
        echo_json({"id": case.id, "path": str(path), "case": case.model_dump(mode="json", by_alias=True)})
        return
    click.echo(f"case {case.id} -> {path}")
    click.echo(f"  kind:        {case.source.failure_kind}")
    click.echo(f"  trajectory:  {' -> '.join(case.recorded.trajectory) or '(no successful tool calls)'}")
    if case.recorded.denied:
        click.echo(f"  denied:      {_listing(case.recorded.denied)} (requested, never executed)")
    click.echo(f"  fixtures:    {len(case.fixtures)} ({_listing(f.tool for f in case.fixtures)})")
    click.echo(f"  min_steps:   {case.min_steps}")
    click.echo(f"  appropriate: {_listing(case.appropriate_tools)}")
    click.echo(f"  forbidden:   {_listing(case.forbidden_tools)}")
    click.echo(f"  tags:        {_listing(case.tags)}")
    for note in case.review_notes:
        click.echo(f"  review:      {note}")
    click.echo(f"next: harvester review {case.id}")


def _runs_from_store(store_path: Optional[str], config: Config, trace_id: str) -> list[Run]:
    store = open_store(store_path, config)
    runs = store.get(trace_id)
    if runs:
        return runs
    near = store.ids_like(trace_id)
    hint = f"nearest stored ids: {', '.join(near)}" if near else "the store is empty"
    raise NotFoundError(f"trace {trace_id!r} is not in the store ({hint}); "
                        "ingest it first with: harvester ingest FILE (or pass --file OTLP.json)")


def _runs_from_file(otlp_file: str, trace_id: str) -> list[Run]:
    from ..conventions import runs_from_spans
    from ..spans import SpanData, iter_otlp_documents, spans_from_otlp

    path = Path(otlp_file)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise OtlpFormatError(f"cannot read ({exc.strerror})", file=otlp_file) from None
    spans: list[SpanData] = []
    traces: set[str] = set()
    for doc in iter_otlp_documents(data, file=otlp_file):
        for span in spans_from_otlp(doc, file=otlp_file):
            traces.add(span.trace_id)
            if span.trace_id == trace_id:
                spans.append(span)
    if not spans:
        raise NotFoundError(f"{otlp_file}: no spans of trace {trace_id!r} "
                            f"(traces in the file: {', '.join(sorted(traces)[:5]) or 'none'})")
    runs = runs_from_spans(spans)
    if not runs:
        raise InputError(f"trace {trace_id!r} has {len(spans)} spans but no agent run (no invoke_agent or AGENT "
                         "span of a known convention): nothing to make a case of", file=otlp_file)
    return runs


def _pick_run(runs: list[Run], trace_id: str, run_id: Optional[str]) -> Run:
    """The asked-for run; else the only one; else the first that failed (the one someone reported)."""
    if run_id:
        for run in runs:
            if run.run_id == run_id:
                return run
        raise NotFoundError(f"trace {trace_id!r} has no run {run_id!r} (runs: {_listing(r.run_id for r in runs)})")
    if not runs:
        raise InputError(f"trace {trace_id!r} has no agent run: nothing to make a case of")
    return next((r for r in runs if r.failed), runs[0])


# -- review, accept, reject -----------------------------------------------------------------------
@main.command("accept")
@click.argument("case_id", metavar="ID")
@click.option("--expected", help="What the agent should answer (stored on the case).")
@click.option("--require", "required", multiple=True, metavar="S", help="Text the answer must contain (repeatable).")
@cases_options
@json_option
@handle_errors
def accept(case_id: str, expected: Optional[str], required: tuple[str, ...], config: Config,
               folder: CaseFolder, as_json: bool) -> None:
    """Accept a case without prompts: it moves to cases/ and the nightly replay runs it."""
    path = folder.accept(case_id, expected=expected, required=required)
    _done(folder.load(case_id), path, as_json)


@main.command("reject")
@click.argument("case_id", metavar="ID")
@click.option("--why", required=True, help="Why the case is not worth keeping (kept in cases/rejected/).")
@cases_options
@json_option
@handle_errors
def reject(case_id: str, why: str, config: Config, folder: CaseFolder, as_json: bool) -> None:
    """Reject a case: it moves to cases/rejected/ so a re-harvest will not propose it again."""
    path = folder.reject(case_id, why)
    _done(folder.load(case_id), path, as_json)


def _done(case: AgentCase, path: Path, as_json: bool) -> None:
    if as_json:
        echo_json({"id": case.id, "status": case.status, "path": str(path)})
        return
    click.echo(f"{case.status} {case.id} -> {path}")
    if case.status == "accepted":
        for note in case.review_notes:
            click.echo(f"warning: {case.id}: {note}", err=True)
        click.echo("then: harvester suite bump")


@main.command("review")
@click.argument("case_id", metavar="[ID]", required=False)
@cases_options
@handle_errors
def review(case_id: Optional[str], config: Config, folder: CaseFolder) -> None:
    """Walk through pending cases: accept, edit a field, reject or skip each one."""
    if case_id:
        ids = [case_id]
    else:
        ids = [c.id for c in load_cases(folder.root, status="pending")]
    if not ids:
        click.echo("no pending cases (harvest some with: harvester harvest, or harvester incident TRACE_ID)")
        return
    counts = {"accepted": 0, "rejected": 0, "skipped": 0}
    try:
        for i, cid in enumerate(ids, 1):
            verdict = _review_one(folder, cid, f"[{i}/{len(ids)}]")
            if verdict == "quit":
                break
            counts[verdict] += 1
    except click.Abort:  # end of input (piped answers ran out) or Ctrl-C: what was decided is saved
        click.echo("", err=True)
        raise HarvesterCliError(f"review stopped before the end (input ended or interrupted); saved so far: "
                                f"{_counts(counts)}") from None
    click.echo(f"reviewed: {_counts(counts)}")


def _counts(counts: dict[str, int]) -> str:
    return f"{counts['accepted']} accepted, {counts['rejected']} rejected, {counts['skipped']} skipped"


def _review_one(folder: CaseFolder, case_id: str, position: str) -> str:
    case = folder.load(case_id)
    while True:
        click.echo(f"\n{position} " + render_case(case, folder.find(case_id)))
        action = click.prompt("[a]ccept, [e]dit a field, [r]eject, [s]kip, [q]uit",
                              type=click.Choice(["a", "e", "r", "s", "q"]), show_choices=False)
        if action == "a":
            path = folder.accept(case_id)
            click.echo(f"accepted -> {path}")
            return "accepted"
        if action == "r":
            why = click.prompt("why reject")
            path = folder.reject(case_id, why)
            click.echo(f"rejected -> {path}")
            return "rejected"
        if action == "s":
            return "skipped"
        if action == "q":
            return "quit"
        case = _edit(folder, case)


def _edit(folder: CaseFolder, case: AgentCase) -> AgentCase:
    """Change one field (lists comma-separated, '-' clears); the model validates before anything is saved."""
    name = click.prompt("field", type=click.Choice(EDITABLE))
    raw = click.prompt(f"{name} (lists comma-separated, '-' to clear)", default="-", show_default=False)
    value: Any
    if isinstance(getattr(case, name), list):
        value = [] if raw.strip() == "-" else [v.strip() for v in raw.split(",") if v.strip()]
    else:
        value = None if raw.strip() == "-" else raw
    try:
        edited = AgentCase.model_validate({**case.model_dump(by_alias=True), name: value})
    except ValidationError as exc:
        field, msg = pydantic_field(exc)
        click.echo(f"not changed: {field}: {msg}", err=True)
        return case
    folder.save(edited)
    return edited


# -- cases list / show ----------------------------------------------------------------------------
@main.group("cases")
def cases() -> None:
    """List and show case files (accepted in cases/, pending in cases/pending/, rejected in cases/rejected/)."""


@cases.command("list")
@click.option("--status", type=click.Choice(["pending", "accepted", "rejected"]), help="Only cases with this status.")
@click.option("--tag", "tag", metavar="T", help="Only cases with this tag.")
@cases_options
@json_option
@handle_errors
def cases_list(status: Optional[str], tag: Optional[str], config: Config, folder: CaseFolder, as_json: bool) -> None:
    """One line per case: id, status, tags, seen, why."""
    cases = [c for c in load_cases(folder.root, status=status) if tag is None or tag in c.tags]
    if as_json:
        echo_json([{"id": c.id, "status": c.status, "tags": c.tags, "seen": c.source.seen, "why": c.why,
                    "failure_kind": c.source.failure_kind} for c in cases])
        return
    if not cases:
        click.echo("no cases")
        return
    rows = [(c.id, c.status, ",".join(c.tags), str(c.source.seen), c.why) for c in cases]
    widths = [max(len(r[i]) for r in [("ID", "STATUS", "TAGS", "SEEN", "WHY"), *rows]) for i in range(4)]
    for row in [("ID", "STATUS", "TAGS", "SEEN", "WHY"), *rows]:
        head = "  ".join(cell.ljust(w) for cell, w in zip(row[:4], widths))
        click.echo(f"{head}  {_abridge(row[4], 60)}")


@cases.command("show")
@click.argument("case_id", metavar="ID")
@cases_options
@json_option
@handle_errors
def cases_show(case_id: str, config: Config, folder: CaseFolder, as_json: bool) -> None:
    """One case in full (--json prints the validated case file)."""
    path = folder.find(case_id)
    case = folder.load(case_id)
    if as_json:
        echo_json(case.model_dump(mode="json", by_alias=True))
        return
    click.echo(render_case(case, path))


# -- suite ------------------------------------------------------------------------------------------
@main.group("suite")
def suite() -> None:
    """The suite manifest (cases/suite.json): which version of the accepted cases a report ran."""


@suite.command("bump")
@click.option("--name", help="Suite name (default: kept, or the project folder's name).")
@cases_options
@json_option
@handle_errors
def suite_bump(name: Optional[str], config: Config, folder: CaseFolder, as_json: bool) -> None:
    """Raise the suite's minor version if the accepted cases changed since the last bump."""
    before = read_suite(folder.root)
    manifest = bump_suite(folder.root, name=name)
    changed = before is None or before.version != manifest.version or before.name != manifest.name
    if as_json:
        echo_json({**manifest.model_dump(mode="json", by_alias=True), "changed": changed})
        return
    state = "bumped to" if changed else "unchanged at"
    click.echo(f"suite {manifest.name} {state} {manifest.version} "
               f"({manifest.cases} accepted cases, content {manifest.content_hash[:12]})")
