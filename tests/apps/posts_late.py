"""An app whose agent answers at once and leaves a thread behind that posts to the payments service
(``LEAKY_URL``) a moment later, after its case, and the replay, have ended: the ``harvester`` program
(sealed until it exits) refuses it, and must say so rather than end on a passing verdict."""

from __future__ import annotations

import threading
import time
from typing import Any

from tests.apps.starts_at_import import post


def post_later() -> None:
    """Half a second from now, post to the payments service (a refusal is the seal's to report)."""
    time.sleep(0.5)
    try:
        post()
    except OSError:
        pass


def build() -> Any:
    def agent(prompt: str) -> str:
        # not a daemon (one started in the replay's trial thread would be one): the process waits for it
        threading.Thread(target=post_later, name="audit-later", daemon=False).start()
        return "Refund queued."

    return agent
