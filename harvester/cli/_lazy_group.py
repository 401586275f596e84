"""A click group whose commands are imported when one runs, so ``harvester --version`` and ``--help``
start without loading the library (every command would otherwise pay for pydantic, the replay runner,
the backends' clients and the report code before doing anything).

The group is given a table, name -> (module under ``harvester.cli``, the one line its ``--help`` list
shows). Running a command imports its module, whose ``@main.command()`` registers it; the group's own
``--help`` lists the table's lines and imports nothing. ``tests/test_cli_start.py`` holds the lines to
the commands' own help, so the command's docstring stays the one source.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

import click

__all__ = ["LazyGroup"]


class LazyGroup(click.Group):
    def __init__(self, *args: Any, lazy: Mapping[str, tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = lazy

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            importlib.import_module(f"{__package__}.{self.lazy[cmd_name][0]}")
        return self.commands.get(cmd_name)

    def listed(self, name: str) -> click.Command:
        """The command as ``--help`` lists it: itself once loaded, else a stand-in with the table's line."""
        return self.commands.get(name) or click.Command(name, help=self.lazy[name][1])

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's own listing, made from ``listed`` so that it imports no command."""
        shown = [(name, cmd) for name in self.list_commands(ctx) if not (cmd := self.listed(name)).hidden]
        if shown:
            limit = formatter.width - 6 - max(len(name) for name, _ in shown)
            with formatter.section("Commands"):
                formatter.write_dl([(name, cmd.get_short_help_str(limit)) for name, cmd in shown])
