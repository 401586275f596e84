"""The ``harvester`` command: a thin click layer over the library.

Each command parses its options, calls one library function and renders the result. Expected
failures (``HarvesterError``) become one line on stderr and exit 2; gates and checks that fail exit 1.
Command groups live in sibling modules and register themselves on ``main`` when imported; ``COMMANDS``
says which module holds each, so a command's module (and the library it needs) loads only when it runs.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

import harvester

from ..errors import HarvesterError
from ._lazy_group import LazyGroup

F = TypeVar("F", bound=Callable[..., Any])


class HarvesterCliError(click.ClickException):
    exit_code = 2

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


def handle_errors(fn: F) -> F:
    """Turn our exceptions into one-line usage errors (exit 2), never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except HarvesterError as exc:
            raise HarvesterCliError(str(exc)) from None

    return wrapper  # type: ignore[return-value]


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


class ProgressBar:
    """A click progress bar on stderr, fed by the library's ``progress(done, total)`` callbacks.

    ``total`` is this bar's length when the caller knows it better than the callback (a harvest of
    a store that counts its runs); with neither, a running count shows. ``min_total``: below this
    the work is quick and no bar is drawn. Hidden unless ``show``.
    """

    def __init__(self, label: str, *, show: bool, total: int | None = None, min_total: int = 0, unit: str = "") -> None:
        self.label, self.show, self.total, self.min_total = label, show, total, min_total
        self.unit = f" {unit}" if unit else ""
        self._bar: Any = None
        self._counting = False

    def __call__(self, done: int, total: int | None = None) -> None:
        length = self.total or total
        if not self.show or (length is not None and length < self.min_total):
            return
        if length is None:  # nothing to measure against: a running count
            self._counting = True
            click.echo(f"\r{self.label}: {done}{self.unit}", nl=False, err=True)
            return
        if self._bar is None:
            self._bar = click.progressbar(length=length, label=self.label, file=sys.stderr)
            self._bar.__enter__()
        self._bar.update(done - self._bar.pos)
        if done >= length:
            self.close()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None
        elif self._counting:
            click.echo("", err=True)
            self._counting = False

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def echo_json(data: Any) -> None:
    import orjson

    sys.stdout.write(orjson.dumps(data, option=orjson.OPT_INDENT_2).decode() + "\n")


class Encodable(click.ParamType):
    """Text that must reach a store, a backend or a case file: an undecodable byte in an argument (Python
    hands it over as a lone surrogate) is refused here in one line, not as an encoding traceback later."""

    name = "text"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                where = (
                    (param.opts[0] if isinstance(param, click.Option) else param.human_readable_name.strip("[]."))
                    if param
                    else "value"
                )
                raise HarvesterCliError(f"{where}: {value!r} is not valid UTF-8 (an undecodable byte)") from None
        return value


ENCODABLE = Encodable()


# -- options every command group shares ---------------------------------------------------------
config_option = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    help="Config file (default: harvester.toml or [tool.harvester] found from the cwd upward).",
)
store_option = click.option(
    "--store",
    "store_path",
    type=click.Path(dir_okay=False),
    help="Trace store (default: $HARVESTER_STORE, the config's store, or .harvester/traces.db).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for machines.")


def project_config(path: str | None, plugins: bool = True) -> Any:
    """The project's ``Config`` with its plugins imported (custom checks must exist before cases load);
    ``plugins=False`` leaves that to the command (one that replays imports them sealed)."""
    from ..config import load_config

    config = load_config(path)
    if plugins:
        config.import_plugins()
    return config


def with_config(fn: F) -> F:
    """``--config PATH`` resolved into a ``Config`` passed as ``config``; our errors become exit 2."""

    @handle_errors
    @config_option
    @functools.wraps(fn)
    def wrapper(*args: Any, config_path: str | None, **kwargs: Any) -> Any:
        return fn(*args, config=project_config(config_path), **kwargs)

    return wrapper  # type: ignore[return-value]


def open_store(store_path: str | None, config: Any, *, readonly: bool = False, create: bool = False) -> Any:
    """The option, then ``$HARVESTER_STORE``, then the config's ``store``, then the default path.

    Only ``ingest`` creates a store: elsewhere a mistyped path must be an error, not a new empty store.
    """
    from ..errors import StoreError
    from ..store import TraceStore, default_path, is_postgres_url, store_file

    if store_path is None and not os.environ.get("HARVESTER_STORE") and config.store:
        store_path = config.store
    path = store_file(store_path or default_path())  # a URL is refused here, never echoed (it may hold a password)
    if not create and not is_postgres_url(path) and not os.path.exists(path):
        raise StoreError(
            f"{path}: no trace store here yet; ingest traces first (harvester ingest FILE) or pass --store"
        )
    store = TraceStore(path, readonly=readonly)
    store.on_wait = lambda message: click.echo(f"waiting: {message}", err=True)
    # A read that first normalizes many captured traces (``TraceStore.settle``) shows a bar.
    store.on_settle = ProgressBar("normalizing captured traces", show=True, min_total=SETTLE_BAR_MIN)
    return store


SETTLE_BAR_MIN = 2_000  # captured traces; fewer are normalized in well under a second


# Every command: the module under harvester/cli/ that defines it (imported when it runs) and the line
# ``harvester --help`` lists it with (tests/test_cli_start.py checks it is the command's own first
# sentence). A new command is its module plus one line here.
COMMANDS: dict[str, tuple[str, str]] = {
    "accept": ("review", "Accept cases without prompts: they move to cases/ and the nightly replay runs them."),
    "cases": (
        "cases",
        "List and show case files (accepted in cases/, pending in cases/pending/, rejected in cases/rejected/).",
    ),
    "compare": (
        "run",
        "Compare a report with a baseline: regressions, inconclusive drops, improvements, flips, deltas.",
    ),
    "demo": ("demo", "Run the whole loop offline on the example support agent."),
    "harvest": ("harvesting", "Turn stored runs into pending cases (cases/pending/), one case per distinct situation."),
    "import": (
        "importing",
        "Pull traces from an observability backend into the trace store, for harvest and incident.",
    ),
    "incident": ("harvesting", "Freeze one reported run (TRACE_ID) into a regression case in cases/pending/."),
    "ingest": ("traces", "Import OTLP/JSON trace files into the trace store (FILE - reads stdin)."),
    "judge": ("judging", "Judges: the checks that need judgement, and how far they agree with your reviewers."),
    "label": ("judging", "Label answers good or bad in bulk, from a JSON-lines FILE (docs/judges.md)."),
    "merge": ("run", "Merge shard reports into one, then gate it like a replay would (--gate and the config's gates)."),
    "reject": ("review", "Reject cases: they move to cases/rejected/ so a re-harvest will not propose them again."),
    "replay": ("run", "Replay the accepted cases against the current agent and gate on the result."),
    "report": ("run", "Render a saved report as one self-contained HTML page (no network: it opens from disk)."),
    "rerecord": (
        "harvesting",
        "Refresh a stale case from a newer run: new fixtures and recording, the reviewer's fields kept.",
    ),
    "review": (
        "review",
        "Walk through pending cases: accept, edit a field, label the answer, reject or skip each one.",
    ),
    "serve": ("serve", "Receive traces over OTLP/HTTP (POST /v1/traces, protobuf or JSON) into the trace store."),
    "shadow": (
        "shadow",
        "Replay stored production runs that are not cases against a candidate, and compare run by run.",
    ),
    "suite": ("cases", "The suite manifest (cases/suite.json): which version of the accepted cases a report ran."),
    "traces": ("traces", "Look at the runs in the trace store: list, show, export, prune."),
    "triage": (
        "triage",
        "Group the window's failing (and flagged) runs into clusters of one failure each, new and growing first.",
    ),
}


@click.group(
    cls=LazyGroup,
    lazy=COMMANDS,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(
    harvester.__version__
)  # not the installed metadata: reading it costs more than the rest of --version
def main() -> None:
    """Turn production AI-agent traces into deterministic regression tests.

    Capture runs (ingest, traces), freeze them into cases (harvest, incident, review), and replay
    them nightly against the current agent (replay, compare, merge).
    """


_program = False  # this process runs the harvester program, not ``main`` called by other code


def program() -> None:
    """The ``harvester`` program (its console script, ``python -m harvester``): ``main`` in a process
    that is harvester alone, where a replay's seal may hold until the process exits. Called by other
    code (a test's ``CliRunner``, an app embedding the CLI), ``main`` unseals as each command ends."""
    global _program
    _program = True
    try:
        main()
    except SystemExit as done:
        if "harvester.replay" in sys.modules:  # a command that sealed the process (never --version's)
            _late_refusals(done)
        raise


LATE_WAIT_S = 10.0  # how long the program waits, at most, for the threads the agent left running


def _late_refusals(done: SystemExit) -> None:
    """After a sealed command: what its seal refused once the replay had ended (a thread the agent left
    running, which the process waits for, ``LATE_WAIT_S`` at most), said in a warning line; a passing exit
    becomes 1."""
    from ..replay import refused_after_replay

    late = refused_after_replay(LATE_WAIT_S)
    if late:
        more = f" (and {len(late) - 1} more)" if len(late) > 1 else ""
        click.echo(
            f"warning: after the replay ended, the seal refused {late[0]}{more}: a thread the agent left "
            "running, which no case counted",
            err=True,
        )
        if done.code in (0, None):
            done.code = 1


def is_program() -> bool:
    return _program
