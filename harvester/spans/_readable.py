"""From the OpenTelemetry SDK: a ``ReadableSpan`` to ``SpanData``, on the capture worker."""

from __future__ import annotations

from typing import Any

from ._data import SpanData

__all__ = ["from_readable"]

_NOT_SDK: Any = object()
_resources: dict[int, tuple[Any, dict[str, Any]]] = {}  # id(Resource) -> (it, its attributes): one per provider


def from_readable(span: Any) -> SpanData:
    """Convert an SDK ``ReadableSpan``. Runs on the capture worker, never on the app's thread.

    Reads the span's private fields where they exist: the public properties wrap the attributes in
    a ``MappingProxyType`` over ``BoundedAttributes`` (a Python-level mapping, slow to iterate) and
    copy the events. A provider's ``Resource`` is shared by all its spans: converted once.
    """
    cls = type(span)
    fast = _PLAIN_CLASSES.get(cls)
    if fast is None:
        fast = _PLAIN_CLASSES[cls] = _reads_fields(cls)
    if fast:  # an SDK span: its properties only return its fields
        try:
            ctx, parent, status = span._context, span._parent, span._status
            scope, res = span._instrumentation_scope, span._resource
            name, kind, start, end = span._name, span._kind, span._start_time, span._end_time
            attrs, events = span._attributes, span._events
        except AttributeError:  # a subclass that never set them
            fast = _PLAIN_CLASSES[cls] = False
    if not fast:
        ctx, parent, status = span.context, span.parent, span.status
        scope, res = span.instrumentation_scope, span.resource
        name, kind, start, end = span.name, span.kind, span.start_time, span.end_time
        attrs = getattr(span, "_attributes", _NOT_SDK)
        if attrs is _NOT_SDK:
            attrs = span.attributes
        events = getattr(span, "_events", _NOT_SDK)
        if events is _NOT_SDK:
            events = span.events
    if res is None:
        resource: dict[str, Any] = {}
    else:
        cached = _resources.get(id(res))
        if cached is None or cached[0] is not res:
            if len(_resources) > 64:
                _resources.clear()
            cached = _resources[id(res)] = (res, _plain_attrs(res.attributes))
        resource = cached[1]
    global _last_trace
    tid = ctx.trace_id
    last = _last_trace  # one tuple, replaced whole: safe to share between threads
    if last[0] == tid:  # the spans of one trace arrive together: format its id once
        trace_hex = last[1]
    else:
        trace_hex = "%032x" % tid  # noqa: UP031 - %-format is the fastest hex here (hot path)
        _last_trace = (tid, trace_hex)
    return SpanData(
        trace_hex,
        "%016x" % ctx.span_id,  # noqa: UP031
        "%016x" % parent.span_id if parent is not None else None,  # noqa: UP031
        name,
        start or 0,
        end or 0,
        _KINDS.get(id(kind), "INTERNAL"),
        _KINDS.get(id(status.status_code), "UNSET") if status is not None else "UNSET",
        (status.description or "") if status is not None else "",
        _plain_attrs(attrs),
        [{"name": e.name, "time_ns": e.timestamp or 0, "attributes": _plain_attrs(e.attributes)} for e in events]
        if (events := getattr(events, "_dq", events))
        else [],  # a BoundedList's deque: its len() is C
        scope.name if scope is not None else "",
        resource,
    )


_last_trace: tuple[Any, str] = (None, "")
_FIELD_PROPERTIES = (
    "context",
    "parent",
    "status",
    "instrumentation_scope",
    "resource",
    "name",
    "kind",
    "start_time",
    "end_time",
)
_PLAIN_CLASSES: dict[type, bool] = {}


def _reads_fields(cls: type) -> bool:
    """True for the SDK's span classes, whose properties return the private fields unchanged."""
    try:
        from opentelemetry.sdk.trace import ReadableSpan
    except ImportError:  # pragma: no cover - the SDK is a dependency
        return False
    if not issubclass(cls, ReadableSpan):
        return False
    if not all(getattr(cls, p, None) is getattr(ReadableSpan, p) for p in _FIELD_PROPERTIES):
        return False
    return True


def _plain_attrs(attrs: Any) -> dict[str, Any]:
    """A plain dict of SDK attributes (sequences as lists, as OTLP/JSON reads them back)."""
    attrs = getattr(attrs, "_dict", attrs)  # BoundedAttributes keeps a plain dict (whose len() is C, not Python)
    if not attrs:
        return {}
    if type(attrs) is dict and tuple not in map(type, attrs.values()):  # array values are rare: looked for in C
        return attrs  # an ended span's attributes never change: shared, not copied
    out = dict(attrs)
    for k, v in out.items():
        if type(v) is tuple:
            out[k] = list(v)
    return out


def _enum_names() -> dict[int, str]:
    """The ids of SpanKind and StatusCode members -> their names: ``Enum.name`` is a slow descriptor and
    ``Enum.__hash__`` a Python function, and members are singletons, so their ids are their keys."""
    from opentelemetry.trace import SpanKind, StatusCode

    return {**{id(k): k.name for k in SpanKind}, **{id(c): c.name for c in StatusCode}}


_KINDS = _enum_names()
