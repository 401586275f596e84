"""Two weeks of production traffic with known failure families, for triage and harvest by cluster.

Each family's runs vary where real ones do (order ids, numbers, quoted values, prompts), so only a
signature that masks them finds one cluster per family:

- ``orders_timeout``: get_order times out, "after <n>ms for order A<id>", both weeks;
- ``refund_denied`` and ``kb_down``: two tools failing (issue_refund's permission error, kb_search's
  outage), both weeks;
- ``parse_error``: a new failure, only in the second (most recent) week, a run-level exception.

The rest answer fine, or stop deferred (stored as failed, not a failure).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from datetime import datetime, timezone

from harvester.model import ErrorInfo, Run, ToolCall

__all__ = ["FAMILIES", "NEW_FAMILY", "traffic"]

FAMILIES = ("orders_timeout", "refund_denied", "kb_down", "parse_error")
NEW_FAMILY = "parse_error"
DAY = 86400.0


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _calls(family: str, rng: random.Random, order: str) -> tuple[list[ToolCall], str, ErrorInfo | None]:
    kb = ToolCall(name="kb_search", args={"query": f"policy {rng.randrange(99)}"}, result="Returns within 30 days.")
    get = ToolCall(name="get_order", args={"order_id": order}, result={"order_id": order, "days": rng.randrange(60)})
    if family == "orders_timeout":
        err = ErrorInfo(
            type="timeout", message=f"orders-db timeout after {rng.randrange(900, 5000)}ms for order {order}"
        )
        return [kb, ToolCall(name="get_order", args={"order_id": order}, status="error", error=err)], "answered", None
    if family == "refund_denied":
        err = ErrorInfo(type="permission", message=f"user 'u{rng.randrange(9999)}' may not refund order {order}")
        refund = ToolCall(name="issue_refund", args={"order_id": order}, status="error", error=err)
        return [kb, get, refund], "answered", None
    if family == "kb_down":
        err = ErrorInfo(
            type="unavailable", message=f"index kb-{rng.randrange(40)} unavailable (shard {rng.randrange(8)})"
        )
        return [ToolCall(name="kb_search", args={"query": "refund"}, status="error", error=err)], "answered", None
    if family == "parse_error":
        err = ErrorInfo(
            type="ValueError", message=f"could not parse amount '{rng.randrange(10, 999)}.{rng.randrange(99)}'"
        )
        return [kb, get], "error", err
    if family == "deferred":
        return [kb, get, ToolCall(name="issue_refund", args={"order_id": order}, status="awaiting")], "deferred", None
    return [kb, get], "answered", None


def traffic(n: int, *, seed: int = 11, now: float | None = None, failing: float = 0.25) -> Iterator[Run]:
    """``n`` runs spread over the 14 days before ``now``, newest last; ``failing`` of them fail."""
    rng = random.Random(seed)
    end = (now or time.time()) - 60
    for i in range(n):
        ts = end - 14 * DAY * (n - i) / n
        recent = ts >= end - 7 * DAY
        roll = rng.random()
        families = [f for f in FAMILIES if recent or f != NEW_FAMILY]
        family = (
            families[int(roll / failing * len(families))]
            if roll < failing
            else "deferred"
            if roll < failing + 0.02
            else "ok"
        )
        order = f"A{rng.randrange(1000, 99999)}"
        calls, stop, error = _calls(family, rng, order)
        yield Run(
            trace_id=f"{i:032x}",
            run_id=f"{i:016x}",
            agent="support",
            model="gpt-4.1-mini",
            prompt=f"{rng.choice(['Refund', 'Where is', 'Cancel', 'Return'])} order {order} please",
            answer=None if error else f"About order {order}: done.",
            stop=stop,
            error=error,
            calls=calls,
            started_at=_iso(ts),
        )
