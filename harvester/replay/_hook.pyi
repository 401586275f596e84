"""The seal's audit hook in C (``_hook.c``); see that file for what it decides without Python."""

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

def install(
    check: Callable[[str, tuple[Any, ...]], None],
    events: dict[str, int],
    context_var: ContextVar[Any] | None,
    seal_key: str,
    suites: list[Any],
    resolved: dict[Any, str],
    seal_type: type,
    families: frozenset[int],
    /,
) -> None: ...
def remembering(lookup: Callable[..., Any], resolved: dict[Any, str], limit: int, /) -> Callable[..., Any]: ...
def resolving(method: Callable[..., Any], lookup: Callable[[Any, Any], None], /) -> Callable[..., Any]: ...
