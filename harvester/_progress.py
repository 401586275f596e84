"""How the library reports progress: a callback, never a bar of its own.

Every long operation (``harvest``, ``ingest_files``, ``replay``, ``TraceStore.on_settle``) takes one
``Progress``: it is called as ``progress(done, total)`` while the work advances, with ``total`` None
when it is not known in advance. Drawing is the caller's business (the CLI draws click bars on
stderr), so the library writes nothing to a terminal.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Progress"]

Progress = Callable[[int, int | None], None]
