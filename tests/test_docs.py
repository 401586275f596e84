"""The docs stay true: the CLI reference is the click help, the API page names every public name and
every error, the set-up commands are what CI runs, and every page is in the site's nav.

The CLI reference is made from the commands' help as the site builds (``mkdocs_hooks.py``).
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

import click
from click.testing import CliRunner

import harvester
from harvester import errors
from harvester.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import mkdocs_hooks

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
CLI_PAGE = DOCS / "cli.md"


def test_the_cli_reference_is_every_commands_help_made_as_the_site_builds():
    """docs/cli.md holds no copy that could go stale: the build's hook puts every command's help there."""
    page = CLI_PAGE.read_text()
    assert mkdocs_hooks.MARK in page and "```" not in page
    built = mkdocs_hooks.on_page_markdown(page, None, None, None)
    for path in mkdocs_hooks.commands(main, []):
        assert f"## `harvester {' '.join(path)}`" in built
        help_text = CliRunner().invoke(main, [*path, "--help"], terminal_width=100).output
        assert help_text.splitlines()[2].strip() in built  # the command's own first help line
    assert "phoenix://" in built and mkdocs_hooks.MARK not in built


def test_ci_runs_the_readme_test_command():
    text = README.read_text()
    block = re.search(r"## Set up\n+```bash\n(.*?)```", text, re.S).group(1)
    install_demo, test_cmd = [line.split("#")[0].strip() for line in block.strip().splitlines()]
    assert install_demo == "pip install -e . && harvester demo"
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_cmd in ci, f"{test_cmd!r} is not what .ci/run runs"


def test_the_collector_config_shown_is_the_tested_file():
    """The Collector config a reader copies is the one tests/test_collector_config.py checks."""
    shipped = (DOCS / "collector.yaml").read_text().strip()
    blocks = re.findall(r"```yaml\n(.*?)```", (DOCS / "collector.md").read_text(), re.S)
    assert shipped in [b.strip() for b in blocks]


def test_every_command_has_help_text():
    ctx = click.Context(main)
    for path in mkdocs_hooks.commands(main, []):
        cmd = main
        for name in path:
            cmd = cmd.get_command(ctx, name)
        assert (cmd.help or "").strip(), f"harvester {' '.join(path)} has no help text"


def _api_names() -> set[str]:
    return set(re.findall(r"^\| `([A-Za-z_]+)", (DOCS / "api.md").read_text(), re.M)) | set(
        re.findall(r"`, `([A-Za-z_]+)", (DOCS / "api.md").read_text())
    )


def test_the_api_page_names_every_public_name():
    assert set(harvester.__all__) <= _api_names(), set(harvester.__all__) - _api_names()


def test_the_api_page_lists_exactly_the_errors():
    classes = {
        name
        for name, obj in vars(errors).items()
        if inspect.isclass(obj) and issubclass(obj, Exception) and obj.__module__ == errors.__name__
    }
    table = (DOCS / "api.md").read_text().split("## Errors", 1)[1]
    assert set(re.findall(r"^\| `([A-Za-z]+)`", table, re.M)) == classes


_PACKAGES = (
    "adapters",
    "case",
    "demo",
    "checks",
    "cli",
    "conventions",
    "harvest",
    "intake",
    "model",
    "pytest_plugin",
    "redact",
    "replay",
    "report",
    "shadow",
    "spans",
    "store",
)


def _guide_path(token: str) -> Path:
    """A path the contributor guide names: from the repository's root, or inside the package."""
    first = token.split("/", 1)[0]
    if (ROOT / token).is_file():
        return ROOT / token  # a file beside mkdocs.yml
    return (
        ROOT / "harvester" / token if first in _PACKAGES or token.endswith(".py") and "/" not in token else ROOT / token
    )


def test_the_contributor_guide_names_files_and_protocols_that_exist():
    """Every file docs/contributing.md names exists (a ``<name>`` placeholder is a file to add), and every
    protocol it names is a class of the module it names beside it."""
    guide = (DOCS / "contributing.md").read_text()
    tokens = {t for t in re.findall(r"`([\w./-]+)`", guide) if "/" in t or t.endswith(".py")}
    missing = [t for t in sorted(tokens) if not _guide_path(t).exists() and not t.startswith("http")]
    assert not missing, f"docs/contributing.md names files that do not exist: {missing}"
    named = re.findall(r"`([A-Z]\w+)`\s+\((?:the protocol in\s+)?`([\w/]+)\.py`", guide)
    assert {name for name, _ in named} >= {"Reader", "Adapter", "Framework", "HarvestedCheck", "BackendReader"}
    for name, module in named:
        dotted = "harvester." + module.replace("/", ".")
        obj = getattr(__import__(dotted, fromlist=[name]), name, None)
        assert inspect.isclass(obj), f"docs/contributing.md: {name} is not a class of {dotted}"


def test_every_page_is_in_the_nav_and_every_link_resolves():
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = {p.name for p in DOCS.glob("*.md")}
    assert pages == set(re.findall(r":\s+([\w-]+\.md)$", nav, re.M))
    for page in [README, *DOCS.glob("*.md")]:
        for target in re.findall(r"\]\(([^)#:]+\.md)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / target).is_file(), f"{page.name} links to {target}"
