"""Canonical JSON and the argument hash.

This is the ONE encoding used wherever two JSON values must compare equal: fixture keys, replay
matching, redaction pseudonyms and content hashes. Keeping it in one function is what makes a
fixture recorded in production match the call a replay makes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import orjson

__all__ = [
    "MAX_DEPTH",
    "ListDigest",
    "args_hash",
    "canonical_bytes",
    "canonical_json",
    "json_value",
    "digest",
    "drop_paths",
    "fixture_key",
    "leaves",
    "split_path",
]

_OPTS = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY


def _normalize(value: Any) -> Any:
    """Make equal values encode equally: integral floats become ints, tuples/sets become lists."""
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 2**53:
            return int(value)
        return value
    if isinstance(value, dict):
        return {str(k): _normalize(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normalize(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_normalize(v) for v in value), key=lambda v: orjson.dumps(v, option=_OPTS, default=str))
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value


def canonical_bytes(value: Any) -> bytes:
    """Sorted keys, integral floats as ints, UTF-8; unknown objects by ``str()``. Total: never raises.

    What orjson refuses (ints of 64 bits and more, lone surrogates, nesting past its depth) takes a
    slower encoding that is as deterministic: those values hash and compare like any other.
    """
    try:
        return orjson.dumps(_normalize(value), option=_OPTS, default=str)
    except (TypeError, ValueError, RecursionError):  # orjson.JSONEncodeError is a TypeError
        return _fallback_bytes(value)


MAX_DEPTH = 200
_TOO_DEEP = "<nested too deep>"


def _safe(value: Any, depth: int = 0) -> Any:
    """``_normalize`` for values orjson refuses: string keys, bounded depth, no value left unencodable."""
    if depth > MAX_DEPTH:
        return _TOO_DEEP
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) < 2**53 else value
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {str(k): _safe(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_safe(v, depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_safe(v, depth + 1) for v in value), key=repr)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    try:
        return str(value)
    except Exception:
        return f"<{type(value).__name__}>"


def _fallback_bytes(value: Any) -> bytes:
    try:
        return json.dumps(
            _safe(value), sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=True
        ).encode("ascii")
    except (TypeError, ValueError, RecursionError):
        return json.dumps(f"<{type(value).__name__}>").encode("ascii")


def canonical_json(value: Any) -> str:
    return canonical_bytes(value).decode("utf-8")


def json_value(value: Any) -> Any:
    """A string holding JSON (tool call arguments as models and spans write them) read as that value;
    anything else, and a string that is not JSON, as it is."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


_SHA256: list[Any] = []  # hashlib.sha256, once imported: loading OpenSSL costs the hook's import milliseconds


def _sha256() -> Any:
    if not _SHA256:
        import hashlib

        _SHA256.append(hashlib.sha256)
    return _SHA256[0]


def digest(value: Any, length: int = 16) -> str:
    """First ``length`` hex digits of sha256 over the canonical encoding."""
    return _sha256()(canonical_bytes(value)).hexdigest()[:length]


class ListDigest:
    """``digest`` of a list fed one item at a time (a suite's cases as they are read), without holding it.

    ``hexdigest()`` is None when an item takes the slower encoding (orjson refuses it, or it nests too
    deep to sit in a list): the caller digests the whole list then, which encodes it that way.
    """

    def __init__(self) -> None:
        self._sha = _sha256()()
        self._sha.update(b"[")
        self._first = True
        self._exact = True

    def add(self, value: Any) -> None:
        try:  # the item as it encodes inside a list, one level deeper
            item = orjson.dumps([_normalize(value)], option=_OPTS, default=str)[1:-1]
        except (TypeError, ValueError, RecursionError):
            self._exact = False
            return
        self._sha.update(item if self._first else b"," + item)
        self._first = False

    def hexdigest(self, length: int = 16) -> str | None:
        if not self._exact:
            return None
        sha = self._sha.copy()
        sha.update(b"]")
        return str(sha.hexdigest()[:length])


def leaves(value: Any, root: str = "", prefix: str = "") -> dict[str, str]:
    """Dotted path (``items.0.sku``, the syntax of ``ignore_args``) -> canonical JSON of each leaf: the
    unit in which two calls' args agree or differ. A scalar (or empty) value is one leaf, at ``root``."""
    if isinstance(value, dict) and value:
        out: dict[str, str] = {}
        for k, v in value.items():
            out.update(leaves(v, root, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(value, list) and value:
        out = {}
        for i, v in enumerate(value):
            out.update(leaves(v, root, f"{prefix}.{i}" if prefix else str(i)))
        return out
    return {prefix or root: canonical_json(value)}


def split_path(path: str) -> list[str]:
    return [p for p in path.split(".") if p != ""]


def drop_paths(value: Any, paths: Iterable[str]) -> Any:
    """A copy of ``value`` without the dotted ``paths`` (``filters.since``; ``*`` matches any key or index)."""
    result = value
    for path in paths:
        result = _drop(result, split_path(path))
    return result


def _drop(value: Any, parts: list[str]) -> Any:
    if not parts:
        return value
    head, rest = parts[0], parts[1:]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if head == "*" or str(k) == head:
                if rest:
                    out[k] = _drop(v, rest)
            else:
                out[k] = v
        return out
    if isinstance(value, (list, tuple)):
        out_list = []
        for i, v in enumerate(value):
            if head == "*" or head == str(i):
                if rest:
                    out_list.append(_drop(v, rest))
            else:
                out_list.append(v)
        return out_list
    return value


def args_hash(args: Any, ignore: Iterable[str] = ()) -> str:
    """16 hex digits identifying a tool's arguments: key order never matters, every value does."""
    return digest(drop_paths(args, ignore) if ignore else args)


def fixture_key(tool: str, args: Any, ignore: Iterable[str] = ()) -> str:
    return f"{tool}:{args_hash(args, ignore)}"
