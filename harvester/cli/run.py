"""Commands that run and judge suites: replay, compare, merge, and report (a report as an HTML page).

Exit codes: 0 every gate passed and nothing regressed, 1 a gate failed or a case regressed, 2 usage or
input error (one line). Gates are parsed and the baseline and agent loaded BEFORE anything runs, so a
typo costs seconds, not a whole nightly run; the report files are written BEFORE gates are judged, so
a failing job still leaves its report behind. An output path that cannot be written (a directory, a
read-only or missing mount) is checked before the run where possible; one that still fails at the end
costs only itself: the other outputs, the summary and the gate lines are still produced, then one
``error: <path>: ...`` line per unwritten file and exit 2 (whatever the gates said).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import partial

import click

from .. import seam
from .._files import check_output, write_file
from ..case import CaseFolder
from ..config import Config, ModelMode
from ..errors import AgentBuildError, GateError
from ..redact import redaction_for
from ..replay import INJECT_NEEDS_A_MODEL, also_allowing, plan_folder, plan_hosts
from ..replay import replay as run_replay
from ..report import (
    ALPHA,
    INCONCLUSIVE_POLICIES,
    MIN_TASK_COMPLETION,
    GateOutcome,
    Report,
    evaluate_gates,
    parse_gate,
)
from ..report import merge as merge_reports
from ..suite import suite_info
from . import HarvesterCliError, ProgressBar, echo_json, handle_errors, judging, main, with_config
from ._emit import emit_after, emit_options, export_hosts
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
from .outputs import (
    Outputs,
    html_bytes,
    html_option,
    junit_option,
    markdown_option,
    output_options,
    outputs,
    redacted,
    rendering_warnings,
    report_path_of,
    write_outputs,
)
from .shadow import merged_shadow

__all__ = [
    "ALL_PASS",
    "Outputs",
    "baseline_option",
    "compare",
    "gate_option",
    "html_option",
    "junit_option",
    "markdown_option",
    "merge",
    "output_options",
    "outputs",
    "replay",
    "report",
]

# With no gate configured and no baseline, "all pass" is the bar.
ALL_PASS = "task_completion>=1"


gate_option = click.option(
    "--gate",
    "gates",
    multiple=True,
    metavar="EXPR",
    help="Release gate, repeatable: task_completion>=0.85, tag:security>=1.0, "
    "delta:task_completion>=-0.03. unauthorised_actions<=0 and a task_completion floor "
    f"(config replay.min_task_completion, {MIN_TASK_COMPLETION:g}) are always on.",
)
alpha_option = click.option(
    "--alpha",
    type=click.FloatRange(min=0, max=1, min_open=True, max_open=True),
    default=ALPHA,
    show_default=True,
    help="Significance a partial drop in pass rate needs (one-sided Fisher exact) to be a regression.",
)
inconclusive_option = click.option(
    "--inconclusive",
    type=click.Choice(INCONCLUSIVE_POLICIES),
    default=None,
    help="A drop the trials cannot decide exits 3 unless this says fail (exit 1) or pass (exit 0).",
)
baseline_option = click.option(
    "--baseline",
    type=click.Path(dir_okay=False),
    help="A previous report (JSON): cases that passed there and fail now fail the job.",
)


def _gates(config: Config, given: tuple[str, ...], baseline: Report | None) -> list[str]:
    """Parse now (a typo must fail before the run); with nothing configured, every case must pass.

    A bad gate from the config file names the file and its field: nobody looks for it on the command line.
    """
    field = config.field("gates")
    sourced = [(expr, config.source) for expr in config.gates] + [(expr, None) for expr in given]
    for expr, source in sourced:
        try:
            if parse_gate(expr).delta and baseline is None:
                raise GateError(f"gate {expr!r} compares against a baseline: pass --baseline")
        except GateError as exc:
            if source is None:
                raise
            raise GateError(str(exc), file=source, field=field) from None
    return [expr for expr, _ in sourced] or ([] if baseline is not None else [ALL_PASS])


def _judge(
    report: Report, gates: list[str], baseline: Report | None, verdict: tuple[float, str | None], config: Config
) -> GateOutcome:
    """The gates, the default ones and the config's floor on task_completion, as every command judges them."""
    floor = config.replay.min_task_completion
    return evaluate_gates(report, gates, baseline, alpha=verdict[0], inconclusive=verdict[1], min_task_completion=floor)


def _finish(
    report: Report,
    gates: list[str],
    baseline: Report | None,
    out: Outputs,
    verdict: tuple[float, str | None],
    config: Config,
    emit: Callable[[Report], str | None] | None = None,
) -> None:
    """Write every requested file, print the summary and gates, exit with the gate outcome.

    The report is redacted with the project's rules first: an agent that echoes a secret in its answer
    (or a check that quotes it) must not put it into a CI artifact, a log or a tracing backend. ``emit``
    sends the verdicts elsewhere once the files are written, and returns the line to print (it never raises)."""
    report = redacted(report, config)
    outcome = _judge(report, gates, baseline, verdict, config)
    report = report.model_copy(update={"release_gate": outcome.to_dict()})  # the JSON says it too
    unwritten = write_outputs(out, report, baseline, outcome)
    note = emit(report) if emit is not None else None
    if note:
        click.echo(note, err=True)
    to_stderr = out.json == "-"
    click.echo(report.summary(), err=to_stderr)
    for line in outcome.lines() + outcome.warnings(report) + [outcome.summary()]:
        click.echo(line, err=to_stderr)
    for err in unwritten:  # every other output was written; the job must still not pass silently
        click.echo(f"error: {err}", err=True)
    sys.exit(2 if unwritten else outcome.exit_code)


@main.command("replay")
@cases_options(plugins=False)
@agent_option("case")
@click.option(
    "--trials",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Runs per case: pass rate, pass^k and flaky cases (verdicts against a baseline: docs/gates.md).",
)
@click.option(
    "--confirm",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    metavar="K",
    help="Rerun a failing case up to K times before calling it failed: a rerun that passes makes it flaky.",
)
@concurrency_option("case")
@click.option("--inject", is_flag=True, help="Add a recovery variant per failure mode on each case's first tool.")
@timeout_option("case")
@shard_option
@seal_options
@model_option
@sandbox_option
@progress_option
@click.option("--no-judges", is_flag=True, help="Skip the cases' judges (every-commit jobs): their checks do not run.")
@baseline_option
@alpha_option
@inconclusive_option
@gate_option
@outputs
@emit_options
def replay(
    config: Config,
    folder: CaseFolder,
    agent_spec: str,
    trials: int,
    confirm: int,
    concurrency: int,
    inject: bool,
    timeout: float,
    shard: tuple[int, int] | None,
    allow_hosts: tuple[str, ...],
    no_seal: bool,
    model: ModelMode | None,
    sandbox: bool,
    progress: bool | None,
    no_judges: bool,
    baseline: str | None,
    alpha: float,
    inconclusive: str | None,
    gates: tuple[str, ...],
    report_path: str | None,
    json_path: str | None,
    junit_path: str | None,
    markdown_path: str | None,
    html_path: str | None,
    otlp_endpoint: str | None,
    emit_otel: bool,
) -> None:
    """Replay the accepted cases against the current agent and gate on the result.

    Every case runs against a fresh agent, its tools served from the case's fixtures. Exit 0 when every
    gate passes and nothing regressed, 1 otherwise, 2 on usage errors, 3 when nothing failed but a drop
    against the baseline is one the trials cannot decide (--inconclusive makes it 1 or 0). Without
    --gate (or config gates) and without --baseline, every case must pass.
    """
    json_path = report_path_of(report_path, json_path)
    if inject and (model or config.replay.model) == "recorded":
        raise HarvesterCliError(f"--inject with --model recorded: {INJECT_NEEDS_A_MODEL}")
    base = Report.load(baseline) if baseline else None
    gate_list = _gates(config, gates, base)
    out = Outputs(json_path, junit_path, markdown_path, html_path)
    out.check()
    hosts = sealed_plugins(config, allow_hosts, no_seal)
    read = plan_folder(folder.each_accepted(), inject, shard, sources=bool(otlp_endpoint or emit_otel), every=sandbox)
    sandboxed = sandbox_of(config, read.held, sandbox)  # its warnings printed before any case runs
    mode = model or config.replay.model
    reached = plan_hosts(hosts, mode, [entry.model_hosts for entry in read.planned])  # as the suite's seal
    build = sealed_agent(agent_spec, config, reached, sandboxed, no_seal)
    seam.harness()  # this process replays until it exits: work the agent left queued is refused, not run
    show = sys.stderr.isatty() if progress is None else progress
    try:
        with ProgressBar("replaying", show=show) as bar:
            report = run_replay(
                read.planned,
                build,
                trials=trials,
                confirm=confirm,
                concurrency=concurrency,
                inject=inject,
                timeout=timeout,
                shard=shard,
                progress=bar,
                suite=suite_info(folder.root, read.content.result()),
                prices=config if config.prices else None,
                ignore_args=config.ignore_args,
                redact=redaction_for(config),
                seal=not no_seal,
                allow_hosts=hosts,
                allow_commands=config.replay.allow_commands,
                model=mode,
                sandbox=sandboxed,
                judges=judging.judges_for(read.held, config, folder, skip=no_judges),
            )
    except AgentBuildError as exc:  # name the factory as the user spelled it
        raise AgentBuildError(agent_spec, exc.error) from None
    emit = partial(emit_after, otlp_endpoint=otlp_endpoint, emit_otel=emit_otel, cases=read.sources)  # None: not asked
    with also_allowing(export_hosts(otlp_endpoint, emit_otel)):  # still sealed, until the process exits
        _finish(report, gate_list, base, out, (alpha, inconclusive), config, emit)


@main.command("compare")
@handle_errors
@click.argument("report_path", metavar="REPORT", type=click.Path(dir_okay=False))
@click.option("--baseline", required=True, type=click.Path(dir_okay=False), help="The report to compare against.")
@alpha_option
@inconclusive_option
@gate_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON for machines.")
@with_config
def compare(
    report_path: str,
    baseline: str,
    alpha: float,
    inconclusive: str | None,
    gates: tuple[str, ...],
    as_json: bool,
    config: Config,
) -> None:
    """Compare a report with a baseline: regressions, inconclusive drops, improvements, flips, deltas.

    Gates come from --gate and the config. Exit 1 when a case regressed or a gate failed, 3 when a drop
    is one the trials cannot decide (unless --inconclusive says fail or pass).
    """
    report, base = Report.load(report_path), Report.load(baseline)
    gate_list = _gates(config, gates, base)
    outcome = _judge(report, gate_list, base, (alpha, inconclusive), config)
    warnings = report.unsealed_lines() + outcome.warnings(report)
    if as_json:
        echo_json({**outcome.to_dict(), "sealed": report.sealed, "warnings": warnings})
    else:
        for line in outcome.lines() + warnings + [outcome.summary()]:
            click.echo(line)
    sys.exit(outcome.exit_code)


@main.command("merge")
@handle_errors
@click.argument("reports", metavar="REPORT...", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option(
    "-o", "--output", required=True, type=click.Path(dir_okay=False), help="Where to write the merged report."
)
@baseline_option
@alpha_option
@inconclusive_option
@gate_option
@junit_option
@markdown_option
@html_option
@with_config
def merge(
    reports: tuple[str, ...],
    output: str,
    baseline: str | None,
    alpha: float,
    inconclusive: str | None,
    gates: tuple[str, ...],
    junit_path: str | None,
    markdown_path: str | None,
    html_path: str | None,
    config: Config,
) -> None:
    """Merge shard reports into one, then gate it like a replay would (--gate and the config's gates).

    Exit 0 when every gate passes and nothing regressed, 1 otherwise, 3 for an inconclusive drop. Shadow shards too.
    """
    if merged_shadow(reports, output, gates, (html_path, markdown_path), replay_only=(baseline, junit_path)):
        return
    base = Report.load(baseline) if baseline else None
    gate_list = _gates(config, gates, base)
    out = Outputs(output, junit_path, markdown_path, html_path)
    out.check()
    merged = merge_reports(Report.load(p) for p in reports)
    _finish(merged, gate_list, base, out, (alpha, inconclusive), config)


@main.command("report")
@handle_errors
@click.argument("report_path", metavar="REPORT", type=click.Path(dir_okay=False))
@click.option(
    "--baseline", type=click.Path(dir_okay=False), help="A previous report: regressions, improvements, deltas."
)
@click.option("--html", "html_path", required=True, type=click.Path(dir_okay=False), help="The HTML page to write.")
@alpha_option
@inconclusive_option
@gate_option
@with_config
def report(
    report_path: str,
    baseline: str | None,
    html_path: str,
    alpha: float,
    inconclusive: str | None,
    gates: tuple[str, ...],
    config: Config,
) -> None:
    """Render a saved report as one self-contained HTML page (no network: it opens from disk).

    The suite's verdict and gates (--gate and the config's, judged as replay would), tags, trials,
    recovery and the comparison with --baseline; per case its checks, the recorded and replayed
    trajectories step by step with the first divergence marked, and both answers. Exit 0 once written
    (the gates are shown, not enforced: harvester compare enforces them), 2 on bad input.
    """
    check_output(html_path)
    rep, base = Report.load(report_path), Report.load(baseline) if baseline else None
    for line in rendering_warnings((report_path, rep), (baseline, base)):
        click.echo(line, err=True)
    gate_list = _gates(config, gates, base)
    rep = redacted(rep, config)
    outcome = _judge(rep, gate_list, base, (alpha, inconclusive), config)
    write_file(html_path, html_bytes(rep, base, outcome), atomic=True)
    click.echo(f"wrote {html_path}: {len(rep.results)} results; {outcome.summary()}")
