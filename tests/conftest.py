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


# The throwaway PostgreSQL server (``postgres_server``) and a database per test (``postgres_url``).
pytest_plugins = ["tests.builders.postgres"]
