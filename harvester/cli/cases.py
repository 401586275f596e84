"""Commands that look at cases: cases list, cases show, suite bump; and what every case command shares
(the --cases folder, rendering a case)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import click
import orjson

from ..case import CASES_ENV, AgentCase, CaseFolder
from ..checks import HARVESTED
from ..config import Config
from ..suite import bump_suite, read_suite
from . import config_option, echo_json, handle_errors, json_option, main, open_store, project_config, store_option

__all__ = [
    "cases",
    "cases_list",
    "cases_options",
    "cases_show",
    "listing",
    "render_case",
    "suite",
    "suite_bump",
    "suite_stats",
]


# -- shared options -----------------------------------------------------------------------------
def cases_options(fn: Callable[..., Any] | None = None, *, plugins: bool = True) -> Any:
    """``--cases DIR`` and ``--config PATH``, resolved into a ``CaseFolder`` and a ``Config``; with
    ``plugins=False`` the command imports the config's plugins itself (``replay`` and ``shadow``: sealed).

    Precedence: the option, then ``$HARVESTER_CASES``, then the config's ``cases_dir``. The folder reads
    files up to the config's ``max_file_bytes`` and scans a case for secrets with the project's rules.
    """

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        @handle_errors
        @config_option
        @click.option(
            "--cases",
            "cases_dir",
            type=click.Path(file_okay=False),
            help=f"Cases folder (default: ${CASES_ENV}, the config's cases_dir, or ./cases).",
        )
        @functools.wraps(fn)
        def wrapper(*args: Any, config_path: str | None, cases_dir: str | None, **kwargs: Any) -> Any:
            config = project_config(config_path, plugins)
            return fn(*args, config=config, folder=CaseFolder.for_project(config, cases_dir), **kwargs)

        return wrapper

    return decorate(fn) if fn is not None else decorate


# -- rendering ----------------------------------------------------------------------------------
def _abridge(value: Any, width: int = 90) -> str:
    text = value if isinstance(value, str) else orjson.dumps(value).decode()
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def listing(values: Iterable[Any]) -> str:
    return ", ".join(str(v) for v in values) or "-"


def render_case(case: AgentCase, path: Path | None = None) -> str:
    """What a reviewer needs on one screen: the prompt, what the run did, the answer, what is proposed."""
    lines = [
        click.style(f"{case.id}", bold=True) + f"  [{case.status}]" + (f"  {path}" if path else ""),
        f"  why:        {case.why}",
        f"  prompt:     {_abridge(case.prompt, 200)}",
        f"  recorded:   {' -> '.join(case.recorded.trajectory) or '(no successful tool calls)'}"
        f"  (stop {case.recorded.stop}, {case.recorded.steps} step{'s' if case.recorded.steps != 1 else ''}"
        + (f", cost {case.recorded.cost:.6f}" if case.recorded.cost is not None else "")
        + ")",
    ]
    if case.recorded.denied:
        lines.append(f"  denied:     {listing(case.recorded.denied)} (requested, never executed)")
    for i, fx in enumerate(case.fixtures, 1):
        outcome = f"error {fx.error.type}: {fx.error.message}" if fx.error else _abridge(fx.result, 70)
        mark = " [TRUNCATED]" if fx.truncated else ""
        lines.append(f"    {i}. {fx.tool}({_abridge(fx.args, 60)}) -> {outcome}{mark}")
    lines += _model_lines(case)
    lines += [
        f"  answer:     {_abridge(case.recorded.answer or '(none)', 200)}",
        "  proposed:" if case.status == "pending" else "  fields:",
        f"    expected:          {case.expected or '-'}",
        f"    required_elements: {listing(case.required_elements)}",
        f"    min_steps:         {case.min_steps if case.min_steps is not None else '-'}",
        f"    appropriate_tools: {listing(case.appropriate_tools)}",
        f"    forbidden_tools:   {listing(case.forbidden_tools)}",
        *_harvested_lines(case),
        f"    max_cost:          {case.max_cost if case.max_cost is not None else '-'}",
        f"    checks:            {listing(c.label() for c in case.compiled_checks())}",
        f"    judges:            {listing(case.judges)}"
        + (
            f"  (labels: {sum(lb.verdict == 'good' for lb in case.labels)} good, "
            f"{sum(lb.verdict == 'bad' for lb in case.labels)} bad)"
            if case.labels
            else ""
        ),
        f"    tags:              {listing(case.tags)}",
        f"    seen:              {case.source.seen}"
        + (f"  (failure kind {case.source.failure_kind})" if case.source.failure_kind else ""),
    ]
    if case.rejected_why:
        lines.append(f"  rejected:   {case.rejected_why}")
    lines += [click.style(f"  review: {note}", fg="yellow") for note in case.review_notes]
    return "\n".join(lines)


def _model_lines(case: AgentCase) -> list[str]:
    """A line per model turn: its step, the tool calls it asked for, or the start of what it said."""
    if not case.model_fixtures:
        return []
    lines = [f"  model:      {len(case.model_fixtures)} recorded turn{'s' if len(case.model_fixtures) != 1 else ''}"]
    for i, turn in enumerate(case.model_fixtures, 1):
        calls = turn.answer.tool_calls
        said = (
            ", ".join(f"{c.name}({_abridge(c.args, 40)})" for c in calls)
            if calls
            else repr(_abridge(turn.answer.text or "", 60))
        )
        marks = (" [streamed]" if turn.streamed else "") + (" [TRUNCATED]" if turn.truncated else "")
        lines.append(f"    step {i}. {said}{marks}")
    return lines


def _harvested_lines(case: AgentCase) -> list[str]:
    """A line per harvested check that shows itself (``order``); the others show among the checks."""
    shown = ((check.field, check.render(case.held(check))) for check in HARVESTED)
    return [f"    {field + ':':<19}{line}" for field, line in shown if line is not None]


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
def cases_list(status: str | None, tag: str | None, config: Config, folder: CaseFolder, as_json: bool) -> None:
    """One line per case: id, status, tags, seen, why."""
    shown = (f.case for f in folder.each(status))  # only the files of that status read in full, one at a time
    cases: list[dict[str, Any]] = [
        {
            "id": c.id,
            "status": c.status,
            "tags": c.tags,
            "seen": c.source.seen,
            "why": c.why,
            "failure_kind": c.source.failure_kind,
        }
        for c in shown
        if tag is None or tag in c.tags
    ]
    if as_json:
        echo_json(cases)
        return
    if not cases:
        click.echo("no cases")
        return
    rows = [(c["id"], c["status"], ",".join(c["tags"]), str(c["seen"]), c["why"]) for c in cases]
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
def suite_bump(name: str | None, config: Config, folder: CaseFolder, as_json: bool) -> None:
    """Raise the suite's minor version if the accepted cases changed since the last bump."""
    before = read_suite(folder.root, max_bytes=folder.max_bytes)
    manifest = bump_suite(folder.root, name=name, max_bytes=folder.max_bytes)
    changed = before is None or before.version != manifest.version or before.name != manifest.name
    if as_json:
        echo_json({**manifest.model_dump(mode="json", by_alias=True), "changed": changed})
        return
    state = "bumped to" if changed else "unchanged at"
    click.echo(
        f"suite {manifest.name} {state} {manifest.version} "
        f"({manifest.cases} accepted cases, content {manifest.content_hash[:12]})"
    )


@suite.command("stats")
@store_option
@cases_options
@json_option
@handle_errors
def suite_stats(store_path: str | None, config: Config, folder: CaseFolder, as_json: bool) -> None:
    """What the accepted suite measures, and one warning for each thing it cannot measure yet.

    Its mix by kind (typical, edge, adversarial, regression: from tags and failure kinds, mapped by
    [tool.harvester.suite] kinds) against the mix aimed for (default 40/25/20/15), the cases whose only
    passing behaviour is to decline, recovery variants per tool, the agents and tools covered and the
    oldest recording. With a trace store, the tools production called every day of the last 7 days
    that no case calls are named.
    """
    from ..case import daily_tools
    from ..case import suite_stats as stats_of
    from ..errors import StoreError

    try:
        store = open_store(store_path, config, readonly=True)
    except StoreError:
        if store_path is not None:
            raise
        store = None  # no store here: production's daily tools are not known
    daily = daily_tools(store.runs(since="7d")) if store is not None else []
    stats = stats_of(folder.accepted(), config, daily=daily)
    if as_json:
        echo_json(stats.to_dict())
        return
    for line in stats.lines():
        click.echo(line, err=line.startswith("warning: "))
