"""An agent that answers as ``tests.builders.agents.GOOD`` does and, on its first run in the process
only, also tries to post to the payments service (``LEAKY_URL``), carrying on when that fails: a leak
that a rerun does not repeat. ``harvester replay --confirm`` must not call the case flaky for it."""

from __future__ import annotations

import itertools
from typing import Any

from tests.apps.starts_at_import import post
from tests.builders.agents import GOOD

_runs = itertools.count(1)


def build() -> Any:
    def agent(prompt: str) -> str:
        if next(_runs) == 1:
            try:
                post()
            except OSError:  # the seal's refusal is a PermissionError: the agent goes on as offline
                pass
        return GOOD(prompt)

    return agent
