"""What every reader needs to read ids and attribute values back: one spelling of each rule."""

from __future__ import annotations

from typing import Any

from ...errors import InputError

__all__ = ["PAYLOADS", "hex_trace_id", "is_hex", "padded_hex", "shown_id"]

# Keys whose string value is a payload (a tool's result may well be the text of a JSON list): a
# backend that stored it as JSON never gets it unpacked into a list attribute.
PAYLOADS = (".result", ".arguments", ".value", ".content", "messages", ".input", ".output", ".prompt", ".completion")


def is_hex(text: str, length: int) -> bool:
    return len(text) == length and all(c in "0123456789abcdef" for c in text)


def padded_hex(value: Any, length: int) -> str:
    """A hex id of ``length`` digits, zeros put back in front (Jaeger prints a 64-bit-high-zero trace id
    in 16); ``ValueError`` for anything that is not hex or is too long."""
    text = str(value).strip().lower()
    if not text or not is_hex(text.rjust(length, "0"), length):
        raise ValueError(f"bad id {value!r}")
    return text.rjust(length, "0")


def hex_trace_id(trace_id: str, backend: str) -> str:
    """A trace id a user (or a search) gave, stripped and lowercased, checked to be hex before it goes
    in a URL; ``InputError`` naming it otherwise (a ``../`` or a space in a path reaches elsewhere)."""
    text = trace_id.strip().lower()
    try:
        padded_hex(text, 32)
    except ValueError:
        raise InputError(f"{shown_id(trace_id)} is not a {backend} trace id (hex, up to 32 digits)") from None
    return text


def shown_id(trace_id: str) -> str:
    """An id to show in a message: quoted, escaped, cut short."""
    return repr(trace_id[:80]) + ("..." if len(trace_id) > 80 else "")
