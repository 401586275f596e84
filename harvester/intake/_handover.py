"""``Handovers``: the requests taking spans out of the receiver's open traces into the store's hands.

The spool deletes a segment once none of its traces is open and all taken out of the open traces is
stored. A request's spans can push a trace out early (over the bounds): between leaving the open
traces and reaching the store process the trace is in neither, so the spool waits for the requests
doing so at the moment it looked (``settled``) before its barrier through the store.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["Handovers"]


class Handovers:
    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._active: set[int] = set()
        self._seq = 0

    @contextmanager
    def handing(self) -> Iterator[None]:
        with self._changed:
            self._seq += 1
            mine = self._seq
            self._active.add(mine)
        try:
            yield
        finally:
            with self._changed:
                self._active.discard(mine)
                self._changed.notify_all()

    def settled(self) -> None:
        """Return once every hand-over under way now has ended (later ones are not waited for)."""
        with self._changed:
            now = set(self._active)
            self._changed.wait_for(lambda: not (now & self._active))
