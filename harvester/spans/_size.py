"""What a span costs to hold, estimated cheaply: capture bounds the memory it holds in bytes, not only in spans.

Counting spans bounds nothing when one span can carry a 20 KB tool result and the next 20 bytes, so
the processor and the assemblers weigh every span they hold. The estimate runs on the app's thread
(``on_end``), so it must cost about as little as appending to a queue: it reads the lengths of the
attribute values (the strings are nearly all of a big span) and adds a fixed cost per span, per
attribute and per event, measured with tracemalloc on CPython 3.11: an SDK span waiting in the queue
holds about 2.8 KB besides its attribute values, the same span converted to ``SpanData`` and held in
an open trace about 0.8 KB. It never walks a value: an array counts its first element's length for
every element.
"""

from __future__ import annotations

from typing import Any

__all__ = ["held_size", "readable_size", "span_size"]

READABLE_BYTES = 2_800  # an SDK span: its context, status, resource link, BoundedAttributes, locks
SPAN_BYTES = 900  # a SpanData: its slots, hex ids and name, and the open trace's entries for it
ATTRIBUTE_BYTES = 80  # a dict entry and a small value
EVENT_BYTES = 500  # an event's dict, name and time


def _attributes_size(attrs: Any) -> int:
    if not attrs:
        return 0
    n = ATTRIBUTE_BYTES * len(attrs)
    for v in attrs.values():
        t = v.__class__
        if t is str:
            n += len(v)
        elif (t is tuple or t is list) and v:
            first = v[0]
            n += len(v) * ((len(first) if first.__class__ is str else 0) + 16)
        elif t is bytes:
            n += len(v)
    return n


def readable_size(span: Any) -> int:
    """The estimated bytes of an SDK ``ReadableSpan`` (or anything with ``attributes`` and ``events``).

    Never raises: it runs in ``on_end``, and a span it cannot read counts as a small one, left for the
    worker to count when it fails to convert it.
    """
    try:
        try:  # an SDK span: its plain fields, without the properties' copies and proxies
            attrs, events = span._attributes._dict, span._events._dq
        except AttributeError:
            attrs, events = span.attributes, span.events
        n = READABLE_BYTES + _attributes_size(attrs)
        for e in events:
            a = e.attributes
            n += EVENT_BYTES + _attributes_size(getattr(a, "_dict", a))
        return n
    except Exception:
        return READABLE_BYTES


def held_size(readable: int) -> int:
    """``span_size`` of a span from its ``readable_size``: the same attribute values, the other form's
    fixed cost (so the worker never weighs a span the app's thread weighed already)."""
    return readable - READABLE_BYTES + SPAN_BYTES


def span_size(span: Any) -> int:
    """The estimated bytes of a ``SpanData`` (the receiver's and ingest's form)."""
    n = SPAN_BYTES + _attributes_size(span.attributes)
    for e in span.events:
        n += EVENT_BYTES + _attributes_size(e.get("attributes"))
    return n
