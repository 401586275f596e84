"""``harvester shadow``: the candidate agent on production's stored traffic, compared run by run.

Options as ``replay`` takes them where they mean the same (the seal, ``--model``, ``--shard``,
``--concurrency``, ``--timeout``, ``--gate``), so the two jobs read alike. Gates and ``--since`` are
checked and the agent loaded BEFORE anything runs; the report files are written BEFORE the gates are
judged. Exit 0 every gate passed, 1 one failed, 2 usage or input error (one line). ``merged_shadow``
is ``harvester merge`` for shadow shard reports.
"""

from __future__ import annotations

import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import click
import orjson

from .. import seam
from .._files import write_file
from ..case import CaseFolder, case_signatures
from ..config import Config, ModelMode
from ..errors import AgentBuildError, GateError, InputError, OutputError, ReportFormatError
from ..report import GateResult
from ..shadow import Selection, ShadowReport, html, is_shadow_report, judge, parse_gates
from ..shadow import merge as merge_reports
from ..shadow import shadow as run_shadow
from ..store import time_arg
from . import ENCODABLE, HarvesterCliError, ProgressBar, main, open_store, store_option
from ._replay_options import (
    agent_option,
    concurrency_option,
    model_option,
    progress_option,
    sandbox_of,
    sandbox_option,
    seal_options,
    sealed_agent,
    sealed_plugins,
    shard_option,
    timeout_option,
)
from .cases import cases_options
from .outputs import check_outputs, report_path_of

__all__ = ["merged_shadow", "shadow"]

_FUTURE_SLACK = 60.0  # seconds of clock skew a --since may be ahead of this machine's clock


def _since(value: str | None) -> str | None:
    """``--since`` read now: unparsable or in the future is one line naming the option, not an empty run."""
    if value is None:
        return None
    try:
        ts = time_arg(value)
    except InputError as exc:
        raise HarvesterCliError(f"--since: {exc}") from None
    if ts is not None and ts > time.time() + _FUTURE_SLACK:
        when = datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds")
        raise HarvesterCliError(f"--since {value!r} is in the future ({when}): no run started after it")
    return value


def _gates(given: tuple[str, ...]) -> list[Any]:
    try:
        return parse_gates(given)
    except GateError as exc:
        raise HarvesterCliError(f"--gate: {exc}") from None


def _case_runs(folder: CaseFolder) -> set[tuple[str, str]]:
    """(trace id, run id) of the runs that already are cases: their review stands, ``replay`` runs them."""
    if not folder.root.is_dir():
        return set()
    return {(c.trace_id, c.run_id or "") for c in case_signatures(folder.root) if c.trace_id is not None}


def _redacted(report: ShadowReport, config: Config) -> ShadowReport:
    """The report with the project's redaction rules applied: answers and args are production's data."""
    from ..redact import Redactor, redaction_for

    redactor = Redactor.from_option(redaction_for(config))
    return report if redactor is None else report.redacted(redactor)


def _finish(
    report: ShadowReport, gates: list[Any], json_path: str | None, html_path: str | None, markdown_path: str | None
) -> None:
    """Write the files, print the five lines, the newly mutating runs and the gates, exit on them."""
    results: list[GateResult] = judge(report, gates)
    unwritten: list[OutputError] = []
    if json_path == "-":
        sys.stdout.write(report.to_json().decode())
    files = (
        (json_path, report.to_json),
        (html_path, lambda: html(report, results).encode()),
        (markdown_path, lambda: report.to_markdown(results).encode()),
    )
    for path, make in files:
        if path and path != "-":
            try:
                write_file(path, make(), atomic=True)
            except OutputError as exc:
                unwritten.append(exc)
    err = json_path == "-"
    for warning in report.warnings():
        click.echo(f"warning: {warning}", err=True)
    for line in report.summary_lines()[:1] + report.mutating_lines() + report.summary_lines()[1:]:
        click.echo(line, err=err)
    if report.proposed:
        click.echo(f"proposed {len(report.proposed)} pending case(s): {', '.join(report.proposed)}", err=err)
    for g in results:
        click.echo(g.summary(), err=err)
    for problem in unwritten:
        click.echo(f"error: {problem}", err=True)
    sys.exit(2 if unwritten else int(any(not g.passed for g in results)))


@main.command("shadow")
@cases_options(plugins=False)
@agent_option("run")  # the candidate
@click.option("--since", metavar="T", help="Runs started at or after T (ISO 8601, or an age like 24h or 7d).")
@click.option("--agent-filter", metavar="A", type=ENCODABLE, help="Only runs of agent A.")
@click.option(
    "--sample",
    type=click.IntRange(min=1),
    metavar="N",
    help="A reproducible sample of N runs, stratified by agent and outcome (failed or not).",
)
@click.option("--failed", is_flag=True, help="Only runs that failed in production.")
@concurrency_option("run")
@timeout_option("run")
@shard_option
@seal_options
@model_option
@sandbox_option
@click.option(
    "--propose",
    is_flag=True,
    help="Write a pending case (with a review note saying why) for each run that changed for the worse.",
)
@click.option(
    "--gate",
    "gates",
    multiple=True,
    metavar="EXPR",
    help="Gate on a shadow rate or delta, repeatable: new_mutating<=0, newly_failed<=0.02, same>=0.9.",
)
@click.option("--report", "report_path", metavar="PATH|-", help="Write the shadow report as JSON ('-' for stdout).")
@click.option("--json", "json_path", flag_value="-", default=None, help="Print the report as JSON on stdout.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False), help="Write the report as one HTML page.")
@click.option(
    "--markdown",
    "markdown_path",
    type=click.Path(dir_okay=False),
    help='Write the five lines and the gates as Markdown (e.g. "$GITHUB_STEP_SUMMARY").',
)
@progress_option
@store_option
def shadow(
    config: Config,
    folder: CaseFolder,
    agent_spec: str,
    since: str | None,
    agent_filter: str | None,
    sample: int | None,
    failed: bool,
    concurrency: int,
    timeout: float,
    shard: tuple[int, int] | None,
    allow_hosts: tuple[str, ...],
    no_seal: bool,
    model: ModelMode | None,
    sandbox: bool,
    propose: bool,
    gates: tuple[str, ...],
    report_path: str | None,
    json_path: str | None,
    html_path: str | None,
    markdown_path: str | None,
    progress: bool | None,
    store_path: str | None,
) -> None:
    """Replay stored production runs that are not cases against a candidate, and compare run by run.

    Each run is replayed with its own recorded tool results as fixtures (and model calls with --model
    recorded), sealed as replay is: no tool body runs, a call the recording cannot answer gets
    no_fixture. Five lines answer: newly mutating runs (first, always), runs, same, newly failed, cost.
    Nothing is written unless --propose. Exit 0 when every --gate passes, 1 otherwise, 2 on bad input.
    """
    json_path = report_path_of(report_path, json_path)
    since = _since(since)
    gate_list = _gates(gates)
    sandboxed = sandbox_of(config, (), sandbox)  # a glob over a mutating tool stops here, before any run
    check_outputs(json_path, html_path, markdown_path)
    store = open_store(store_path, config, readonly=True)  # before the seal: the store is harvester's
    hosts = sealed_plugins(config, allow_hosts, no_seal)
    build = sealed_agent(agent_spec, config, hosts, sandboxed, no_seal)
    selection = Selection(
        since=since, agent=agent_filter, failed=failed, shard=shard, sample=sample, exclude=_case_runs(folder)
    )
    seam.harness()  # this process replays until it exits, as replay's does
    show = sys.stderr.isatty() if progress is None else progress
    try:
        with ProgressBar("shadowing", show=show, unit="runs") as bar:
            report = run_shadow(
                store,
                build,
                selection=selection,
                candidate=agent_spec,
                config=config,
                concurrency=concurrency,
                timeout=timeout,
                model=model or config.replay.model,
                seal=not no_seal,
                allow_hosts=hosts,
                allow_commands=config.replay.allow_commands,
                propose=folder if propose else None,
                progress=bar,
                sandbox=sandboxed,
            )
    except AgentBuildError as exc:
        raise AgentBuildError(agent_spec, exc.error) from None
    _finish(_redacted(report, config), gate_list, json_path, html_path, markdown_path)  # still sealed: files only


def _is_shadow_file(path: str) -> bool:
    try:
        return is_shadow_report(orjson.loads(Path(path).read_bytes()))
    except (OSError, orjson.JSONDecodeError):
        return False  # the replay report loader names what is wrong with it


def _load(path: str) -> ShadowReport:
    try:
        data = orjson.loads(Path(path).read_bytes())
    except FileNotFoundError:
        raise ReportFormatError("no such file", file=path) from None
    except orjson.JSONDecodeError as exc:
        raise ReportFormatError(f"not JSON ({exc})", file=path) from None
    return ShadowReport.from_data(data, file=path)


def merged_shadow(
    paths: tuple[str, ...],
    output: str,
    gates: tuple[str, ...],
    pages: tuple[str | None, str | None],
    replay_only: tuple[Any, ...],
) -> bool:
    """``harvester merge`` of shadow shard reports (False: they are replay reports), gated like the
    shadow run would be; ``pages``: the HTML and Markdown paths; ``replay_only``: options a shadow
    report has no use for (refused if given)."""
    if not _is_shadow_file(paths[0]):
        return False
    if any(replay_only):
        raise HarvesterCliError("--baseline and --junit are replay's: a shadow report has neither")
    gate_list = _gates(gates)
    check_outputs(output, *pages)
    _finish(merge_reports(_load(p) for p in paths), gate_list, output, *pages)
    return True
