"""The seal where C code reaches out itself (``_libc.c``); see that file for what it points where."""

from collections.abc import Callable
from typing import Any

SUPPORTED: int

def seal(
    check: Callable[[str, tuple[Any, ...]], None],
    suites: list[Any],
    resolved: dict[Any, str],
    socket_type: type,
    limit: int,
    /,
) -> int: ...
