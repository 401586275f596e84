"""``StoreHost``: what the halves of ``TraceStore`` need from the class they are mixed into.

``TraceStore`` is ``Queries`` (reads, retention) + ``Settling`` (the inbox) + a connection layer
(``Connection`` for SQLite, ``PgConnection`` for PostgreSQL), each in its own module. The halves call
each other and the connection through ``self``; this protocol names those calls and their types, so
the type checker checks every one of them, and checks each connection layer against it.

It is a base class for the type checker only (``HostBase``): at run time the halves are plain classes.
A ``Protocol`` in the method resolution order would come before the connection layer, whose methods
its empty ones would then hide, and would make every store an ABC.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:
    from ..spans import SpanData
    from ._codec import Row

__all__ = ["HostBase", "StoreHost"]

_T = TypeVar("_T")


class StoreHost(Protocol):
    """The store's attributes and the calls its halves make to each other (who provides each: below)."""

    # -- the connection layer (``Connection``, ``PgConnection``) --------------------------------
    path: str
    _has_inbox: bool

    def _transact(self, work: Callable[[Any], int], *, settling: bool = False) -> int: ...

    def _read_with(self, read: Callable[[Any], _T], *, writer: bool = True) -> _T: ...

    def _query(self, sql: str, args: Sequence[Any] = ()) -> Iterator[tuple[Any, ...]]: ...

    @staticmethod
    def _lock_traces(conn: Any, trace_ids: Iterable[str]) -> None: ...

    def _reclaim(self) -> None: ...

    # -- ``TraceStore`` ------------------------------------------------------------------------
    def _insert(self, conn: Any, rows: list[Row], replace_traces: Iterable[str]) -> int: ...

    # -- ``Settling``, for ``Queries`` ---------------------------------------------------------
    def _settled(self) -> None: ...

    def _stored(
        self, conn: Any, trace_ids: list[str], *, spans: bool = True
    ) -> tuple[dict[str, list[SpanData] | None], list[tuple[Any, ...]]]: ...


if TYPE_CHECKING:
    HostBase = StoreHost
else:
    HostBase = object
