"""Options the commands that replay take (``replay``, and ``shadow`` with it: it runs the same
runner): the agent, how many run at once and for how long, the shard, the seal (hosts it may reach
besides its recordings' model hosts, or no seal at all), how the agent's model is served
(``--model``), and the sandbox (``--sandbox``: the config's sandbox tools run for real)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import click

from ..case import AgentCase
from ..config import MODEL_MODES, Config, host_entry, host_problem
from ..replay import DEFAULT_CONCURRENCY, Sandbox, importing_sealed, load_agent, sandbox_for
from . import HarvesterCliError, is_program

__all__ = [
    "agent_option",
    "concurrency_option",
    "model_option",
    "progress_option",
    "sandbox_of",
    "sandbox_option",
    "seal_options",
    "sealed_plugins",
    "shard_option",
    "timeout_option",
]


def _hosts(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    for host in value:
        problem = host_problem(host)
        if problem is not None:
            raise HarvesterCliError(f"--allow-host: {problem}")
    return tuple(host_entry(host) for host in value)


def _shard(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[int, int] | None:
    if value is None:
        return None
    i, sep, n = value.partition("/")
    if sep and i.isdigit() and n.isdigit() and 1 <= int(i) <= int(n):
        return int(i), int(n)
    raise click.BadParameter(f"{value!r}: expected I/N with 1 <= I <= N (e.g. 2/4)")


def _model(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None or value in MODEL_MODES:
        return value
    raise HarvesterCliError(f"--model {value!r}: expected one of {', '.join(MODEL_MODES)}")


model_option = click.option(
    "--model",
    callback=_model,
    metavar="|".join(MODEL_MODES),
    help="How the agent's model calls are answered: live (default, or replay.model), recorded (from each "
    "case's model fixtures, no model host reachable; a drifted request fails the case), recorded-then-live "
    "(a drifted case continues on the live model).",
)

shard_option = click.option(
    "--shard",
    callback=_shard,
    metavar="I/N",
    help="Run shard I of N (a stable split by case id; for shadow, by run id).",
)


def seal_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--allow-host`` (repeatable, added to ``replay.allow_hosts``) and ``--no-seal``."""
    fn = click.option(
        "--no-seal",
        is_flag=True,
        help="Replay without the seal (connections and processes unchecked); the summary and report say so.",
    )(fn)
    return click.option(
        "--allow-host",
        "allow_hosts",
        multiple=True,
        callback=_hosts,
        metavar="HOST[:PORT]",
        help="A host the sealed replay may connect to, besides each recording's model hosts and replay.allow_hosts.",
    )(fn)


sandbox_option = click.option(
    "--sandbox",
    is_flag=True,
    help="Run the tools [tool.harvester.sandbox] names for real, with its env set and its hosts allowed by "
    "the seal; every other tool is served from fixtures. A glob never matches a mutating tool.",
)


def sandbox_of(config: Config, cases: Sequence[AgentCase], on: bool) -> Sandbox | None:
    """The config's sandbox for ``--sandbox`` (None without it), checked against the cases' tools:
    its warnings (an entry no tool matches, with the closest names) go to stderr."""
    if not on:
        return None
    sandbox, warnings = sandbox_for(config, cases)
    for line in warnings:
        click.echo(line, err=True)
    return sandbox


def sealed_agent(
    spec: str, config: Config, hosts: Sequence[str], sandbox: Sandbox | None, no_seal: bool
) -> Callable[..., Any]:
    """The ``--agent`` factory, its module imported sealed as the replay will run (unless ``--no-seal``):
    ``hosts`` (the config's and ``--allow-host``'s), the sandbox's, and the config's commands. The
    ``harvester`` program stays sealed until it exits: what it does after this is harvester's own work
    (``seam.own_work``) or the replay's, and what the import started finds no moment unsealed."""
    return load_agent(
        spec,
        seal=not no_seal,
        allow_hosts=(*hosts, *(sandbox.hosts if sandbox is not None else ())),
        allow_commands=config.replay.allow_commands,
        warn=lambda line: click.echo(f"warning: {line}", err=True),
        until_exit=is_program(),
    )


def sealed_plugins(config: Config, allow_hosts: Sequence[str], no_seal: bool) -> tuple[str, ...]:
    """The config's plugins imported sealed as the ``--agent`` module is (``sealed_agent``), before it:
    a plugin in the app's package imports the app, whose import-time connection would otherwise be open
    before any seal (and the agent's sealed import would find the app imported already). Before the
    cases load, so allowing the hosts every case may reach, which it returns: the config's and
    ``--allow-host``'s."""
    hosts = (*config.replay.allow_hosts, *allow_hosts)
    with importing_sealed(
        "the config's plugins",
        seal=bool(config.plugins) and not no_seal,
        allow_hosts=hosts,
        allow_commands=config.replay.allow_commands,
        warn=lambda line: click.echo(f"warning: {line}", err=True),
        until_exit=is_program(),
    ):
        config.import_plugins()
    return hosts


def agent_option(what: str) -> Callable[..., Any]:
    """``--agent MODULE:ATTR``, the factory called for every ``what`` (a case, a run)."""
    return click.option(
        "--agent",
        "agent_spec",
        required=True,
        metavar="MODULE:ATTR",
        help=f"Factory that builds a fresh agent per {what}; may take a 'tools' parameter (the executor).",
    )


def concurrency_option(what: str) -> Callable[..., Any]:
    return click.option(
        "--concurrency",
        type=click.IntRange(min=1),
        default=DEFAULT_CONCURRENCY,
        show_default=True,
        help=f"{what.capitalize()}s in flight at once (one thread each).",
    )


def timeout_option(what: str) -> Callable[..., Any]:
    return click.option(
        "--timeout",
        type=click.FloatRange(min=0, min_open=True),
        default=60.0,
        show_default=True,
        help=f"Seconds per {what}; a hung agent fails its {what}.",
    )


progress_option = click.option(
    "--progress/--no-progress", default=None, help="Progress bar on stderr (default: when a TTY)."
)
