"""One big OTLP/JSON document cut into slices as it is read: memory holds a slice, never the document.

A document is ``{"resourceSpans": [{"resource": ..., "scopeSpans": [{"scope": ..., "spans": [...]}]}]}``
(``instrumentationLibrarySpans`` in older exporters). ``slices`` walks that structure by hand and
takes every value in it (a resource, a scope, a span, any other member) with the standard library's
JSON scanner, which is C and gives the value's end; it keeps the text of each resource's and scope's
members and cuts every spans list into documents of at most ``limit`` spans, each with its resource
and scope, for the workers to parse as they parse any document.

Exporters write a resource before its scopes and a scope before its spans (the protobuf field order).
A document that does not (a resource or scope after the spans, or none) still reads right: that
element's spans are held until it ends. What the walk cannot follow (not objects and lists where OTLP
has them, invalid JSON, a byte that is not UTF-8) raises ``Unfollowable`` with the offset where it
stopped; the slices cut before it have been handed on.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["Unfollowable", "slices"]

_SPACE = re.compile(r"[ \t\n\r]*")
# Numbers are kept as their text: no int of 4,300 digits or more is refused, and nothing is converted.
_SCAN = json.JSONDecoder(parse_int=str, parse_float=str, parse_constant=str).raw_decode
_MARGIN = 8  # a value ending this close to the text read so far may go on ("1." of "1.5e-3")
_SCOPE_LISTS = ("scopeSpans", "instrumentationLibrarySpans")
_SCOPES = ("scope", "instrumentationLibrary")
MAX_VALUE_CHARS = 256 << 20  # a value still unread past this much text is not a value: invalid JSON
_PIECE = 4 << 20  # bytes of the first read decoded at a time


class Unfollowable(Exception):
    """The document is not one this walk can cut: ``args`` are why, and the character offset."""


class _Text:
    """The document's text from the value being read on (all before it is copied out or not wanted)."""

    def __init__(self, more: Callable[[], bytes], head: bytes) -> None:
        self._more = more
        self._head, self._at = memoryview(head), 0  # decoded a piece at a time, as what ``more`` reads
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self.text, self.i, self.base, self.ended = "", 0, 0, False

    def fill(self) -> bool:
        """More text after what is read (the text before the value being read dropped); False at the end."""
        if self.ended:
            return False
        if self.i:
            self.text, self.base, self.i = self.text[self.i :], self.base + self.i, 0
        if self._at < len(self._head):
            data: bytes | memoryview = self._head[self._at : self._at + _PIECE]
            self._at += len(data)
            if self._at == len(self._head):
                self._head = memoryview(b"")  # the caller's bytes are no longer ours to hold
        else:
            data = self._more()
        try:
            self.text += self._utf8.decode(data, final=not data)
        except UnicodeDecodeError:
            self.fail("a byte that is not UTF-8")
        self.ended = not data
        return True

    def fail(self, why: str) -> None:
        raise Unfollowable(why, self.base + self.i)

    def char(self) -> str:
        """The next character that is not white space, not taken ("" at the end)."""
        while True:
            self.i = _SPACE.match(self.text, self.i).end()  # type: ignore[union-attr]
            if self.i < len(self.text):
                return self.text[self.i]
            if not self.fill():
                return ""

    def take(self, char: str) -> None:
        if self.char() != char:
            self.fail(f"{char!r} expected")
        self.i += 1

    def value(self) -> tuple[Any, str]:
        """The value here, decoded, and its text. One that ends close to the end of the text read so far
        may go on (a number cut in two): the text grows until the value ends well before it."""
        self.char()
        while True:
            try:
                obj, end = _SCAN(self.text, self.i)
                if end + _MARGIN <= len(self.text) or self.ended:
                    break
            except json.JSONDecodeError:
                if len(self.text) - self.i > MAX_VALUE_CHARS or self.ended:
                    self.fail("invalid JSON")
            except RecursionError:
                self.fail("values nested too deep")
            self.fill()
        text = self.text[self.i : end]
        self.i = end
        return obj, text

    def members(self) -> Iterator[str]:
        """After an object's ``{``: each key, positioned at its value (the caller takes it)."""
        if self.char() == "}":
            self.i += 1
            return
        while True:
            key, _ = self.value()
            if not isinstance(key, str):
                self.fail("an object's key that is not a string")
            self.take(":")
            yield key
            if not self._another("}"):
                return

    def elements(self) -> Iterator[None]:
        """After a list's ``[``: once for each element, positioned at it (the caller takes it)."""
        if self.char() == "]":
            self.i += 1
            return
        while True:
            yield
            if not self._another("]"):
                return

    def _another(self, close: str) -> bool:
        """After a member or an element: past the ``,`` (True) or the ``close`` that ends them (False)."""
        after = self.char()
        self.i += 1
        if after == close:
            return False
        if after != ",":
            self.fail(f"',' or '{close}' expected")
        return True


def slices(more: Callable[[], bytes], buf: bytes, limit: int) -> Iterator[bytes]:
    """OTLP/JSON documents of at most ``limit`` spans each, cut from the document(s) whose first bytes are
    ``buf`` and whose rest ``more()`` reads (``b""`` at the end)."""
    t = _Text(more, buf)
    del buf  # held by the reader alone, and let go as it is read
    while t.char():
        t.take("{")
        for key in t.members():
            if key != "resourceSpans":
                t.value()
                continue
            t.take("[")
            for _ in t.elements():
                if t.char() != "{":  # null or another value: the workers count it skipped, as in any document
                    yield ('{"resourceSpans":[' + t.value()[1] + "]}").encode()
                    continue
                t.take("{")
                yield from _resource(t, limit)


def _member(key: str, text: str) -> str:
    return json.dumps(key) + ":" + text


def _resource(t: _Text, limit: int) -> Iterator[bytes]:
    members: list[str] = []
    held: list[tuple[str, list[str], list[str]]] = []  # scopes read before their resource
    known = False
    for key in t.members():
        if key not in _SCOPE_LISTS or t.char() != "[":  # a scopeSpans of null holds no spans, as read whole
            members.append(_member(key, t.value()[1]))
            known = known or key == "resource"
            continue
        t.take("[")
        for _ in t.elements():
            if t.char() != "{":  # null or another value: counted skipped by the workers
                yield ('{"resourceSpans":[{' + ",".join([*members, f'"{key}":[' + t.value()[1] + "]"]) + "}]}").encode()
                continue
            t.take("{")
            for scope, spans in _scope(t, limit, known):
                if known:
                    yield from _slices(members, key, scope, spans, limit)
                else:
                    held.append((key, scope, spans))
    for key, scope, spans in held:
        yield from _slices(members, key, scope, spans, limit)


def _scope(t: _Text, limit: int, early: bool) -> Iterator[tuple[list[str], list[str]]]:
    """A scope's spans in pieces of ``limit``: before the scope ends only when ``early`` and its scope
    member came first; each piece with the scope's members read by then."""
    members: list[str] = []
    spans: list[str] = []
    known = False
    for key in t.members():
        if key != "spans" or t.char() != "[":  # spans of null: none, as read whole
            members.append(_member(key, t.value()[1]))
            known = known or key in _SCOPES
            continue
        ready = early and known
        t.take("[")
        for _ in t.elements():
            spans.append(t.value()[1])  # not an object: the workers count it skipped, as in any document
            if ready and len(spans) >= limit:
                yield members, spans
                spans = []
    if spans:
        yield members, spans


def _slices(resource: list[str], key: str, scope: list[str], spans: list[str], limit: int) -> Iterator[bytes]:
    """Documents of ``limit`` spans or fewer (spans held until their resource or scope came are more)."""
    for at in range(0, len(spans), limit):
        inner = ",".join([*scope, '"spans":[' + ",".join(spans[at : at + limit]) + "]"])
        yield ('{"resourceSpans":[{' + ",".join([*resource, f'"{key}":[{{' + inner + "}]"]) + "}]}").encode()
