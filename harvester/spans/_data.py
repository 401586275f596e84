"""``SpanData``: one in-memory form for a finished span. Plain slots and dicts: this is on the hot path."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["KIND_NAMES", "STATUS_NAMES", "SpanData"]

STATUS_NAMES = {0: "UNSET", 1: "OK", 2: "ERROR"}
KIND_NAMES = {0: "UNSPECIFIED", 1: "INTERNAL", 2: "SERVER", 3: "CLIENT", 4: "PRODUCER", 5: "CONSUMER"}


@dataclass(slots=True)
class SpanData:
    trace_id: str  # 32 lowercase hex
    span_id: str  # 16 lowercase hex
    parent_id: str | None
    name: str
    start_ns: int = 0
    end_ns: int = 0
    kind: str = "INTERNAL"
    status: str = "UNSET"  # UNSET | OK | ERROR
    status_message: str = ""
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)  # {"name", "time_ns", "attributes"}
    scope: str = ""
    resource: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {s: getattr(self, s) for s in self.__slots__}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SpanData:
        return cls(**d)
