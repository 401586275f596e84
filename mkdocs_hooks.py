"""mkdocs hooks: the CLI reference page (docs/cli.md) is the commands' ``--help``, made as the site builds.

Generated at build time rather than committed, the reference cannot go stale, and a change that adds
to the help (a new backend's URL form, which the CLI reads from the backends' registry) touches no
docs page of its own. ``tests/test_docs.py`` renders it as the build does.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import click
from click.testing import CliRunner

from harvester.cli import main

__all__ = ["MARK", "cli_reference", "on_page_markdown"]

MARK = "<!-- cli-reference -->"


def commands(group: click.Group, prefix: list[str]) -> Iterator[list[str]]:
    """Every command's path under ``group``, subcommands after their group."""
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        path = [*prefix, name]
        yield path
        if isinstance(cmd, click.Group):
            yield from commands(cmd, path)


def _help(path: list[str]) -> str:
    runner = CliRunner()
    return runner.invoke(main, [*path, "--help"], prog_name="harvester", terminal_width=100).output.rstrip()


def cli_reference() -> str:
    """The top-level help, then a section per command with its help, as markdown."""
    parts = ["```text", _help([]), "```"]
    for path in commands(main, []):
        parts += ["", f"## `harvester {' '.join(path)}`", "", "```text", _help(path), "```"]
    return "\n".join(parts)


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any, **kwargs: Any) -> str:
    return markdown.replace(MARK, cli_reference()) if MARK in markdown else markdown
