"""Where a gated command's report goes: the output options, checked before the run, written at the end.

Shared by ``replay`` and ``merge``: every file is written atomically (whole or not at all), one that
cannot be written costs only itself (``write_outputs`` returns its error for one line at the end), and
the report is redacted with the project's rules before anything leaves the process.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from .._files import check_output, write_file
from ..config import Config
from ..errors import InputError, OutputError
from ..report import GateOutcome, Report, render_html_chunks
from ..report import redacted as redact_report

__all__ = [
    "FILE_OUTPUTS",
    "Outputs",
    "check_outputs",
    "html_bytes",
    "html_option",
    "rendering_warnings",
    "junit_option",
    "markdown_option",
    "output_options",
    "outputs",
    "redacted",
    "report_path_of",
    "write_outputs",
]

F = TypeVar("F", bound=Callable[..., Any])

junit_option = click.option("--junit", "junit_path", type=click.Path(dir_okay=False), help="Write JUnit XML.")
markdown_option = click.option(
    "--markdown",
    "markdown_path",
    type=click.Path(dir_okay=False),
    help='Write a Markdown summary (e.g. "$GITHUB_STEP_SUMMARY").',
)
html_option = click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False),
    help="Write the report as one self-contained HTML page (against --baseline when given).",
)
output_options = [
    click.option("--report", "report_path", metavar="PATH|-", help="Write the report as JSON ('-' for stdout)."),
    # --json as everywhere else: JSON for machines on stdout (the report), the same as ``--report -``.
    click.option(
        "--json",
        "json_path",
        flag_value="-",
        default=None,
        help="Print the report as JSON on stdout (the summary goes to stderr).",
    ),
    junit_option,
    markdown_option,
    html_option,
]


def outputs(fn: F) -> F:
    for option in reversed(output_options):
        fn = option(fn)
    return fn


def report_path_of(report_path: str | None, json_path: str | None) -> str | None:
    """One report destination from ``--report`` and ``--json`` (stdout)."""
    if report_path is not None and json_path is not None and report_path != json_path:
        raise InputError("--report and --json both name the report: give one")
    return report_path if report_path is not None else json_path


@dataclass(frozen=True)
class Outputs:
    """Where a gated command writes its report: ``json`` may be "-" (stdout); None = not asked for."""

    json: str | None = None
    junit: str | None = None
    markdown: str | None = None
    html: str | None = None

    def check(self) -> None:
        check_outputs(self.json, self.junit, self.markdown, self.html)


# Each file output: its Outputs field and how it is made from (report, baseline, outcome).
# Written as they are made (a case at a time for JUnit and HTML): the report's results stay on disk.
FILE_OUTPUTS: list[tuple[str, Callable[[Report, Report | None, GateOutcome], Iterable[bytes]]]] = [
    ("junit", lambda report, _base, _outcome: report.junit_chunks()),
    ("markdown", lambda report, _base, outcome: [report.to_markdown(outcome).encode()]),
    ("html", lambda report, base, outcome: html_bytes(report, base, outcome)),
]


def write_outputs(out: Outputs, report: Report, baseline: Report | None, outcome: GateOutcome) -> list[OutputError]:
    """Write every requested file (the JSON to stdout for "-"); the errors of those that failed."""
    unwritten: list[OutputError] = []
    if out.json == "-":
        for chunk in report.chunks():
            sys.stdout.write(chunk.decode())
    elif out.json:
        _write(unwritten, report.save, out.json)
    for name, make in FILE_OUTPUTS:
        path = getattr(out, name)
        if path:
            _write(unwritten, _made, path, make, report, baseline, outcome)
    return unwritten


def redacted(report: Report, config: Config) -> Report:
    """The report with the project's redaction rules applied (``harvester.report.redacted``)."""
    from ..redact import Redactor, redaction_for

    return redact_report(report, Redactor.from_option(redaction_for(config)))


def html_bytes(report: Report, baseline: Report | None, outcome: GateOutcome) -> Iterator[bytes]:
    """The HTML page, encoded as it is made: one self-contained file, written a case at a time."""
    return (chunk.encode() for chunk in render_html_chunks(report, baseline, outcome))


def _atomic(path: str, data: Iterable[bytes]) -> None:
    """A report file written whole or not at all, never through a planted symlink (``/dev/stdout`` works)."""
    write_file(path, data, atomic=True)


def _made(path: str, make: Callable[..., Iterable[bytes]], *args: Any) -> None:
    _atomic(path, make(*args))


def _write(unwritten: list[OutputError], fn: Callable[..., Any], *args: Any) -> None:
    try:
        fn(*args)
    except OutputError as exc:
        unwritten.append(exc)


def check_outputs(*paths: str | None) -> None:
    """A directory or a path under a file can never be written: say so before the run, not after it."""
    for path in paths:
        if path and path != "-":
            check_output(path)


def rendering_warnings(report: tuple[str, Report], baseline: tuple[str | None, Report | None]) -> list[str]:
    """What ``harvester report`` says before it renders a saved report (each ``(path, report)``): a
    baseline of another suite, or a report that was judged against a baseline, rendered without one."""
    (path, rep), (base_path, base) = report, baseline
    if base is not None and (base.suite, base.suite_version) != (rep.suite, rep.suite_version):
        return [
            f"warning: {base_path}: baseline of suite {base.suite} {base.suite_version or '(unversioned)'}, "
            f"{path} is {rep.suite} {rep.suite_version or '(unversioned)'}: comparing the cases both ran"
        ]
    made = rep.release_gate or {}
    if base is None and isinstance(made.get("comparison"), dict):  # what its command said would go unsaid
        return [
            f"warning: {path} was judged against a baseline when it was made ({made.get('verdict')}); "
            "this page is judged without one: pass --baseline to show the comparison"
        ]
    return []
