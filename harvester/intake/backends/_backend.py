"""What a backend is: ``Backend``, what it declares about itself; ``BackendReader``, what its module
does; ``Target``, one backend at one address.

A backend's module holds everything said about it. Its ``BACKEND`` declaration gives the name (also
the URL scheme), the default port, what the URL's path names, the environment variables it reads and
what a trace saved from it looks like; the URL parser, the CLI's help, the ``--file`` messages and
the docs table all read those from the registry (``_registry``), so none of them names a backend.
Its functions read the backend: ``BackendReader`` is their contract, and mypy checks every module
in the registry against it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ...spans import SpanData

if TYPE_CHECKING:
    from ._client import Client

__all__ = ["Backend", "BackendReader", "Target"]

_VARIABLE = re.compile(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b")  # an environment variable's name


@dataclass(frozen=True, slots=True)
class Backend:
    name: str  # the URL scheme (phoenix://), and the backend's name in messages ("is this phoenix?")
    label: str  # its name in a sentence ("a Phoenix spans export")
    port: int  # where it listens unless the URL says
    credentials: str  # the environment variables ``headers()`` reads, as "set ..." in a 401's line
    export: str  # a trace saved from it ("a Phoenix spans export (...)"), for ``--file``'s messages
    scope: str | None = None  # what the URL's path names ("project"); None: a path is refused

    @property
    def url_form(self) -> str:
        """``phoenix://host:port[/project]``: the URL that names it, for help and messages."""
        return f"{self.name}://host:port" + (f"[/{self.scope}]" if self.scope else "")

    @property
    def variables(self) -> tuple[str, ...]:
        """The environment variables ``credentials`` names."""
        return tuple(_VARIABLE.findall(self.credentials))


@runtime_checkable
class BackendReader(Protocol):
    """A backend's module (``_phoenix``...): its declaration and four functions.

    - ``headers()``: the request headers its credential variables make (never logged; a value a
      header cannot carry is an ``InputError`` naming its variable);
    - ``fetch(client, trace_id)``: one whole trace, every page of it; ``NotFoundError`` when the
      backend does not hold it;
    - ``find(client, since_ns=, failed=, limit=)``: trace ids, newest first, filtered on the server
      where its API allows;
    - ``from_export(doc, file)``: the spans of one document of a saved file in the backend's form,
      ``None`` when the document is not of that form (no other backend's form may pass as its own).
    """

    @property
    def BACKEND(self) -> Backend: ...  # a module constant, read-only here

    def headers(self) -> dict[str, str]: ...

    def fetch(self, client: Client, trace_id: str) -> list[SpanData]: ...

    def find(self, client: Client, *, since_ns: int | None, failed: bool, limit: int) -> list[str]: ...

    def from_export(self, doc: Any, file: str) -> list[SpanData] | None: ...


@dataclass(frozen=True, slots=True)
class Target:
    backend: str  # a registered backend's name
    base_url: str  # http(s)://host:port, no trailing slash
    scope: str | None = None  # Phoenix project, MLflow experiment (id or name); None: the backend's default

    def __str__(self) -> str:
        return f"{self.backend} at {self.base_url}" + (f" ({self.scope})" if self.scope else "")
