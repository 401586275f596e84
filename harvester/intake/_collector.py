"""Python's cyclic garbage collector, kept off what ingest builds.

Parsing a chunk builds a tree of dicts and lists without cycles, and its spans are held until their
segment is written: a collection while the tree grows finds nothing and costs a scan of all of it
(orjson then parses at a sixth of its speed), and every full collection afterwards walks the held
spans again. So ``paused`` turns collections off while a chunk is parsed, and ``Held`` moves what is
held out of the collector's sight (``gc.freeze``) until the segment is written, unless the caller
froze objects of its own, which are left as they are.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["Held", "paused"]


@contextmanager
def paused() -> Iterator[None]:
    """No collection inside the block (as it was after it)."""
    enabled = gc.isenabled()
    try:
        gc.disable()
        yield
    finally:
        if enabled:
            gc.enable()


class Held:
    """``hold()`` after each parse, ``release()`` once the segment is written."""

    __slots__ = ("_ours",)

    def __init__(self) -> None:
        self._ours = gc.get_freeze_count() == 0  # a caller's own freeze is not ours to undo

    def hold(self) -> None:
        if self._ours:
            gc.freeze()

    def release(self) -> None:
        if self._ours:
            gc.unfreeze()
