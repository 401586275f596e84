"""``Tally``: a count the app's threads add to without a lock, read exactly.

The span processor counts the spans it drops on the app's thread, where it must never wait (see
``_processor``). ``next()`` on an ``itertools.count`` is one step under the GIL, so threads adding at
once never lose a step; but a count has no way to say its value other than taking a step. A read
therefore takes one too, and subtracts the steps the reads before it took. Reads are rare (``stats()``)
and hold a lock among themselves, so two of them never count each other's step; adds never take it.
"""

from __future__ import annotations

import itertools
import threading

__all__ = ["Tally"]


class Tally:
    """``add()`` from any thread, lock-free; ``value()``: how many adds happened before it."""

    def __init__(self) -> None:
        self._steps = itertools.count()
        self._reads = 0  # steps taken by reads, under the lock
        self._lock = threading.Lock()

    def add(self) -> None:
        next(self._steps)

    def value(self) -> int:
        with self._lock:
            n = next(self._steps) - self._reads
            self._reads += 1
        return n

    def after_fork(self) -> None:
        """In a forked child: another thread of the parent may have held the lock at the fork."""
        self._lock = threading.Lock()
