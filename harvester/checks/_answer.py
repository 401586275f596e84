"""Answer checks: what the agent said (answered, contains, excludes, valid_json, abstained)."""

from __future__ import annotations

import re
from collections.abc import Iterable

import orjson

from ..model import Run
from ._base import Check, _fold, _names, register

__all__ = [
    "DEFAULT_ABSTAIN_MARKERS",
    "abstained",
    "answered",
    "contains",
    "excludes",
    "valid_json",
]

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


for _factory in (answered, contains, excludes, valid_json, abstained):
    register()(_factory)
