"""Shared test setup."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from harvester import seam


@pytest.fixture(autouse=True)
def _not_a_harness() -> Iterator[None]:
    """``harvester replay`` marks its process a replay harness until it exits; a test runs it in-process
    (CliRunner), so the mark is taken off again before the next test runs live tools."""
    yield
    seam.STATE.harness = False
    os.environ.pop(seam.ENV, None)


# The throwaway PostgreSQL server (``postgres_server``) and a database per test (``postgres_url``); the
# machine's Chromium (``browser``).
pytest_plugins = ["tests.builders.postgres", "tests.builders.browser"]

# What a test needs beyond Python, by the fixture that brings it: the test carries that marker, so that
# the fast loop can leave it out (``-m "not slow and not browser and not postgres and not servers"``).
# A test that asks for PostgreSQL only by a parameter (``store_url``) has the marker on that parameter.
NEEDS = {"browser": "browser", "postgres_server": "postgres", "phoenix": "servers", "mlflow_server": "servers"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for fixture in sorted(NEEDS.keys() & set(getattr(item, "fixturenames", ()))):
            item.add_marker(NEEDS[fixture])
