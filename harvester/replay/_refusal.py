"""What the seal refused, as a case reports it: each refusal, the call in flight it names, the check."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections import Counter
from typing import Any, NamedTuple

from opentelemetry import context as otel_context
from opentelemetry import trace

from .. import seam
from ..report import MAX_NO_FIXTURE_CALLS, CheckResult

__all__ = ["MAX_REFUSALS", "Refusal", "in_flight", "new_log", "open_tools", "remove_log", "sealed_check", "tool_name"]

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


# The tool spans open in the traces being replayed, by span id: a span made inside one (a model client's
# request in a tool body) names the tool its parent is (filled by the replay's span collector).
open_tools: dict[int, str] = {}


def tool_name(attributes: Any) -> str | None:
    """The tool a span's attributes name (GenAI's ``gen_ai.tool.name``, OpenInference's ``tool.name``)."""
    for key in ("gen_ai.tool.name", "tool.name"):
        name = (attributes or {}).get(key)
        if isinstance(name, str) and name:
            return name
    return None


def in_flight() -> str | None:
    """The tool call (or failing that, the span) the refused code ran in: what the refusal names. The
    current span's tool; else the sandbox tool an adapter runs; else the tool span the current span was
    made in; else the current span."""
    ctx = otel_context.get_current()
    span = trace.get_current_span(ctx)
    name = tool_name(getattr(span, "attributes", None)) or seam.running_tool_now(ctx)
    if name is None and open_tools:
        parent = getattr(span, "parent", None)
        name = open_tools.get(parent.span_id) if parent is not None else None
    if name is not None:
        return name
    said = getattr(span, "name", None)
    return f"span {said!r}" if isinstance(said, str) and said else None


def sealed_check(refusals: list[Refusal], total: int) -> CheckResult | None:
    """The failed ``sealed`` check naming what the seal refused in a case (None when it refused nothing);
    ``total`` counts every refusal, kept or not."""
    if not refusals:
        return None
    # the same refusal again (a client's retries, a lookup per address family): once, in the order first made
    shown = list(Counter(r.summary() for r in refusals).items())[:MAX_NO_FIXTURE_CALLS]
    said = "; ".join(f"{text} ({n} times)" if n > 1 else text for text, n in shown)
    left = total - sum(n for _, n in shown)
    more = f"; and {left} more" if left > 0 else ""
    return CheckResult(name="sealed", passed=False, detail=f"refused {said}{more}")


def new_log() -> str:
    """The file the replay's child processes append their refusals to: in a folder of its own that only
    its owner may list (0711), which anyone may append to but only its owner read (0622). A child the
    agent starts as another user (``subprocess.run(..., user="nobody")``, dropping privileges) reports
    too; another user who does not know the folder's random name finds nothing to read or write."""
    folder = tempfile.mkdtemp(prefix="harvester-seal-")
    os.chmod(folder, 0o711)
    path = os.path.join(folder, "refusals.jsonl")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o622)  # whatever the umask
    finally:
        os.close(fd)
    return path


def remove_log(path: str) -> None:
    """Remove the log and its folder (a child appending later finds it gone, and does not make it again)."""
    with contextlib.suppress(OSError):
        os.unlink(path)
    with contextlib.suppress(OSError):
        os.rmdir(os.path.dirname(path))
