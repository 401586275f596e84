"""What every reader needs to read ids and attribute values back: one spelling of each rule."""

from __future__ import annotations

from typing import Any

__all__ = ["PAYLOADS", "is_hex", "padded_hex"]

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
