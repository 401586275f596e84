"""Options only ``harvester replay`` takes: its shard, and its seal (hosts it may reach besides its
recordings' model hosts, or no seal at all)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from ..config import host_problem

__all__ = ["seal_options", "shard_option"]


def _hosts(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    for host in value:
        problem = host_problem(host)
        if problem is not None:
            raise click.BadParameter(problem)
    return value


def _shard(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[int, int] | None:
    if value is None:
        return None
    i, sep, n = value.partition("/")
    if sep and i.isdigit() and n.isdigit() and 1 <= int(i) <= int(n):
        return int(i), int(n)
    raise click.BadParameter(f"{value!r}: expected I/N with 1 <= I <= N (e.g. 2/4)")


shard_option = click.option(
    "--shard", callback=_shard, metavar="I/N", help="Run shard I of N (stable split by case id)."
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
