"""A PostgreSQL trace store's connections: ``TraceStore("postgresql://user@host:port/db")``.

The reads, writes, retention and inbox settling are the SQLite store's own code (``_queries``,
``_settling``, ``_store``); only this connection layer differs. It gives them the same four things:
``_transact(work)`` (one write transaction), ``_query(sql, args)`` (rows streamed a page at a time),
``_read_with(read)`` and ``_lock_traces``, with their SQL turned into PostgreSQL's (``pg_sql``) and
psycopg's errors into ``StoreError``.

How several receivers writing one database keep a trace whole. SQLite serializes every write
transaction (``BEGIN IMMEDIATE``); PostgreSQL runs them side by side, so each write transaction first
takes a transaction-scoped advisory lock per trace it writes (``pg_advisory_xact_lock``, keyed by the
trace id's hash, all of them in one statement in key order, so two writers never deadlock). Writes of
*different* traces never wait for each other; writes of one trace are serialized exactly as SQLite
serializes them all. That is what the merges rely on: settling an inbox row checks, under the lock, that
the stored runs of its traces are the ones it normalized against (else it reads them again), and a
trace's parts are merged with what is stored of it. Each inbox row is settled once: its transaction
starts by deleting the row, and a second settler's delete waits for the first one's row lock and then
finds nothing. Upserts alone would not do: a merge replaces a trace's runs (a run first read as its own
may become a sub-agent), which needs the read and the write of one trace not to interleave.

Connections come from a small pool (``psycopg_pool``), made at the first use in each process (a forked
child makes its own and never touches its parent's sockets). A database that is down is a one-line
``StoreError`` naming host and port; the URL's password is never shown (``path`` leaves it out). While
the server restarts, the pool reconnects by itself; what it logs meanwhile is one line each (``_pglog``).
"""

from __future__ import annotations

import functools
import itertools
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from .. import seam
from ..errors import StoreError
from ._connection import default_path
from ._host import HostBase
from ._pglog import one_line_pool_logs
from ._pgschema import LOCK_CLASS, pg_check, pg_sql
from ._schema import SCHEMA_VERSION, mark_current

if TYPE_CHECKING:
    from ._settling import Normalize

__all__ = ["PgConnection", "is_postgres_url", "shown_store", "shown_url"]

CONNECT_TIMEOUT_S = 5
POOL_MIN, POOL_MAX = 1, 8  # an open listing holds one until it ends; a read inside it takes another
POOL_WAIT_S = 15.0  # for a free connection (or the database to come back) before a read or write fails
RETRIES = 8  # of a write transaction PostgreSQL aborted to break a deadlock or a serialization conflict
_SCHEMES = ("postgresql", "postgres")
_cursor_ids = itertools.count()
_orphans: list[Any] = []  # a parent's pools in a forked child: kept, never closed (their sockets are the parent's)
_Self = TypeVar("_Self", bound="PgConnection")


@functools.cache
def _own(psycopg: Any) -> Any:
    """psycopg's connection class, connecting as harvester's own work (``seam.own_work``): the seal sees
    libpq's connections in C too, and the store's are never the agent's (a shadow reads the store while
    the program is sealed, and the pool connects from threads of its own)."""

    class OwnConnection(psycopg.Connection):
        @classmethod
        def connect(cls, *args: Any, **kwargs: Any) -> Any:
            with seam.own_work():
                return super().connect(*args, **kwargs)

    return OwnConnection


def is_postgres_url(path: object) -> bool:
    return isinstance(path, str) and path.split("://", 1)[0].lower() in _SCHEMES and "://" in path


def shown_url(url: str) -> str:
    """The URL as users see it: ``postgresql://user@host:port/db``, without its password or query."""
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    user = parts.netloc.rsplit("@", 1)[0].split(":", 1)[0] if "@" in parts.netloc else ""
    return urlunsplit((parts.scheme, f"{user}@{host}" if user else host, parts.path, "", ""))


def shown_store(path: str) -> str:
    """A store path as it may be shown: a PostgreSQL URL without its password, a file path as it is."""
    return shown_url(path) if is_postgres_url(path) else path


def _address(url: str) -> str:
    parts = urlsplit(url)
    try:
        port = parts.port or 5432
    except ValueError:
        port = 5432
    return f"{parts.hostname or 'localhost'}:{port}"


def _password(url: str) -> str | None:
    try:
        return urlsplit(url).password
    except ValueError:
        return None


class PgConnection(HostBase):
    """The connections of a PostgreSQL store (the base of ``TraceStore`` for a ``postgresql://`` URL; its
    part of ``StoreHost``)."""

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        readonly: bool = False,
        normalize: Normalize | None = None,
        check: bool = True,
    ) -> None:
        """``check=False``: connect (and check the schema) at the first read or write, not here. The span
        processor opens its store so: an app's start must not wait on a database that is slow to answer
        (its first write then fails, counted, and the next one tries again)."""
        self._url = str(default_path() if path is None else path)
        self.path = shown_url(self._url)
        self.readonly = readonly
        self.on_wait: Callable[[str], None] | None = None  # SQLite's; PostgreSQL waits for its locks itself
        self.on_settle: Callable[[int, int], None] | None = None
        self.normalize = normalize
        self._lock = threading.RLock()
        self._has_inbox = True
        self._pool: Any = None
        self._pid = 0
        if hasattr(os, "register_at_fork"):  # another thread may hold the lock at fork time
            weak = weakref.ref(self)

            def _after_in_child() -> None:
                if (store := weak()) is not None:
                    store._lock = threading.RLock()

            os.register_at_fork(after_in_child=_after_in_child)
        try:
            import psycopg
        except ImportError:
            raise self._error("a PostgreSQL store needs psycopg: pip install 'harvester[postgres]'") from None
        self._pg = psycopg
        self._checked = False
        self._current = False  # the store says this schema version (known at the check)
        if check:
            self._check()

    def _check(self) -> None:
        psycopg = self._pg
        try:
            with _own(psycopg).connect(self._url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as conn:
                self._current = pg_check(conn, readonly=self.readonly, error=self._error) >= SCHEMA_VERSION
        except psycopg.OperationalError as exc:
            raise self._error(self._cannot_connect(exc)) from None
        except psycopg.Error as exc:
            raise self._error(f"not a usable trace store ({self._line(exc)})") from None
        except (ValueError, TypeError) as exc:  # psycopg.conninfo: a URL it cannot read
            raise self._error(f"not a PostgreSQL URL psycopg can read ({self._line(exc)})") from None
        self._checked = True

    # -- errors --------------------------------------------------------------------------------
    def _error(self, message: str) -> StoreError:
        return StoreError(f"{self.path}: {message}")

    def _line(self, exc: BaseException) -> str:
        """An error's first line, without the password in case a message ever echoes it."""
        text = " ".join(str(exc).split("\n", 1)[0].split()) or type(exc).__name__
        password = _password(self._url)
        return text.replace(password, "***") if password else text

    def _cannot_connect(self, exc: BaseException) -> str:
        reason = self._line(exc).rsplit("failed: ", 1)[-1]
        return f"cannot connect to PostgreSQL at {_address(self._url)} ({reason})"

    def _failed(self, exc: BaseException, doing: str) -> StoreError:
        from psycopg_pool import PoolTimeout

        if isinstance(exc, PoolTimeout):
            return self._error(
                f"cannot {doing}: no connection to PostgreSQL at {_address(self._url)} within {POOL_WAIT_S:g} s"
            )
        if isinstance(exc, self._pg.OperationalError) and "connection" in str(exc).lower():
            return self._error(f"cannot {doing}: {self._cannot_connect(exc)}")
        return self._error(f"cannot {doing} ({self._line(exc)})")

    # -- connections ---------------------------------------------------------------------------
    def _pooled(self) -> Any:
        """This process's pool, made at its first use (and again in a forked child)."""
        with self._lock:
            if self._pool is not None and self._pid == os.getpid():
                return self._pool
            if not self._checked:
                self._check()
            if self._pool is not None:
                _orphans.append(self._pool)
            from psycopg_pool import ConnectionPool

            one_line_pool_logs()  # its reconnect warnings: one line each, never a multi-line error
            self._pool = ConnectionPool(
                self._url,
                min_size=POOL_MIN,
                max_size=POOL_MAX,
                kwargs={"autocommit": True, "connect_timeout": CONNECT_TIMEOUT_S},
                timeout=POOL_WAIT_S,
                check=getattr(ConnectionPool, "check_connection", None),  # a connection the server dropped: another
                name="harvester-store",
                connection_class=_own(self._pg),
                open=False,
            )
            self._pool.open(wait=False)
            self._pid = os.getpid()
            return self._pool

    def close(self) -> None:
        with self._lock:
            if self._pool is not None and self._pid == os.getpid():
                self._pool.close()
            self._pool = None

    # -- what the shared reads and writes call -------------------------------------------------
    def _transact(self, work: Callable[[Any], int], *, settling: bool = False) -> int:
        """``work`` in one transaction; retried when PostgreSQL aborted it to break a deadlock."""
        if self.readonly and not settling:
            raise self._error("opened read-only")
        errors = self._pg.errors
        for attempt in range(RETRIES):
            try:
                with self._pooled().connection() as raw, raw.transaction():
                    conn = _Conn(raw)
                    if not self._current:  # rows it writes may be packed: an older store says so first
                        mark_current(conn)
                    n = work(conn)
                self._current = True
                return n
            except (errors.DeadlockDetected, errors.SerializationFailure) as exc:
                if attempt + 1 == RETRIES:
                    raise self._failed(exc, "write") from None
                time.sleep(0.01 * (attempt + 1))
            except self._pg.Error as exc:
                raise self._failed(exc, "write") from None
        raise self._error("cannot write")  # not reached

    def _read_with(self, read: Callable[[Any], Any], *, writer: bool = True) -> Any:
        try:
            with self._pooled().connection() as raw:
                return read(_Conn(raw))
        except self._pg.Error as exc:
            raise self._failed(exc, "read") from None

    def _query(self, sql: str, args: Sequence[Any] = ()) -> Iterator[tuple[Any, ...]]:
        """Rows through a server-side cursor, 256 at a time: a listing of every run is never all in memory."""
        try:
            with self._pooled().connection() as raw, raw.transaction():
                with raw.cursor(name=f"harvester_{next(_cursor_ids)}") as cur:
                    cur.itersize = 256
                    cur.execute(pg_sql(sql), tuple(args) or None)
                    yield from cur
        except self._pg.Error as exc:
            raise self._failed(exc, "read") from None

    @staticmethod
    def _lock_traces(conn: Any, trace_ids: Iterable[str]) -> None:
        """Serialize this transaction with every other writing one of these traces (see the module's docstring)."""
        ids = sorted(set(trace_ids))
        if ids:
            conn.execute(
                "SELECT pg_advisory_xact_lock(%s, h) FROM (SELECT DISTINCT hashtext(t) AS h "
                "FROM unnest(%s::text[]) AS t) AS k ORDER BY h",
                (LOCK_CLASS, ids),
                raw=True,
            )

    def _reclaim(self) -> None:
        """After a prune: PostgreSQL's autovacuum reuses the space of the deleted rows."""


class _Conn:
    """A psycopg connection spoken to in the shared SQL's spelling, as the store's code speaks to sqlite3."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw

    def execute(self, sql: str, args: Sequence[Any] = (), *, raw: bool = False) -> Any:
        return self.raw.execute(sql if raw else pg_sql(sql), _text_safe(args) or None)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> Any:
        cur = self.raw.cursor()
        cur.executemany(pg_sql(sql), [_text_safe(row) for row in rows])
        return cur


def _text_safe(row: Sequence[Any]) -> tuple[Any, ...]:
    """A row PostgreSQL's text columns take: a NUL (which SQLite stores) or a lone surrogate in an agent
    name or a failure line would otherwise fail the whole batch it came in."""
    return tuple(_text(v) if type(v) is str and ("\x00" in v or not v.isascii()) else v for v in row)


def _text(value: str) -> str:
    return value.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")
