"""Which failing runs are one failure: a cluster signature that survives ids, numbers and quoted values.

A harvest ``signature`` says "the same situation" (the same prompt, trajectory and kind): a failure
that hits a thousand different orders is a thousand situations. A cluster says "the same failure":

- the failure kind (``_kinds``) and the stop reason;
- the tool path: every call's tool name in order, a repeat of the call before it dropped (a loop of
  three and a loop of seven are one path);
- the failing tool (the first call that failed, else the first denied one) and its error text, or the
  run's own error when no call failed, with what varies between occurrences masked (``mask``).

``--similar`` then merges clusters that differ only in their error text when the two texts are near
duplicates: equal kind, stop, path and failing tool, and a Jaccard similarity of their masked texts'
word sets of at least ``SIMILAR`` (``similar``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..canonical import digest
from ..model import Run

__all__ = ["ERROR_MAX", "SIMILAR", "ClusterKey", "cluster_key", "mask", "similar"]

ERROR_MAX = 160  # characters of masked error text kept: the rest of a stack trace says nothing more
SIMILAR = 0.8  # the Jaccard similarity of two masked error texts' words above which --similar merges them
_MASKS = (
    (re.compile(r"\"[^\"\n]*\"|(?<![\w'])'[^'\n]*'(?![\w'])|`[^`\n]*`"), "<str>"),  # quoted values
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I), "<uuid>"),
    (re.compile(r"(?<![\w<])[+-]?\d+(?:[.,:]\d+)*(?![\w>])"), "<n>"),  # numbers, times, versions
    (re.compile(r"(?<![<\w])[\w.-]*\d[\w.-]*(?![\w>])"), "<id>"),  # order A1001, req_9f8e2, 5s
)
_WORDS = re.compile(r"<\w+>|\w+")


def mask(text: str | None) -> str | None:
    """``text`` with quoted values, UUIDs, numbers and ids (a word with a digit: A1001, req_9f8e2, 5s)
    replaced by ``<str>``, ``<uuid>``, ``<n>`` and ``<id>``; whitespace single, at most ``ERROR_MAX`` characters."""
    if not text:
        return None
    for pattern, token in _MASKS:
        text = pattern.sub(token, text)
    return " ".join(text.split())[:ERROR_MAX]


@dataclass(frozen=True, slots=True)
class ClusterKey:
    """What every run of one cluster shares."""

    kind: str | None
    stop: str
    path: tuple[str, ...]
    tool: str | None  # the failing tool, None when no call failed
    error: str | None  # its masked error text (or the run's own)

    @property
    def id(self) -> str:
        """A short stable id (``c`` and 8 hex digits): the same failure has it in every store, every day."""
        return "c" + digest([self.kind, self.stop, list(self.path), self.tool, self.error], length=8)

    def summary(self) -> str:
        """``tool_error, answered, kb_search > get_order, get_order: timeout: orders-db timeout after <id>``"""
        failing = f"{self.tool}: {self.error or 'failed'}" if self.tool else (self.error or "no error text")
        return f"{self.kind or 'failed'}, {self.stop}, {' > '.join(self.path) or 'no tools'}, {failing}"

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "stop": self.stop, "path": list(self.path), "tool": self.tool, "error": self.error}


def cluster_key(run: Run, kind: str | None) -> ClusterKey:
    """The cluster of a failing run whose failure kind is known (``_kinds.read_run``)."""
    path: list[str] = []
    for call in run.calls:
        if not path or path[-1] != call.name:
            path.append(call.name)
    failing = next((c for c in run.calls if c.status == "error"), None) or next(
        (c for c in run.calls if c.status == "blocked"), None
    )
    error = failing.error if failing is not None else run.error
    text = f"{error.type}: {error.message}" if error and error.message else error.type if error else None
    if failing is not None and failing.status == "blocked":
        text = f"blocked: {text}" if text else "blocked"
    return ClusterKey(kind, run.stop, tuple(path), failing.name if failing else None, mask(text))


def similar(a: ClusterKey, b: ClusterKey) -> bool:
    """Near duplicates (``--similar``): all but the error text equal, its words at least ``SIMILAR`` alike."""
    if (a.kind, a.stop, a.path, a.tool) != (b.kind, b.stop, b.path, b.tool):
        return False
    wa, wb = set(_WORDS.findall(a.error or "")), set(_WORDS.findall(b.error or ""))
    return not (wa | wb) or len(wa & wb) / len(wa | wb) >= SIMILAR
