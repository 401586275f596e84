"""The command starts without loading the library: ``--version`` and ``--help`` import no command, and
the table they read (``harvester.cli.COMMANDS``) stays true to the commands themselves."""

from __future__ import annotations

import importlib
import importlib.metadata
import pkgutil
import subprocess
import sys

import click
from click.testing import CliRunner

import harvester.cli
from harvester.cli import COMMANDS, main
from harvester.cli._lazy_group import LazyGroup


def _load_every_command_module() -> None:
    for info in pkgutil.iter_modules(harvester.cli.__path__):
        importlib.import_module(f"harvester.cli.{info.name}")


def test_every_registered_command_is_in_the_table() -> None:
    """A command whose module registers it but the table does not name would never be found."""
    _load_every_command_module()
    assert set(main.commands) == set(COMMANDS)


# Every command's path, in a fresh process: with "all", after importing every module under harvester/cli/.
_PATHS = """
import importlib, pkgutil, sys
import click
import harvester.cli

if sys.argv[1:] == ["all"]:
    for info in pkgutil.iter_modules(harvester.cli.__path__):
        importlib.import_module("harvester.cli." + info.name)

def paths(group, prefix):
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        yield " ".join([*prefix, name])
        if isinstance(cmd, click.Group):
            yield from paths(cmd, [*prefix, name])

print("\\n".join(paths(harvester.cli.main, [])))
"""


def test_every_subcommand_is_there_when_its_group_loads_alone() -> None:
    """A subcommand registered from a module its group's module does not import would be missing: the
    group's module is all that loads when the group runs."""
    lazily, eagerly = (
        subprocess.run([sys.executable, "-c", _PATHS, *extra], capture_output=True, text=True, check=True).stdout
        for extra in ([], ["all"])
    )
    assert lazily == eagerly
    assert "traces list" in lazily.splitlines()


def test_the_table_names_each_commands_module_and_its_own_first_sentence() -> None:
    ctx = click.Context(main)
    for name, (module, summary) in COMMANDS.items():
        command = main.get_command(ctx, name)
        assert command is not None and command.callback is not None, name
        assert command.callback.__module__ == f"harvester.cli.{module}", name
        assert command.get_short_help_str(limit=10_000) == summary, f"COMMANDS[{name!r}] is not its help's summary"


def test_the_lazy_listing_is_clicks_own_listing_of_the_real_commands() -> None:
    """``--help`` made from the table, nothing loaded, reads as click makes it from the loaded commands."""
    _load_every_command_module()

    def listing(group: click.Group, format_commands: object) -> str:
        ctx = click.Context(group, info_name="harvester", max_content_width=100, terminal_width=100)
        formatter = ctx.make_formatter()
        format_commands(ctx, formatter)  # type: ignore[operator]
        return formatter.getvalue()

    fresh = LazyGroup("harvester", lazy=COMMANDS)
    assert not fresh.commands
    assert listing(fresh, fresh.format_commands) == listing(main, lambda c, f: click.Group.format_commands(main, c, f))
    assert not fresh.commands  # listing loaded nothing


def test_version_and_help_import_no_command_and_no_library() -> None:
    code = (
        "import sys\nfrom harvester.cli import main\n"
        "try:\n    main([sys.argv[1]])\nexcept SystemExit:\n    pass\n"
        "print(' '.join(m for m in sys.modules if m.split('.')[0] in ('harvester', 'pydantic')), file=sys.stderr)"
    )
    for flag in ("--version", "--help"):
        done = subprocess.run([sys.executable, "-c", code, flag], capture_output=True, text=True, check=True)
        loaded = set(done.stderr.split())
        assert loaded == {
            "harvester",
            "harvester._lazy",
            "harvester.errors",
            "harvester.cli",
            "harvester.cli._lazy_group",
        }
        assert done.stdout.strip()


def test_python_dash_m_runs_the_same_command_and_its_version_is_the_installed_one() -> None:
    done = subprocess.run([sys.executable, "-m", "harvester", "--version"], capture_output=True, text=True, check=True)
    assert done.stdout.split()[-1] == importlib.metadata.version("harvester")
    done = subprocess.run([sys.executable, "-m", "harvester", "--help"], capture_output=True, text=True, check=True)
    assert "replay" in done.stdout and "Commands:" in done.stdout


def test_a_command_runs_after_its_module_loads_on_first_use() -> None:
    result = CliRunner().invoke(main, ["suite", "--help"])
    assert result.exit_code == 0 and "bump" in result.output
    result = CliRunner().invoke(main, ["no-such-command"])
    assert result.exit_code == 2 and "No such command" in result.output
