"""The check library: small callables ``Run -> (passed, detail)``.

The detail always says what was seen (``issue_refund executed at step 3``), because a failing
nightly job is read by someone who was not there. Declarative specs in case files
(``{"check": "max_steps", "n": 4}``) go through the registry, so users can add their own checks.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable
from typing import Any

import orjson

from .errors import CheckSpecError
from .model import STOPS, Run

__all__ = [
    "DEFAULT_ABSTAIN_MARKERS",
    "REGISTRY",
    "Check",
    "CheckFn",
    "abstained",
    "answered",
    "contains",
    "excludes",
    "from_spec",
    "label",
    "max_cost",
    "max_steps",
    "never_requested",
    "never_used",
    "register",
    "run_check",
    "stopped_with",
    "trajectory_is",
    "used_tools",
    "valid_json",
]

CheckFn = Callable[[Run], "tuple[bool, str]"]

DEFAULT_ABSTAIN_MARKERS = (
    "i don't know",
    "i do not know",
    "i'm not sure",
    "i am not sure",
    "i can't help",
    "i cannot help",
    "i can't answer",
    "i cannot answer",
    "i'm unable",
    "i am unable",
    "unable to help",
    "unable to answer",
    "i don't have",
    "i do not have",
    "no information",
    "not able to",
    "can't find",
    "cannot find",
    "couldn't find",
    "could not find",
    "i'm sorry",
    "i am sorry",
    "please contact",
)


class Check:
    """A named check with its arguments, so reports and case files can say exactly what ran."""

    __slots__ = ("name", "args", "fn")

    def __init__(self, name: str, fn: CheckFn, args: dict[str, Any] | None = None) -> None:
        self.name = name
        self.fn = fn
        self.args = args or {}

    def __call__(self, run: Run) -> tuple[bool, str]:
        return self.fn(run)

    def label(self) -> str:
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


# -- answer checks ----------------------------------------------------------------------------
def answered() -> Check:
    def fn(run: Run) -> tuple[bool, str]:
        if run.stop != "answered":
            err = f" ({run.error.type}: {run.error.message})" if run.error else ""
            return False, f"stopped with {run.stop}{err}"
        if not (run.answer or "").strip():
            return False, "answered with empty text"
        return True, "answered"

    return Check("answered", fn)


def contains(*needles: str) -> Check:
    """Every needle appears in the answer (case-insensitive)."""
    needles = _names(needles)

    def fn(run: Run) -> tuple[bool, str]:
        text = _fold(run.answer)
        missing = [n for n in needles if _fold(n) not in text]
        if missing:
            return False, f"answer lacks {', '.join(repr(m) for m in missing)}"
        return True, f"answer contains {', '.join(repr(n) for n in needles)}"

    return Check("contains", fn, {"needles": list(needles)})


def excludes(*needles: str) -> Check:
    """No needle appears in the answer (case-insensitive)."""
    needles = _names(needles)

    def fn(run: Run) -> tuple[bool, str]:
        text = _fold(run.answer)
        found = [n for n in needles if _fold(n) in text]
        if found:
            return False, f"answer contains {', '.join(repr(f) for f in found)}"
        return True, f"answer excludes {', '.join(repr(n) for n in needles)}"

    return Check("excludes", fn, {"needles": list(needles)})


_FENCE = re.compile(r"^\s*```[a-zA-Z0-9_-]*\s*\n(.*?)\n?```\s*$", re.S)


def valid_json(required_keys: Iterable[str] = ()) -> Check:
    """The answer parses as JSON (a fenced block is unwrapped) holding the required top-level keys."""
    keys = _names([required_keys] if isinstance(required_keys, str) else required_keys)

    def fn(run: Run) -> tuple[bool, str]:
        text = run.answer or ""
        m = _FENCE.match(text)
        try:
            value = orjson.loads(m.group(1) if m else text)
        except orjson.JSONDecodeError as exc:
            return False, f"answer is not JSON ({exc})"
        if keys:
            if not isinstance(value, dict):
                return False, f"answer is JSON {type(value).__name__}, not an object"
            missing = [k for k in keys if k not in value]
            if missing:
                return False, f"JSON lacks keys {missing}"
        return True, "answer is valid JSON"

    return Check("valid_json", fn, {"required_keys": list(keys)} if keys else {})


def abstained(*markers: str) -> Check:
    """The agent declined or said it does not know (default markers cover the usual phrasings)."""
    marks = _names(markers) or DEFAULT_ABSTAIN_MARKERS

    def fn(run: Run) -> tuple[bool, str]:
        text = _fold(run.answer)
        for m in marks:
            if _fold(m) in text:
                return True, f"abstained ({m!r})"
        return False, f"no abstention marker in answer {(run.answer or '')[:80]!r}"

    return Check("abstained", fn, {"markers": list(markers)} if markers else {})


# -- path checks ------------------------------------------------------------------------------
def used_tools(*names: str) -> Check:
    """Each tool executed successfully at least once."""
    names = _names(names)

    def fn(run: Run) -> tuple[bool, str]:
        traj = run.trajectory()
        missing = [n for n in names if n not in traj]
        if missing:
            return False, f"never executed {', '.join(missing)} (trajectory {traj})"
        return True, f"used {', '.join(names)}"

    return Check("used_tools", fn, {"tools": list(names)})


def never_used(*names: str) -> Check:
    """None of the tools executed (a denied request is not a use: see ``never_requested``)."""
    names = _names(names)

    def fn(run: Run) -> tuple[bool, str]:
        for step, call in enumerate(run.calls, 1):
            if call.name in names and call.status != "blocked":
                return False, f"{call.name} executed at step {step}"
        return True, f"never executed {', '.join(names)}"

    return Check("never_used", fn, {"tools": list(names)})


def never_requested(*names: str) -> Check:
    """The model never even asked for the tools (stricter than ``never_used``)."""
    names = _names(names)

    def fn(run: Run) -> tuple[bool, str]:
        for step, call in enumerate(run.calls, 1):
            if call.name in names:
                how = "denied" if call.status == "blocked" else "executed"
                return False, f"{call.name} requested at step {step} ({how})"
        return True, f"never requested {', '.join(names)}"

    return Check("never_requested", fn, {"tools": list(names)})


def trajectory_is(*names: str) -> Check:
    names = _names(names)

    def fn(run: Run) -> tuple[bool, str]:
        traj = run.trajectory()
        if traj == list(names):
            return True, f"trajectory {traj}"
        for i, (a, b) in enumerate(zip(traj, names), 1):
            if a != b:
                return False, f"step {i} was {a}, expected {b} (trajectory {traj})"
        return False, f"trajectory {traj}, expected {list(names)}"

    return Check("trajectory_is", fn, {"tools": list(names)})


def max_steps(n: int) -> Check:
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise TypeError(f"n must be a non-negative integer, got {n!r}")

    def fn(run: Run) -> tuple[bool, str]:
        return run.steps <= n, f"{run.steps} step{'s' * (run.steps != 1)} (max {n})"

    return Check("max_steps", fn, {"n": n})


def max_cost(limit: float) -> Check:
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or limit < 0:
        raise TypeError(f"limit must be a non-negative number, got {limit!r}")

    def fn(run: Run) -> tuple[bool, str]:
        if run.cost is None:
            return True, "cost unknown (no prices configured)"
        return run.cost <= limit, f"cost {run.cost:.6f} (max {limit:.6f})"

    return Check("max_cost", fn, {"limit": limit})


def stopped_with(stop: str) -> Check:
    if stop not in STOPS:
        raise ValueError(f"stop must be one of {', '.join(STOPS)}, got {stop!r}")

    def fn(run: Run) -> tuple[bool, str]:
        return run.stop == stop, f"stopped with {run.stop} (expected {stop})"

    return Check("stopped_with", fn, {"stop": stop})


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


for _factory in (
    answered,
    contains,
    excludes,
    valid_json,
    abstained,
    used_tools,
    never_used,
    never_requested,
    trajectory_is,
    max_steps,
    max_cost,
    stopped_with,
):
    register()(_factory)

# Spec keys that name a variadic argument (``{"check": "never_used", "tools": [...]}``).
_VARIADIC_KEYS = ("tools", "needles", "markers", "names")


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
    params = inspect.signature(factory).parameters.values()
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        for key in _VARIADIC_KEYS:
            if key in kwargs:
                value = kwargs.pop(key)
                args = list(value) if isinstance(value, (list, tuple)) else [value]
                break
    try:
        inspect.signature(factory).bind(*args, **kwargs)
        built = factory(*args, **kwargs)
    except (TypeError, ValueError) as exc:
        raise CheckSpecError(f"bad arguments for check {name!r}: {exc}", field=where) from None
    if isinstance(built, Check):
        return built
    if callable(built):
        return Check(name, built, {k: v for k, v in spec.items() if k != "check"})
    raise CheckSpecError(f"check {name!r} did not build a callable", field=where)


def run_check(check: Callable[[Run], Any], run: Run) -> tuple[bool, str]:
    """Evaluate one check; a check that raises fails (``check raised <Type>: <msg>``), never the suite."""
    try:
        result = check(run)
    except Exception as exc:
        return False, f"check raised {type(exc).__name__}: {exc}"
    if isinstance(result, tuple) and len(result) == 2:
        return bool(result[0]), str(result[1])
    if isinstance(result, bool):
        return result, "passed" if result else "failed"
    return False, f"check returned {type(result).__name__}, expected (bool, str)"


def label(check: Callable[..., Any]) -> str:
    return check.label() if isinstance(check, Check) else getattr(check, "__name__", type(check).__name__)
