"""The redaction fast path: ``nothing_in`` a trace's values serialized, and ``CleanValues``.

Most runs hold no secret at all. Walking their values in Python costs more than everything else
capture does, so they are first serialized in one C call and scanned once: when the text holds no
rule's trigger, no card number (a card-shaped run of digits is checked as the walk checks it) and no
float big enough to be a card, nothing the walk could replace is there, and the walk is skipped.
Every rule needs one of those in the value it replaces (or, for a secret's key name, in the key), so
the scan can only send clean runs down the slow path, never a secret down the fast one.

``CleanValues`` holds the long strings the scan found clean, so that it need not scan them again. A
system prompt, tool definitions, a policy a tool returns, a conversation's history: they recur from
span to span and run to run, and scanning them is most of what the fast path costs. The strings are
held themselves and compared by equality, never by a hash of them, so no other string is ever let
through; no rule's match spans two values, so a value's verdict is its own. Bounded in characters: past
``MAX_CHARS`` it starts again.
"""

from __future__ import annotations

from typing import Any

from ._rules import ESCAPED, card_runs, clean_ascii, maybe_secret, no_card_in

__all__ = ["LONG", "MAX_CHARS", "CleanValues", "nothing_in"]

LONG = 256  # shorter values cost less to scan than to look up
MAX_CHARS = 4 << 20


class CleanValues:
    __slots__ = ("chars", "known")

    def __init__(self) -> None:
        self.known: set[str] = set()
        self.chars = 0

    def unknown(self, values: list[Any]) -> list[Any]:
        """``values`` less the long strings found clean before, and less repeats of a long string: each
        is scanned once."""
        known = self.known
        now: set[str] = set()
        out = []
        for v in values:
            if type(v) is str and len(v) >= LONG:
                if v in known or v in now:
                    continue
                now.add(v)
            out.append(v)
        return out

    def remember(self, values: list[Any]) -> None:
        """``values`` were scanned and found clean."""
        known = self.known
        for v in values:
            if type(v) is str and len(v) >= LONG and v not in known:
                if self.chars + len(v) > MAX_CHARS:
                    known.clear()
                    self.chars = 0
                known.add(v)
                self.chars += len(v)


def nothing_in(raw: bytes) -> bool:
    """Whether serialized values hold nothing any built-in rule could replace."""
    # A JSON payload in a value may hide a trigger behind an escape ("bob\u0040example.com"), which a
    # reader unescapes; a float big enough to be a card is written with an exponent.
    if ESCAPED.search(raw) is not None or (b"+" in raw and b"e+1" in raw):
        return False
    if raw.isascii():
        return clean_ascii(raw)
    return no_card_in(raw, card_runs(raw)) and not maybe_secret(raw.decode().lower())
