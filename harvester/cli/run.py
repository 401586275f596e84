"""Commands that run and judge suites: replay, compare, merge.

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
from pathlib import Path
from typing import Any, TypeVar

import click

from .. import seam
from .._files import check_output, write_file
from ..case import CaseFolder
from ..config import Config
from ..errors import AgentBuildError, GateError, InputError, OutputError
from ..replay import DEFAULT_CONCURRENCY, load_agent
from ..replay import replay as run_replay
from ..report import ALPHA, INCONCLUSIVE_POLICIES, Report, evaluate_gates, parse_gate
from ..report import merge as merge_reports
from ..suite import suite_info
from . import ProgressBar, echo_json, handle_errors, main, with_config
from .cases import cases_options

__all__ = [
    "ALL_PASS",
    "baseline_option",
    "compare",
    "gate_option",
    "junit_option",
    "markdown_option",
    "merge",
    "output_options",
    "outputs",
    "replay",
]

F = TypeVar("F", bound=Callable[..., Any])
# With no gate configured and no baseline, "all pass" is the bar.
ALL_PASS = "task_completion>=1"


def _shard(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[int, int] | None:
    if value is None:
        return None
    i, sep, n = value.partition("/")
    if sep and i.isdigit() and n.isdigit() and 1 <= int(i) <= int(n):
        return int(i), int(n)
    raise click.BadParameter(f"{value!r}: expected I/N with 1 <= I <= N (e.g. 2/4)")


gate_option = click.option(
    "--gate",
    "gates",
    multiple=True,
    metavar="EXPR",
    help="Release gate, repeatable: task_completion>=0.85, tag:security>=1.0, "
    "delta:task_completion>=-0.03. unauthorised_actions<=0 is always on.",
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
junit_option = click.option("--junit", "junit_path", type=click.Path(dir_okay=False), help="Write JUnit XML.")
markdown_option = click.option(
    "--markdown",
    "markdown_path",
    type=click.Path(dir_okay=False),
    help='Write a Markdown summary (e.g. "$GITHUB_STEP_SUMMARY").',
)
output_options = [
    click.option("--report", "report_path", metavar="PATH|-", help="Write the report as JSON ('-' for stdout)."),
    # --json as everywhere else: JSON for machines on stdout (the report). ``--json PATH``, its old
    # meaning, still writes the file, with a note: ``--report PATH`` is its name now.
    click.option(
        "--json",
        "json_path",
        is_flag=False,
        flag_value="-",
        default=None,
        metavar="",
        help="Print the report as JSON on stdout (the summary goes to stderr).",
    ),
    junit_option,
    markdown_option,
]


def outputs(fn: F) -> F:
    for option in reversed(output_options):
        fn = option(fn)
    return fn


def _report_path(report_path: str | None, json_path: str | None) -> str | None:
    """One report destination from ``--report`` and ``--json`` (whose old ``--json PATH`` is deprecated)."""
    if json_path is not None and json_path != "-":
        click.echo(f"note: --json PATH is deprecated: use --report {json_path}", err=True)
    if report_path is not None and json_path is not None and report_path != json_path:
        raise InputError("--report and --json both name the report: give one")
    return report_path if report_path is not None else json_path


def _gates(config: Config, given: tuple[str, ...], baseline: Report | None) -> list[str]:
    """Parse now (a typo must fail before the run); with nothing configured, every case must pass.

    A bad gate from the config file names the file and its field: nobody looks for it on the command line.
    """
    field = "tool.harvester.gates" if config.source and Path(config.source).name == "pyproject.toml" else "gates"
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


def _finish(
    report: Report,
    gates: list[str],
    baseline: Report | None,
    json_path: str | None,
    junit_path: str | None,
    markdown_path: str | None,
    verdict: tuple[float, str | None],
    config: Config,
) -> None:
    """Write every requested file, print the summary and gates, exit with the gate outcome.

    The report is redacted with the project's rules first: an agent that echoes a secret in its answer
    (or a check that quotes it) must not put it into a CI artifact or a log."""
    report = _redacted(report, config)
    outcome = evaluate_gates(report, gates, baseline, alpha=verdict[0], inconclusive=verdict[1])
    unwritten: list[OutputError] = []
    if json_path == "-":
        sys.stdout.write(report.to_json().decode())
    elif json_path:
        _write(unwritten, report.save, json_path)
    if junit_path:
        _write(unwritten, _atomic, junit_path, report.to_junit())
    if markdown_path:
        _write(unwritten, _atomic, markdown_path, report.to_markdown(outcome).encode())
    to_stderr = json_path == "-"
    click.echo(report.summary(), err=to_stderr)
    for line in outcome.lines() + outcome.warnings(report) + [outcome.summary()]:
        click.echo(line, err=to_stderr)
    for err in unwritten:  # every other output was written; the job must still not pass silently
        click.echo(f"error: {err}", err=True)
    sys.exit(2 if unwritten else outcome.exit_code)


def _redacted(report: Report, config: Config) -> Report:
    from ..redact import Redactor, redaction_for

    redactor = Redactor.from_option(redaction_for(config))
    if redactor is None:
        return report
    plain = report.model_dump(mode="json", by_alias=True)
    data = redactor.redact_value(plain)
    return report if data == plain else Report.from_data(data)


def _atomic(path: str, data: bytes) -> None:
    """A report file written whole or not at all, never through a planted symlink (``/dev/stdout`` works)."""
    write_file(path, data, atomic=True)


def _write(unwritten: list[OutputError], fn: Callable[..., Any], *args: Any) -> None:
    try:
        fn(*args)
    except OutputError as exc:
        unwritten.append(exc)


def _shown(path: Path) -> str:
    """A folder as the user would type it: relative to the working directory when it is under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _check_outputs(*paths: str | None) -> None:
    """A directory or a path under a file can never be written: say so before the run, not after it."""
    for path in paths:
        if path and path != "-":
            check_output(path)


@main.command("replay")
@cases_options
@click.option(
    "--agent",
    "agent_spec",
    required=True,
    metavar="MODULE:ATTR",
    help="Factory that builds a fresh agent per case; may take a 'tools' parameter (the executor).",
)
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
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=DEFAULT_CONCURRENCY,
    show_default=True,
    help="Cases in flight at once (one thread each).",
)
@click.option("--inject", is_flag=True, help="Add a recovery variant per failure mode on each case's first tool.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=60.0,
    show_default=True,
    help="Seconds per case; a hung agent fails its case.",
)
@click.option("--shard", callback=_shard, metavar="I/N", help="Run shard I of N (stable split by case id).")
@click.option("--progress/--no-progress", default=None, help="Progress bar on stderr (default: when a TTY).")
@baseline_option
@alpha_option
@inconclusive_option
@gate_option
@outputs
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
    progress: bool | None,
    baseline: str | None,
    alpha: float,
    inconclusive: str | None,
    gates: tuple[str, ...],
    report_path: str | None,
    json_path: str | None,
    junit_path: str | None,
    markdown_path: str | None,
) -> None:
    """Replay the accepted cases against the current agent and gate on the result.

    Every case runs against a fresh agent, its tools served from the case's fixtures. Exit 0 when every
    gate passes and nothing regressed, 1 otherwise, 2 on usage errors, 3 when nothing failed but a drop
    against the baseline is one the trials cannot decide (--inconclusive makes it 1 or 0). Without
    --gate (or config gates) and without --baseline, every case must pass.
    """
    json_path = _report_path(report_path, json_path)
    base = Report.load(baseline) if baseline else None
    gate_list = _gates(config, gates, base)
    _check_outputs(json_path, junit_path, markdown_path)
    build = load_agent(agent_spec)
    every = folder.cases()  # validates every file, pending ones too (each within max_file_bytes)
    cases = [c for c in every if c.status == "accepted"]
    if not cases:
        pending = sum(c.status == "pending" for c in every)
        hint = f"{pending} pending: run harvester review" if pending else "harvest some with: harvester harvest"
        raise InputError(f"no accepted cases in {_shown(folder.root)}/ ({hint})")
    seam.harness()  # this process replays until it exits: work the agent left queued is refused, not run
    show = sys.stderr.isatty() if progress is None else progress
    try:
        with ProgressBar("replaying", show=show) as bar:
            report = run_replay(
                cases,
                build,
                trials=trials,
                confirm=confirm,
                concurrency=concurrency,
                inject=inject,
                timeout=timeout,
                shard=shard,
                progress=bar,
                suite=suite_info(folder.root),
                prices=config if config.prices else None,
                ignore_args=config.ignore_args,
            )
    except AgentBuildError as exc:  # name the factory as the user spelled it
        raise AgentBuildError(agent_spec, exc.error) from None
    _finish(report, gate_list, base, json_path, junit_path, markdown_path, (alpha, inconclusive), config)


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
    outcome = evaluate_gates(report, gate_list, base, alpha=alpha, inconclusive=inconclusive)
    if as_json:
        echo_json(outcome.to_dict())
    else:
        for line in outcome.lines() + outcome.warnings(report) + [outcome.summary()]:
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
    config: Config,
) -> None:
    """Merge shard reports into one, then gate it like a replay would (--gate and the config's gates).

    Exit 0 when every gate passes and nothing regressed, 1 otherwise, 3 for an inconclusive drop.
    """
    base = Report.load(baseline) if baseline else None
    gate_list = _gates(config, gates, base)
    _check_outputs(output, junit_path, markdown_path)
    merged = merge_reports(Report.load(p) for p in reports)
    _finish(merged, gate_list, base, output, junit_path, markdown_path, (alpha, inconclusive), config)
