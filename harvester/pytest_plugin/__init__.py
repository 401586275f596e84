"""The pytest plugin (``pytest11`` entry point ``harvester``): accepted cases as pytest test items.

``pytest --harvester-agent myapp.agent:build`` collects every accepted case of the cases folder as one
item named by its id, its tags as markers, and replays it against a fresh agent when the item runs.
The plugin is loaded in EVERY pytest run of an environment harvester is installed in, so this module
only declares options, a fixture and hooks: the replay machinery (``_session``, ``_items``) is imported
when ``--harvester-agent`` is given or the fixture is used, and without the option nothing happens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from ..report import CaseResult

__all__ = ["PLUGIN", "harvester_case", "pytest_addoption", "pytest_configure"]

PLUGIN = "harvester-session"  # the per-run state, registered under this name when the option is given


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("harvester", "harvester: accepted regression cases as tests")
    group.addoption(
        "--harvester-agent",
        metavar="MODULE:ATTR",
        help="Factory that builds a fresh agent per case (as harvester replay --agent): collects every "
        "accepted case as a test.",
    )
    group.addoption(
        "--harvester-cases",
        metavar="DIR",
        help="Cases folder (default: $HARVESTER_CASES, the config's cases_dir, or ./cases).",
    )
    group.addoption(
        "--harvester-config", metavar="PATH", help="harvester.toml or pyproject.toml (default: the nearest one)."
    )
    group.addoption("--harvester-trials", type=int, default=1, metavar="N", help="Runs per case (default 1).")
    group.addoption(
        "--harvester-inject",
        action="store_true",
        help="Also collect a recovery variant (<id>@<mode>) per failure mode on each case's first tool.",
    )
    group.addoption(
        "--harvester-model",
        metavar="MODE",
        help="How the agent's model calls are answered (as harvester replay --model): live, recorded or "
        "recorded-then-live (default: the config's replay.model, else live).",
    )
    group.addoption("--harvester-timeout", type=float, default=60.0, metavar="S", help="Seconds per case.")
    group.addoption(
        "--harvester-baseline",
        metavar="BASE.json",
        help="A previous report: a case fails when it regressed against it (a case failing there too xfails).",
    )
    group.addoption("--harvester-report", metavar="PATH", help="Write every item's result as one report (JSON).")
    group.addoption(
        "--harvester-html",
        metavar="PATH",
        help="Write every item's result as the HTML report page (against --harvester-baseline when given).",
    )


def pytest_configure(config: pytest.Config) -> None:
    """With ``--harvester-agent``, the run's state (``_session.HarvesterSession``) joins as a plugin."""
    if not config.getoption("harvester_agent", None):
        return
    from ._session import HarvesterSession

    config.pluginmanager.register(HarvesterSession.from_config(config), PLUGIN)


@pytest.fixture
def harvester_case(request: pytest.FixtureRequest) -> Callable[..., CaseResult]:
    """``harvester_case("refund-policy")`` replays that case against the agent and returns its ``CaseResult``.

    The agent is ``--harvester-agent`` unless ``agent=`` names one (``"module:attr"`` or the factory);
    ``trials=`` and ``inject=`` a recovery mode (``"timeout"``...) are the other keywords.
    """
    from ._session import CaseRunner

    return CaseRunner.for_config(request.config)
