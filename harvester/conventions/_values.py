"""Small readers of the values producers put in spans: text, JSON payloads, counts, messages, times.

Nothing here raises on odd input: a payload that does not parse is a string, a value of the wrong
type is ignored. At most one ``orjson.loads`` per payload: ingest runs this on every captured trace.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any
from urllib.parse import SplitResult, urlsplit

import orjson

__all__ = [
    "AI_ROLES",
    "Bare",
    "MISSING",
    "PLACEHOLDERS",
    "USER_ROLES",
    "content_text",
    "endpoint",
    "first_user",
    "iso",
    "last_ai",
    "last_user",
    "loads",
    "message",
    "messages_of",
    "placeholder",
    "short_type",
    "structured",
    "tool_call_indices",
    "text",
    "count",
    "to_int",
    "total",
]

MISSING: Any = object()
# Placeholders producers write when content capture is off.
PLACEHOLDERS = frozenset({"__REDACTED__", "<redacted>", "[REDACTED]", "REDACTED"})
USER_ROLES = frozenset({"user", "human"})
AI_ROLES = frozenset({"assistant", "ai", "model"})


class Bare:
    """A tool input that is not an object (a one-argument LangChain tool logs the value alone)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def placeholder(v: Any) -> bool:
    return type(v) is str and v in PLACEHOLDERS


def text(v: Any) -> str | None:
    """A string fit for a Run: bytes decoded, lone surrogates replaced (orjson refuses them later)."""
    if type(v) is str and v.isascii():  # almost every value: no copy to find out
        return v
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    if not isinstance(v, str):
        return None
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates, from a lenient decode upstream
        return "".join("\ufffd" if "\ud800" <= ch <= "\udfff" else ch for ch in v)
    return v


def loads(v: Any) -> Any:
    """Parse a JSON payload once; anything that is not valid JSON text comes back as ``MISSING``."""
    if isinstance(v, (str, bytes)) and v:
        try:
            return orjson.loads(v)
        except (orjson.JSONDecodeError, TypeError):
            return MISSING
    return MISSING


def structured(v: Any) -> tuple[Any, bool]:
    """A payload as its JSON object/array when it is one, else the string; plus "looked cut off"."""
    if isinstance(v, (dict, list)):
        return v, False
    s = text(v)
    if s is None:
        return (v if isinstance(v, (int, float, bool)) else None), False
    head = s.lstrip()[:1]
    if head == "{" or head == "[":
        parsed = loads(s)
        if parsed is MISSING:
            return s, True  # an object that does not close: the producer truncated it
        return parsed, False
    return s, False


def endpoint(address: Any, port: Any) -> str | None:
    """``host`` or ``host:port`` from a span's ``server.address`` and ``server.port`` (IPv6 in brackets),
    as ``allow_hosts`` says one: a URL gives its host (and port), a trailing dot and an international name
    are made plain; None when what remains is not a host (the run's provider then says its hosts)."""
    from ..config import host_entry, host_problem  # here: config's pydantic stays out of capture's import

    host = text(address)
    if not host:
        return None
    n = count(port)
    if "://" in host:
        url = urlsplit(host)
        host, n = url.hostname or "", n or _port_of(url)
    host = host_entry(host.strip().rstrip("."))
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    found = f"{host}:{n}" if n else host
    return found if host and host_problem(found) is None else None


def _port_of(url: SplitResult) -> int | None:
    try:
        return url.port
    except ValueError:
        return None


def count(v: Any) -> int | None:
    """A count (tokens): None unless it is one, within 0..2**53 (a float's exact range).

    None is "the span does not say", which is not zero: a cost read from zero tokens would be a lie.
    """
    if type(v) is int:
        n = v
    elif type(v) is float or type(v) is str:
        try:
            n = int(float(v))
        except (ValueError, OverflowError):
            return None
    else:
        return None
    return n if 0 <= n <= 1 << 53 else None


def to_int(v: Any) -> int:
    """A count where absence means 0 (an index)."""
    return count(v) or 0


def total(values: Iterable[int | None]) -> int | None:
    """The sum of the counts; None when any is unknown (a partial sum would under-price the run)."""
    found = list(values)
    return None if not found or any(v is None for v in found) else sum(v for v in found if v is not None)


def short_type(t: Any) -> str:
    s = text(t) or "Error"
    return s.rsplit(".", 1)[-1] or "Error"


def content_text(content: Any) -> str | None:
    """Message content as text: a string, or the text blocks of a content list."""
    if isinstance(content, str):
        return text(content)
    if isinstance(content, list):
        found = [
            b.get("text") if isinstance(b.get("text"), str) else b.get("content")
            for b in content
            if isinstance(b, dict) and b.get("type") in ("text", None)
        ]
        texts = [t for t in found if isinstance(t, str)]
        return text("".join(texts)) if texts else None
    return None


def message(m: Any) -> tuple[str, str | None]:
    """(role, text) of a message in any of the shapes producers serialize."""
    if not isinstance(m, dict):
        return "", None
    if m.get("lc") == 1 and isinstance(m.get("kwargs"), dict):  # LangChain dumpd()
        kw = m["kwargs"]
        ids = m.get("id")
        cls = ids[-1] if isinstance(ids, list) and ids else ""
        role = kw.get("type") or {"HumanMessage": "human", "AIMessage": "ai", "ToolMessage": "tool"}.get(cls, "")
        return str(role), content_text(kw.get("content"))
    if isinstance(m.get("data"), dict) and "type" in m:  # LangChain message_to_dict()
        return str(m["type"]), content_text(m["data"].get("content"))
    role = m.get("role", m.get("type", ""))
    parts = m.get("parts")
    if isinstance(parts, list):  # GenAI semconv
        found = [p.get("content") for p in parts if isinstance(p, dict) and p.get("type") == "text"]
        texts = [t for t in found if isinstance(t, str)]
        return str(role), (text("".join(texts)) if texts else None)
    return str(role), content_text(m.get("content"))


def messages_of(payload: Any) -> list[Any] | None:
    """The message list inside an agent input/output payload (LangChain state, callback wrappers)."""
    if isinstance(payload, list):
        return payload
    if not isinstance(payload, dict):
        return None
    for key in ("messages", "inputs", "outputs"):
        inner = payload.get(key)
        if isinstance(inner, list) and key == "messages":
            return inner
        if isinstance(inner, dict):
            found = messages_of(inner)
            if found is not None:
                return found
    return None


def first_user(messages: list[Any] | None) -> str | None:
    for m in messages or ():
        role, text = message(m)
        if role in USER_ROLES and text:
            return text
    return None


def last_user(messages: list[Any] | None) -> str | None:
    for m in reversed(messages or ()):
        role, text = message(m)
        if role in USER_ROLES and text:
            return text
    return None


def last_ai(messages: list[Any] | None) -> tuple[bool, str | None]:
    """(the conversation ends with a model message, its text)."""
    if not messages:
        return False, None
    role, text = message(messages[-1])
    return role in AI_ROLES, text


def iso(ns: int) -> str | None:
    global _iso_last
    if not ns or type(ns) is not int:
        return None
    sec = ns // 1_000_000_000
    last = _iso_last  # runs come in bursts: the same second formatted once (one tuple, thread-safe)
    if last[0] == sec:
        head = last[1]
    else:
        try:
            dt = datetime.fromtimestamp(sec, tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            return None
        head = dt.strftime("%Y-%m-%dT%H:%M:%S")
        _iso_last = (sec, head)
    return f"{head}.{(ns // 1_000_000) % 1000:03d}Z"


_iso_last: tuple[int | None, str] = (None, "")


def tool_call_indices(a: Mapping[str, Any]) -> dict[str, list[int]]:
    """Per ``<message>tool_calls.`` prefix of a span's flattened attributes, the indices of its calls in
    order, from one pass over the keys. They need not start at 0 nor follow on: OpenInference numbers an
    openai-agents assistant message's calls by their place among the turn's output items, so a second
    tool turn's only call is ``tool_calls.1``."""
    found: dict[str, set[int]] = {}
    for key in a:
        head, sep, rest = key.partition(".tool_calls.")
        if sep:
            index = rest.partition(".")[0]
            if index.isdigit():
                found.setdefault(head + sep, set()).add(int(index))
    return {prefix: sorted(indices) for prefix, indices in found.items()}
