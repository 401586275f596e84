"""The README stays true: the CLI reference is the click help, the set-up commands are what CI runs.

Regenerate the reference with ``python tests/test_readme.py --update``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import click
from click.testing import CliRunner

from harvester.cli import main

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
START, END = "<!-- cli-reference:start -->", "<!-- cli-reference:end -->"


def _commands(group: click.Group, prefix: list[str]):
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        path = prefix + [name]
        yield path
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, path)


def cli_reference() -> str:
    runner = CliRunner()
    parts = ["```text", runner.invoke(main, ["--help"], prog_name="harvester", terminal_width=100).output.rstrip(), "```"]
    for path in _commands(main, []):
        out = runner.invoke(main, path + ["--help"], prog_name="harvester", terminal_width=100).output.rstrip()
        parts += ["", f"### `harvester {' '.join(path)}`", "", "```text", out, "```"]
    return "\n".join(parts)


def readme_section(text: str) -> str:
    return text.split(START, 1)[1].split(END, 1)[0].strip()


def test_cli_reference_is_current():
    assert readme_section(README.read_text()) == cli_reference(), \
        "README CLI reference is stale: run `python tests/test_readme.py --update`"


def test_ci_runs_the_readme_test_command():
    text = README.read_text()
    block = re.search(r"## Set up\n+```bash\n(.*?)```", text, re.S).group(1)
    install_demo, test_cmd = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert install_demo == "pip install -e . && harvester demo"
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_cmd in ci, f"{test_cmd!r} is not what .ci/run runs"


def test_readme_collector_config_is_the_tested_file():
    """The Collector config a reader copies is the one tests/test_collector_config.py checks."""
    shipped = (ROOT / "docs" / "collector.yaml").read_text().strip()
    blocks = re.findall(r"```yaml\n(.*?)```", README.read_text(), re.S)
    assert shipped in [b.strip() for b in blocks]


def test_every_command_has_help_text():
    ctx = click.Context(main)
    for path in _commands(main, []):
        cmd = main
        for name in path:
            cmd = cmd.get_command(ctx, name)
        assert (cmd.help or "").strip(), f"harvester {' '.join(path)} has no help text"


if __name__ == "__main__" and "--update" in sys.argv:
    text = README.read_text()
    head, rest = text.split(START, 1)
    README.write_text(head + START + "\n" + cli_reference() + "\n" + END + rest.split(END, 1)[1])
