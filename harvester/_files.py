"""Writing the files harvester produces (reports, case files, the suite manifest, exports): one helper.

A path that can never be written (a directory, a path under a file) is refused before any work is
done; a write that fails is one ``OutputError`` naming the path; an atomic write goes through a
hidden sibling and a rename, so a reader (or a crash) never sees half a file and no temporary file
outlives a failure.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import OutputError

__all__ = ["check_output", "write_file"]


def check_output(path: str | Path) -> None:
    """Fail early (``OutputError``) on a path that can never be written: a directory, or under a file."""
    p = Path(path)
    if p.is_dir():
        raise OutputError("is a directory: give a file name (e.g. reports/run.json)", file=str(path))
    parent = p.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if parent.exists() and not parent.is_dir():
        raise OutputError(f"cannot write under {parent}: not a directory", file=str(path))


def write_file(path: str | Path, data: bytes, *, atomic: bool = False) -> Path:
    """Write ``data`` to ``path``, creating its folder; returns the path.

    ``atomic``: through ``.<name>.tmp`` and a rename. Without it the file is written in place
    (``/dev/stdout`` works).
    """
    p = path if isinstance(path, Path) else Path(path)
    tmp = p.with_name(f".{p.name}.tmp") if atomic else p
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(data)
        if atomic:
            os.replace(tmp, p)
    except OSError as exc:
        if atomic and tmp.is_file():
            tmp.unlink(missing_ok=True)
        check_output(path)  # a directory, or a path under a file: say which (checked only now: a harvest
        # writes thousands of case files, and three more stats each would cost it more than the writes)
        raise OutputError(f"cannot write ({exc.strerror or exc})", file=str(path)) from None
    return p
