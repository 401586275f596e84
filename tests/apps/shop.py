"""The support shop every app serves: its live tools (each counts its real runs) and the model's script.

``HARVESTER_TEST_VARIANT`` picks the script: ``baseline`` (the production behaviour: look up the
policy and the order, in parallel, then answer), ``mutating`` (also refunds the order), ``new_args``
(looks up another order than the recording did), ``refund`` (looks the order up, then refunds it),
``reorder`` (refunds first, then looks the order up), ``skipped`` (answers without looking the order up)
and ``no_model`` (no script: the model raises if it is called, as a recorded-model replay must never call it).
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections import Counter
from typing import Any

LIVE: Counter[str] = Counter()
INSTRUCTIONS = "You are the shop's support agent: answer from the policy and the order."
# The agent's code changed since production (a recorded-model replay must name it): "system" (its
# instructions), "schema" (kb_search's parameter renamed), "result" (how a loop writes a tool's result
# for the model). Unset: the code production ran.
CHANGE_ENV = "HARVESTER_TEST_CHANGE"
PROMPT = "Can I still return order A1001?"
ANSWER = "Yes: refunds are accepted within 30 days of delivery, and order A1001 was delivered 12 days ago."
VARIANT_ENV = "HARVESTER_TEST_VARIANT"
LEAK_ENV = "HARVESTER_TEST_LEAK_URL"  # kb_search also posts there when set: a side effect the seal refuses
VARIANTS = ("baseline", "mutating", "new_args", "refund", "reorder", "twice", "skipped", "no_model")
REFUNDED = "Refunded 40.00 on order A1001."
KB = {"refund policy": "Refunds are accepted within 30 days of delivery."}
ORDERS = {
    "A1001": {"order_id": "A1001", "status": "delivered", "days_since_delivery": 12, "total": 40.0},
    "A1002": {"order_id": "A1002", "status": "shipped", "days_since_delivery": 0, "total": 15.0},
}

_LOOKUPS = [("kb_search", {"query": "refund policy"}, "call_1"), ("get_order", {"order_id": "A1001"}, "call_2")]
_REFUND = ("issue_refund", {"order_id": "A1001", "amount": 40.0}, "call_3")
STEPS: dict[str, list[Any]] = {
    "baseline": [_LOOKUPS, ANSWER],
    "mutating": [_LOOKUPS, [_REFUND], ANSWER],
    "new_args": [[_LOOKUPS[0], ("get_order", {"order_id": "A1002"}, "call_2")], ANSWER],
    "refund": [[_LOOKUPS[1]], [_REFUND], REFUNDED],
    "reorder": [[_REFUND], [_LOOKUPS[1]], REFUNDED],
    "twice": [[_LOOKUPS[1]], [_REFUND], [(*_REFUND[:2], "call_4")], REFUNDED],  # the same refund again
    "skipped": [[_LOOKUPS[0]], ANSWER],
    "no_model": [],
}


def variant() -> str:
    return os.environ.get(VARIANT_ENV, "baseline")


def scenario() -> str:
    """The scripted models' scenario name for the current variant (each app registers ``STEPS`` under it)."""
    return f"shop-{variant()}"


def change() -> str:
    return os.environ.get(CHANGE_ENV, "")


def instructions() -> str:
    """The agent's instructions, as production had them unless the ``system`` change is on."""
    return INSTRUCTIONS + (" Always answer in one sentence." if change() == "system" else "")


def result_text(value: Any) -> str:
    """A tool's result as an own loop writes it into the model's next request: JSON (under the ``result``
    change, the JSON under a key)."""
    return json.dumps({"result": value} if change() == "result" else value)


def kb_search(query: str) -> str:
    """Search the support knowledge base and return the best matching article.

    Args:
        query: What to look for.
    """
    LIVE["kb_search"] += 1
    if url := os.environ.get(LEAK_ENV):
        try:
            urllib.request.urlopen(url, data=b"{}", timeout=5).close()
        except OSError:  # refused by the seal (``Sealed`` is a PermissionError): the search goes on
            pass
    return KB.get(query, "No article found.")


def get_order(order_id: str) -> dict:
    """Look up an order by its id.

    Args:
        order_id: The order id, like A1001.
    """
    LIVE["get_order"] += 1
    return ORDERS[order_id]


def issue_refund(order_id: str, amount: float) -> str:
    """Refund an amount on an order.

    Args:
        order_id: The order to refund.
        amount: How much to refund.
    """
    LIVE["issue_refund"] += 1
    return f"refunded {amount:.2f} on {order_id}"


def _kb_search_renamed(text: str) -> str:
    """Search the support knowledge base and return the best matching article.

    Args:
        text: What to look for.
    """
    return kb_search(text)


_kb_search_renamed.__name__ = _kb_search_renamed.__qualname__ = "kb_search"


def kb_search_function() -> Any:
    """``kb_search`` as the agent's code has it: its parameter renamed under the ``schema`` change."""
    return _kb_search_renamed if change() == "schema" else kb_search
