"""Module attributes loaded on first use (PEP 562).

A package facade lists where each name lives; the submodule is imported when the name is first
read, so importing the package costs only what its caller uses (the production hook imports no
pydantic model, no readers it does not run).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy"]


def lazy(package: str, homes: Mapping[str, str | None], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A ``__getattr__`` for ``package``: ``homes`` maps a name to the submodule holding it (None: the
    name is a submodule itself). The value is kept in ``namespace``, so the next read is a plain one."""

    def __getattr__(name: str) -> Any:
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        home = homes[name]
        value = importlib.import_module(f"{package}.{name}" if home is None else f"{package}.{home}")
        if home is not None:
            value = getattr(value, name)
        namespace[name] = value
        return value

    return __getattr__
