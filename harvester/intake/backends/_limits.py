"""``Limits``: how long an import may take and how much it may read; ``Pages``: one paged walk, ended.

A backend decides how many pages it hands out and how big each answer is; harvester must end either
way. A backend that pages forever (a new cursor on every page, or one it gave before) kept
``import`` and ``incident --from`` running with no output for thousands of requests, and an answer
of empty JSON objects expanded ~32x once parsed. So a pull has:

- an overall deadline (``deadline``, seconds for the whole pull, every request within it);
- a page cap (``max_pages``) per paged walk: one trace's pages, one listing's (a search, the
  experiments, Jaeger's services); a cursor seen before in the same walk ends it at once;
- a cap on each answer's bytes (``max_answer_bytes``), checked as it is read, and on the JSON values
  parsing it may build (``max_values``: one per 32 bytes of the cap), counted on the bytes before
  parsing: an empty object costs ~60 bytes in Python, so no answer under the caps takes more than a
  few hundred MB.

Each ends the pull with one ``BackendError`` naming the backend, the count and the fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import BackendError

if TYPE_CHECKING:
    from ._client import Client

__all__ = ["Limits", "Pages", "json_values"]

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)  # a JSON string, escapes and all
_STARTS = (b"{", b"[", b",", b":")  # each starts a value (or a member) parsing builds


@dataclass(frozen=True, slots=True)
class Limits:
    """``[tool.harvester.import]`` (docs/backends/index.md): the defaults a pull runs with."""

    deadline: float = 600.0  # seconds for the whole pull
    max_pages: int = 1000  # per trace and per listing
    max_answer_bytes: int = 64 << 20  # one answer; a large agent trace is a few MiB

    @property
    def max_values(self) -> int:
        """The JSON values (members, items) one answer may hold: one per 32 bytes of the cap."""
        return self.max_answer_bytes // 32

    @property
    def mib(self) -> str:
        return f"{self.max_answer_bytes / (1 << 20):g} MiB"


def json_values(raw: bytes | bytearray, bound: int) -> int:
    """How many values parsing ``raw`` builds, or more (never fewer): the openers, commas and colons
    outside strings. Counted on the bytes (fast); only when that passes ``bound`` are the strings cut
    out first, so a comma in a text does not count."""
    count = sum(raw.count(c) for c in _STARTS)
    if count <= bound:
        return count
    bare = _STRING.sub(b'""', raw)
    return sum(bare.count(c) for c in _STARTS)


class Pages:
    """One paged walk: ``turn(cursor)`` after each page whose answer names a next one."""

    def __init__(self, client: Client, cursor: str, what: str = "") -> None:
        """``cursor``: the field's name (``next_cursor``); ``what``: the trace it pages, if one."""
        self.client, self.cursor, self.what = client, cursor, what
        self.seen: set[str] = set()

    def turn(self, cursor: Any) -> None:
        client, limits = self.client, self.client.limits
        backend = client.target.backend
        if str(cursor) in self.seen:
            raise BackendError(f"{client.last}: answered a {self.cursor} it had given before (pages in a loop, "
                               f"after {len(self.seen) + 1} pages); is this {backend}?")  # fmt: skip
        self.seen.add(str(cursor))
        if len(self.seen) >= limits.max_pages:
            fix = "raise import.max_pages" if self.what else "narrow with --since or --limit, or raise import.max_pages"
            where = f" {self.what}" if self.what else ""
            raise BackendError(f"{client.target}{where} kept paging: {limits.max_pages:,} pages without an end "
                               f"(a {self.cursor} that never ends?): {fix}")  # fmt: skip
