"""``READERS``: every backend harvester reads, by name; the one table the rest reads them from.

Adding a backend is adding its module (see ``_backend``) and its name here, imported and listed.
The order is the order the CLI's help and the docs list them in; which backend a saved file came
from does not depend on it (each ``from_export`` takes only its own backend's form: the conformance
test checks it).
"""

from __future__ import annotations

from . import _jaeger, _mlflow, _phoenix, _tempo
from ._backend import Backend, BackendReader

__all__ = ["BACKENDS", "READERS", "backend_of", "exports", "labels", "reader", "url_forms"]

# A list, not a tuple: mypy then names the module and the member that breaks the protocol.
_REGISTERED: list[BackendReader] = [_phoenix, _mlflow, _jaeger, _tempo]

READERS: dict[str, BackendReader] = {r.BACKEND.name: r for r in _REGISTERED}
BACKENDS: tuple[Backend, ...] = tuple(r.BACKEND for r in _REGISTERED)


def reader(name: str) -> BackendReader:
    """The reader of the backend called ``name`` (``KeyError`` for a name not registered)."""
    return READERS[name]


def backend_of(name: str) -> Backend | None:
    """The declaration of the backend called ``name``, or ``None``."""
    found = READERS.get(name)
    return found.BACKEND if found is not None else None


def url_forms() -> str:
    """``phoenix://host:port[/project], mlflow://host:port[/experiment], ...``, for help and messages."""
    return ", ".join(b.url_form for b in BACKENDS)


def labels() -> str:
    """``Phoenix, MLflow, Jaeger or Tempo``."""
    return _either([b.label for b in BACKENDS])


def exports() -> str:
    """What a trace saved from each backend looks like, in one sentence (``--file``'s messages)."""
    return _either([b.export for b in BACKENDS])


def _either(items: list[str]) -> str:
    return ", ".join(items[:-1]) + " or " + items[-1] if len(items) > 1 else "".join(items)
