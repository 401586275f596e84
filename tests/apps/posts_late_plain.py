"""An agent whose audit tool starts a plain ``threading.Thread`` (no ``daemon`` argument, fire and
forget, as production code writes it) that posts to the payments service (``LEAKY_URL``) half a second
later, after its case has ended. In production the thread is not a daemon (the agent runs on the main
thread), so the process waits for it and the post is made; ``harvester replay`` must wait for it too,
and say what its seal refused. ``LATE_THREAD`` says how else: ``daemon`` (the agent makes it a daemon:
cut off at exit, as in production), ``hung`` (the thread and the agent hang: ``--timeout`` must still
let the program end), ``nested`` (the thread starts the posting thread itself)."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from tests.apps.posts_late import post_later

HOW = "LATE_THREAD"


def _nested() -> None:
    threading.Thread(target=post_later).start()


def audit(order: str) -> None:
    """The agent's audit tool: its record is sent in the background."""
    how = os.environ.get(HOW, "")
    if how == "daemon":
        threading.Thread(target=post_later, daemon=True).start()
    elif how == "hung":
        threading.Thread(target=time.sleep, args=(3600,)).start()
    elif how == "nested":
        threading.Thread(target=_nested).start()
    else:
        threading.Thread(target=post_later).start()


def build() -> Any:
    def agent(prompt: str) -> str:
        audit("A1001")
        if os.environ.get(HOW) == "hung":
            time.sleep(3600)
        return "Refund queued."

    return agent
