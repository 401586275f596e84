"""Reading and writing the files harvester owns (reports, case files, the suite manifest, the config).

Writes: a path that can never be written (a directory, a path under a file) is refused; a write that
fails is one ``OutputError`` naming the path. A file harvester owns (a case file, ``suite.json``, a
report) is written atomically, never in place: the bytes go to a temporary name of our own, created
exclusively (``O_EXCL``, ``O_NOFOLLOW``) in the target's folder, then ``os.replace`` puts it in place.
So a reader or a crash never sees half a file, no temporary file outlives a failure, and a symlink
planted at the temporary name or at the target is never followed: the target's link is replaced,
what it pointed to is left alone.

Reads: only a regular file (a symlink to one is followed), at most a size limit. A device such as
``/dev/zero`` would be read without end and a FIFO would block forever; both are refused in one line.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from .errors import InputError, OutputError

__all__ = ["MAX_READ_BYTES", "check_output", "read_file", "shown_path", "write_file"]

MAX_READ_BYTES = 64 * 1024 * 1024  # the default limit of ``read_file``: far above any real case or config
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_OWN_DESCRIPTORS = ("/proc/self/fd/", "/proc/thread-self/fd/", "/dev/fd/")
_OPEN = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)  # a FIFO opens without a writer


def shown_path(path: Path) -> str:
    """A path as the user would type it: relative to the working directory when it is under it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


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


def write_file(path: str | Path, data: bytes | Iterable[bytes], *, atomic: bool = False) -> Path:
    """Write ``data`` (bytes, or an iterable of them, written as they come) to ``path``, creating its
    folder; returns the path. An error raised by the iterable leaves no file of ours behind when atomic.

    ``atomic``: through a fresh temporary sibling and a rename (see the module docstring), except to a
    link to this process's own output (``/dev/stdout``). Without it the file is written in place
    (for an output path a user names, which may be a pipe).
    """
    p = path if isinstance(path, Path) else Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        if atomic and not _in_place(p):
            _replace(p, data)
        else:
            with open(p, "wb") as fh:
                _write(fh, data)
    except OSError as exc:
        check_output(path)  # a directory, or a path under a file: say which (checked only now: a harvest
        # writes thousands of case files, and three more stats each would cost it more than the writes)
        raise OutputError(f"cannot write ({exc.strerror or exc})", file=str(path)) from None
    return p


def _in_place(p: Path) -> bool:
    """A link to this process's own descriptor (``/dev/stdout`` -> ``/proc/self/fd/1``): written where it
    points, as asked; a rename would replace the link (as root, ``/dev/stdout`` itself). Any other link
    is replaced, whatever it points to."""
    link = str(p)
    for _ in range(8):  # the link chain, not its end: the end of /proc/self/fd/1 may be a regular file
        if not os.path.islink(link):
            return False
        target = os.readlink(link)
        if target.startswith(_OWN_DESCRIPTORS):
            return True
        link = os.path.join(os.path.dirname(link), target)
    return False


def _write(fh: IO[bytes], data: bytes | Iterable[bytes]) -> None:
    for part in (data,) if isinstance(data, (bytes, bytearray, memoryview)) else data:
        fh.write(part)


def _replace(p: Path, data: bytes | Iterable[bytes]) -> None:
    tmp = p.with_name(f".{p.name}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, _CREATE, 0o666)
    try:
        with os.fdopen(fd, "wb") as fh:
            _write(fh, data)
        os.replace(tmp, p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_file(path: str | Path, *, limit: int = MAX_READ_BYTES, error: type[InputError] = InputError) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes; anything else is one ``error`` naming it."""
    file = str(path)
    try:
        fd = os.open(path, _OPEN)
    except OSError as exc:
        raise error(f"cannot read ({exc.strerror or exc})", file=file) from None
    with os.fdopen(fd, "rb") as fh:
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise error("not a regular file (a device, pipe or socket is never read)", file=file)
            if info.st_size > limit:
                raise error(f"{info.st_size} bytes, over the limit of {limit} bytes", file=file)
            # Asked for its size (+1), not the limit: a read of ``limit`` bytes allocates that much first.
            data = fh.read(info.st_size + 1)
            if len(data) > info.st_size:  # a file growing while it is read stops at the limit too
                data += fh.read(limit + 1 - len(data))
        except OSError as exc:
            raise error(f"cannot read ({exc.strerror or exc})", file=file) from None
    if len(data) > limit:
        raise error(f"over the limit of {limit} bytes", file=file)
    return data
