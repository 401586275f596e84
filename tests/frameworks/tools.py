"""The tools every framework driver exposes. Plain functions: frameworks read their signature and docstring."""

from __future__ import annotations

from collections import Counter

# Every time a tool body runs for real (production recordings do; a replay never must).
RAN: Counter[str] = Counter()

KB = {"refund policy": "Refunds are accepted within 30 days of delivery."}
ORDERS = {"A1001": {"order_id": "A1001", "status": "delivered", "days_since_delivery": 12, "total": 40.0}}


class OrdersDbTimeout(Exception):
    """The orders database did not answer in time."""


def kb_search(query: str) -> str:
    """Search the support knowledge base and return the best matching article."""
    RAN["kb_search"] += 1
    return KB.get(query, "No article found.")


def get_order(order_id: str) -> dict:
    """Look up an order by its id."""
    RAN["get_order"] += 1
    if order_id not in ORDERS:
        raise KeyError(f"no order {order_id}")
    return ORDERS[order_id]


def issue_refund(order_id: str, amount: float) -> str:
    """Refund an amount on an order. Needs human approval."""
    RAN["issue_refund"] += 1
    return f"refunded {amount:.2f} on {order_id}"


def check_inventory(sku: str) -> str:
    """Check stock for a product; the inventory service is down."""
    RAN["check_inventory"] += 1
    raise OrdersDbTimeout("orders-db timeout")
