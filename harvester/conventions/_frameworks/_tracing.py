"""Turning a framework's tracing on for a replay when nothing traces it yet, and off again after.

A replay reads the run from the framework's spans, as production does; an app whose factory module
does not instrument its framework (production instruments it in its entry point) would otherwise
be read from the executor's log alone. Only an instrumentor that is installed is used, and only
when neither it nor an alternative the app may use is already on.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["instrumented", "turn_on"]


def _instrumentor(module: str, name: str) -> Any:
    try:
        return getattr(importlib.import_module(module), name)()
    except (ImportError, AttributeError):
        return None


def instrumented(module: str, name: str) -> bool:
    """``module.name`` is installed and on (instrumentors are process-wide singletons)."""
    inst = _instrumentor(module, name)
    return inst is not None and bool(inst.is_instrumented_by_opentelemetry)


def turn_on(module: str, name: str, unless: Sequence[tuple[str, str]] = ()) -> Callable[[], None] | None:
    """Instrument with ``module.name`` (a ``BaseInstrumentor``) if it is installed and off, and none of
    ``unless`` is on; returns the undo, or None when nothing was turned on."""
    inst = _instrumentor(module, name)
    if inst is None or inst.is_instrumented_by_opentelemetry:
        return None
    if any(instrumented(m, n) for m, n in unless):
        return None
    inst.instrument()
    return inst.uninstrument
