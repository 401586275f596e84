"""The ``harvester`` command: a thin click layer over the library.

Each command parses its options, calls one library function and renders the result. Expected
failures (``HarvesterError``) become one line on stderr and exit 2; gates and checks that fail exit 1.
Command groups live in sibling modules and register themselves on ``main``.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from ..errors import HarvesterError

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


def project_config(path: str | None) -> Any:
    """The project's ``Config`` with its plugins imported (custom checks must exist before cases load)."""
    from ..config import load_config

    config = load_config(path)
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


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="harvester")
def main() -> None:
    """Turn production AI-agent traces into deterministic regression tests.

    Capture runs (ingest, traces), freeze them into cases (harvest, incident, review), and replay
    them nightly against the current agent (replay, compare, merge).
    """


# Each command module adds its commands to ``main`` when imported.
from . import cases, demo, harvesting, importing, judging, review, run, serve, traces, triage  # noqa: E402,F401  (after ``main`` exists)
