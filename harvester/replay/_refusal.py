"""What the seal refused, as a case reports it: each refusal, the call in flight it names, the check."""

from __future__ import annotations

from typing import NamedTuple

from opentelemetry import trace

from ..report import MAX_NO_FIXTURE_CALLS, CheckResult

__all__ = ["MAX_REFUSALS", "Refusal", "in_flight", "sealed_check"]

MAX_REFUSALS = 100  # kept per seal (all are counted)


class Refusal(NamedTuple):
    """One thing the seal refused: ``connect to`` a host or ``start`` of a command, and the call in flight."""

    seq: int
    what: str  # "connect to" | "start"
    target: str  # "api.stripe.com:443", "unix:/var/run/docker.sock", "curl -X POST ..."
    during: str | None  # the tool call (or span) in flight, when the context says
    why: str

    def summary(self) -> str:
        during = f" during {self.during}" if self.during else ""
        return f"{self.what} {self.target}{during}: {self.why}"


def in_flight() -> str | None:
    """The tool call (or failing that, the span) the refused code ran in: what the refusal names."""
    span = trace.get_current_span()
    attributes = getattr(span, "attributes", None) or {}
    for key in ("gen_ai.tool.name", "tool.name"):
        name = attributes.get(key)
        if isinstance(name, str) and name:
            return name
    name = getattr(span, "name", None)
    return f"span {name!r}" if isinstance(name, str) and name else None


def sealed_check(refusals: list[Refusal], total: int) -> CheckResult | None:
    """The failed ``sealed`` check naming what the seal refused in a case (None when it refused nothing);
    ``total`` counts every refusal, kept or not."""
    if not refusals:
        return None
    shown = "; ".join(r.summary() for r in refusals[:MAX_NO_FIXTURE_CALLS])
    more = f"; and {total - min(len(refusals), MAX_NO_FIXTURE_CALLS)} more" if total > MAX_NO_FIXTURE_CALLS else ""
    return CheckResult(name="sealed", passed=False, detail=f"refused {shown}{more}")
