"""What a check is, and the registry case files build checks through.

``Check`` names a callable ``Run -> (passed, detail)`` with its arguments, so reports and case files
can say exactly what ran; ``register`` makes a factory usable from case files and ``from_spec``
builds a check from its declarative form (``{"check": "max_steps", "n": 4}``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import CheckSpecError
from ..model import Run

__all__ = [
    "REGISTRY",
    "Check",
    "CheckFn",
    "from_spec",
    "label",
    "register",
    "run_check",
]

# A check answers (True, detail) passed, (False, detail) failed, or (None, detail) not checked: the run
# does not hold what the check reads (an unknown cost), which is neither a pass nor a failure.
CheckFn = Callable[[Run], "tuple[bool | None, str]"]


class Check:
    """A named check with its arguments, so reports and case files can say exactly what ran."""

    __slots__ = ("name", "args", "fn", "title")

    def __init__(self, name: str, fn: CheckFn, args: dict[str, Any] | None = None, title: str | None = None) -> None:
        self.name = name
        self.fn = fn
        self.args = args or {}
        self.title = title  # the label, when the args are too long to print (a reference trajectory)

    def __call__(self, run: Run) -> tuple[bool | None, str]:
        return self.fn(run)

    def label(self) -> str:
        if self.title is not None:
            return self.title
        if not self.args:
            return self.name
        parts = ", ".join(_short(v) for v in self.args.values())
        return f"{self.name}({parts})"

    def spec(self) -> dict[str, Any]:
        return {"check": self.name, **self.args}

    def __repr__(self) -> str:
        return f"<Check {self.label()}>"


def _short(v: Any) -> str:
    if isinstance(v, (list, tuple)):
        return ", ".join(map(str, v))
    return str(v)


def _fold(text: str | None) -> str:
    return (text or "").casefold().replace("\u2019", "'").replace("\u2018", "'")


def _names(names: Iterable[Any]) -> tuple[str, ...]:
    flat: list[str] = []
    for n in names:
        flat.extend(n if isinstance(n, (list, tuple)) else [n])
    return tuple(str(n) for n in flat)


# -- registry ---------------------------------------------------------------------------------
REGISTRY: dict[str, Callable[..., Check]] = {}


def register(name: str | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Make a check factory usable from case files: ``@checks.register("my_check")``.

    The factory may return a ``Check`` or a plain ``Run -> (bool, str)`` callable.
    """

    def deco(factory: Callable[..., Any]) -> Callable[..., Any]:
        REGISTRY[name or factory.__name__] = factory
        return factory

    return deco


# Spec keys that name a variadic argument (``{"check": "never_used", "tools": [...]}``).
_VARIADIC_KEYS = ("tools", "needles", "markers", "names")


@functools.lru_cache(maxsize=256)
def _signature(factory: Callable[..., Any]) -> inspect.Signature:
    """A factory's signature, worked out once: every case's checks are built through it at every load."""
    return inspect.signature(factory)


def from_spec(spec: Any, where: str = "check") -> Check:
    """Build a check from ``{"check": name, **args}``; errors name the spec and the bad field."""
    if not isinstance(spec, dict) or not isinstance(spec.get("check"), str):
        raise CheckSpecError(f"a check spec is an object with a string 'check' field, got {spec!r}", field=where)
    name = spec["check"]
    factory = REGISTRY.get(name)
    if factory is None:
        known = ", ".join(sorted(REGISTRY))
        raise CheckSpecError(f"unknown check {name!r} (known: {known})", field=where)
    kwargs = {k: v for k, v in spec.items() if k != "check"}
    args: list[Any] = []
    signature = _signature(factory)
    if any(p.kind is p.VAR_POSITIONAL for p in signature.parameters.values()):
        for key in _VARIADIC_KEYS:
            if key in kwargs:
                value = kwargs.pop(key)
                args = list(value) if isinstance(value, (list, tuple)) else [value]
                break
    try:
        signature.bind(*args, **kwargs)
        built = factory(*args, **kwargs)
    except (TypeError, ValueError) as exc:
        raise CheckSpecError(f"bad arguments for check {name!r}: {exc}", field=where) from None
    if isinstance(built, Check):
        return built
    if callable(built):
        return Check(name, built, {k: v for k, v in spec.items() if k != "check"})
    raise CheckSpecError(f"check {name!r} did not build a callable", field=where)


def run_check(check: Callable[[Run], Any], run: Run) -> tuple[bool | None, str]:
    """Evaluate one check; a check that raises fails (``check raised <Type>: <msg>``), never the suite.

    ``None`` is "not checked" (the run does not hold what the check reads) and stays ``None``.
    """
    try:
        result = check(run)
    except Exception as exc:
        return False, f"check raised {type(exc).__name__}: {exc}"
    if isinstance(result, tuple) and len(result) == 2:
        return (None if result[0] is None else bool(result[0])), str(result[1])
    if isinstance(result, bool):
        return result, "passed" if result else "failed"
    return False, f"check returned {type(result).__name__}, expected (bool, str)"


def label(check: Callable[..., Any]) -> str:
    return check.label() if isinstance(check, Check) else getattr(check, "__name__", type(check).__name__)
