"""Putting a guard around a framework method, once, where the class defines it.

A guard is installed on the class (never on an instance), so it sees every call whatever object or
path makes it, and it stays installed: outside a replay it asks ``seam.route()``, gets None and calls
the original. ``functools.wraps`` keeps ``__wrapped__``, so the frameworks' own signature reading
(``inspect.signature``, ``get_type_hints``) sees the original.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["GUARD", "defining", "guard", "guarded", "subclasses"]

GUARD = "__harvester_guard__"


def guarded(value: Any) -> bool:
    return bool(getattr(getattr(value, "__func__", value), GUARD, False))


def guard(owner: type, name: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> bool:
    """Replace the function ``owner`` itself defines as ``name`` by ``make(original)``; False if nothing to do.

    ``make`` gets the plain function (a staticmethod's function unwrapped) and returns the method to
    install, which receives ``self`` first.
    """
    raw = owner.__dict__.get(name)
    if raw is None or guarded(raw):
        return False
    method: Callable[..., Any]
    if isinstance(raw, staticmethod):
        func = raw.__func__
        method = functools.update_wrapper(make(lambda _self, *a, **kw: func(*a, **kw)), func)
        params = list(inspect.signature(func).parameters.values())
        if not params or params[0].name != "self":  # smolagents' @tool already shows forward with self
            params.insert(0, inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD))
        method.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    elif type(raw) is types.FunctionType:  # not ``inspect.isfunction``: a wrapt wrapper passes it, unbound
        method = functools.wraps(raw)(make(raw))
    elif callable(raw) and hasattr(raw, "__get__") and not isinstance(raw, (classmethod, property)):
        # a method wrapped in a callable descriptor (functools.lru_cache, a decorator class, an
        # instrumentor's wrapt wrapper, which must see its instance): bound per call
        method = make(lambda self, *a, **kw: raw.__get__(self, type(self))(*a, **kw))
        functools.update_wrapper(method, inspect.unwrap(raw))  # its name, annotations, signature
        method.__wrapped__ = raw  # type: ignore[attr-defined]
    else:  # a classmethod, a property, a C slot: not a tool body we know how to guard
        return False
    setattr(method, GUARD, True)
    setattr(owner, name, method)
    return True


def subclasses(cls: type) -> Iterator[type]:
    """``cls`` and every class below it, each once."""
    seen: set[type] = set()
    stack = [cls]
    while stack:
        c = stack.pop()
        if c in seen:
            continue
        seen.add(c)
        yield c
        stack.extend(c.__subclasses__())


def defining(cls: type, name: str) -> type | None:
    """The class in ``cls``'s MRO whose own ``__dict__`` holds ``name``."""
    return next((c for c in cls.__mro__ if name in c.__dict__), None)
