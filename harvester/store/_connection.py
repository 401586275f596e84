"""A trace store's connections: opening the file (checked), one writer and one reader connection,
write transactions retried while another process holds the lock, and fork safety.

WAL mode, so readers (``harvester traces list``) never block the capture writer, and several
processes (workers of one web app) can write to one file: a busy writer waits (busy_timeout) and
retries. Safe to share between threads (one connection, a lock). The connections are reopened in a
forked child, never shared with the parent.
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import StoreError
from ._host import HostBase
from ._schema import BUSY_TIMEOUT_MS, RETRIES, SQLITE_MAGIC, check, file_id, is_busy, mark_current

if TYPE_CHECKING:
    from ._settling import Normalize

__all__ = ["Connection", "DEFAULT_PATH", "ENV_PATH", "default_path", "store_file"]

DEFAULT_PATH = ".harvester/traces.db"
ENV_PATH = "HARVESTER_STORE"
FORK_WAIT_S = 1.0  # how long a fork waits for this process's write transaction to end
_Self = TypeVar("_Self", bound="Connection")


def default_path() -> str:
    return os.environ.get(ENV_PATH) or DEFAULT_PATH


_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def store_file(path: str) -> str:
    """The SQLite file a store path names, or a ``postgresql://`` URL as it is; any other URL is refused here
    rather than taken for a file name (a ``postgresql://...`` store used to become a SQLite file called
    ``postgresql:``). ``sqlite:///path`` (SQLAlchemy's spelling, ``sqlite:////abs`` for an absolute path)
    names the file."""
    if not _URL.match(path):
        return path
    scheme = path.split("://", 1)[0].lower()
    if scheme == "sqlite":
        rest = path.split("://", 1)[1]
        if rest.startswith("/") and len(rest) > 1:
            return rest[1:]
        raise StoreError(f"{path}: a SQLite store URL is sqlite:///relative.db or sqlite:////absolute.db")
    if scheme in ("postgresql", "postgres"):
        return path  # a PostgreSQL store (``_postgres``): ``TraceStore`` opens it
    raise StoreError(
        f"{path.split('://', 1)[0]}://...: unknown store URL scheme; the store is a SQLite file path, "
        "sqlite:///path or postgresql://user@host:port/database"
    )


class Connection(HostBase):
    """The store's file and its connections (the base of ``TraceStore``; its part of ``StoreHost``)."""

    def __init__(
        self, path: str | os.PathLike[str] | None = None, *, readonly: bool = False, normalize: Normalize | None = None
    ) -> None:
        self.path = store_file(str(path) if path is not None else default_path())
        # Opened (and reopened) by absolute path: an app that changes directory must not start a new store.
        self._abs = os.path.abspath(self.path)
        self.readonly = readonly
        # Called once per write that finds the file locked by another process and starts retrying
        # (up to minutes): a command line says it is waiting instead of looking hung.
        self.on_wait: Callable[[str], None] | None = None
        self._lock = threading.RLock()
        self._txn = threading.Lock()  # held while this connection may hold SQLite's write lock
        self._txn_held_for_fork = False
        # Called with (traces done, traces in all) while the inbox is normalized before a read.
        self.on_settle: Callable[[int, int], None] | None = None
        self._has_inbox = False
        self._conn: sqlite3.Connection | None = None
        self._pid = 0
        self._rconn: sqlite3.Connection | None = None  # reads (see _reader)
        self._rpid = 0
        self._file_id: tuple[int, int] | None = None
        self.normalize = normalize  # turns inbox traces into rows (``Settling``); None: the intake's
        self._connect()
        if hasattr(os, "register_at_fork"):
            weak = weakref.ref(self)

            def _before() -> None:
                if (store := weak()) is not None:
                    store._before_fork()

            def _after_in_parent() -> None:
                if (store := weak()) is not None and store._txn_held_for_fork:
                    store._txn_held_for_fork = False
                    store._txn.release()

            def _after_in_child() -> None:
                if (store := weak()) is not None:
                    store._lock = threading.RLock()  # another thread may have held it at fork time
                    store._txn = threading.Lock()
                    store._txn_held_for_fork = False

            os.register_at_fork(before=_before, after_in_parent=_after_in_parent, after_in_child=_after_in_child)

    def _before_fork(self) -> None:
        """Let a write transaction in progress (the capture worker's) end before the process forks.

        SQLite keeps its lock bookkeeping per process: a child forked while the parent's connection
        held the WAL write lock inherits "this process holds the write lock" from a connection it
        must never touch, and every write its own connection tries is then busy forever. A
        transaction lasts milliseconds; the wait is capped (``FORK_WAIT_S``) because the lock is
        also held while waiting for another process's write, and fork must not hang on that.
        """
        self._txn_held_for_fork = self._txn.acquire(timeout=FORK_WAIT_S)

    # -- opening -------------------------------------------------------------------------------
    def _error(self, message: str) -> StoreError:
        return StoreError(f"{self.path}: {message}")

    def _connect(self) -> sqlite3.Connection:
        if self._conn is not None and self._pid == os.getpid():
            return self._conn
        path = Path(self._abs)
        if path.is_dir():
            raise self._error("is a directory, not a trace store")
        exists = path.exists() and path.stat().st_size > 0
        if exists:
            try:
                with open(path, "rb") as f:
                    head = f.read(16)
            except OSError as exc:
                raise self._error(f"cannot read ({exc.strerror})") from None
            if head != SQLITE_MAGIC:
                raise self._error(
                    "not a harvester trace store (not an SQLite database); "
                    "pass another --store path or move the file away"
                )
        elif self.readonly:
            raise self._error("no trace store here yet; ingest traces first (harvester ingest FILE)")
        else:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise self._error(f"cannot create its folder ({exc.strerror})") from None
        try:
            conn = sqlite3.connect(
                self._abs, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise self._error(f"cannot open ({exc})") from None
        try:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            for attempt in range(RETRIES):  # another process may be creating the file right now
                try:
                    self._has_inbox = check(conn, readonly=self.readonly, error=self._error)
                    if not self.readonly:
                        conn.execute("PRAGMA journal_mode = WAL")
                        conn.execute("PRAGMA synchronous = NORMAL")
                    break
                except sqlite3.OperationalError as exc:
                    if attempt == RETRIES - 1 or not is_busy(exc):
                        raise
                    time.sleep(0.05 * (attempt + 1))
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise self._error(f"not a readable trace store ({exc})") from None
        except StoreError:
            conn.close()
            raise
        self._conn, self._pid = conn, os.getpid()
        self._file_id = file_id(self._abs)
        return conn

    def _same_file(self) -> bool:
        """False once the file at ``path`` was deleted or replaced (log rotation, a cleanup job): the open
        connection would go on writing into the old, unlinked file and every run would vanish."""
        return self._conn is None or file_id(self._abs) == self._file_id

    def close(self) -> None:
        with self._lock:
            if self._conn is not None and self._pid == os.getpid():
                self._conn.close()
            if self._rconn is not None and self._rpid == os.getpid():
                self._rconn.close()
            self._conn = self._rconn = None

    def _reader(self) -> sqlite3.Connection:
        """The connection reads stream from, apart from the one that writes.

        A read hands out its rows a page at a time, its statement pending in between. On the writing
        connection that would keep an old snapshot open under the next write: a write from another
        thread would then fail at once when another process had written meanwhile (SQLite's
        BUSY_SNAPSHOT, which no busy timeout waits out), and a write that went through would show
        through the listing. On its own connection a read sees one snapshot and blocks no write.
        """
        if self._rconn is not None and self._rpid == os.getpid():
            return self._rconn
        self._connect()  # the file's checks, and its schema when it is new
        try:
            conn = sqlite3.connect(
                self._abs, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise self._error(f"cannot open ({exc})") from None
        self._rconn, self._rpid = conn, os.getpid()
        return conn

    def _transact(self, work: Callable[[sqlite3.Connection], int], *, settling: bool = False) -> int:
        """``work`` in one write transaction, retried while another process holds the lock.

        ``settling``: normalizing the inbox is allowed on a store opened read-only, which only means
        "a read must not create a store"; the runs it writes are the reader's view of the file.
        """
        if self.readonly and not settling:
            raise self._error("opened read-only")
        with self._lock:
            if not self._same_file():
                self.close()  # reopen at the path: a new store if it is gone
            conn = self._connect()
            delay = 0.01
            for attempt in range(RETRIES):
                with self._txn:
                    try:
                        conn.execute("BEGIN IMMEDIATE")
                    except sqlite3.OperationalError as exc:
                        if not (attempt + 1 < RETRIES and is_busy(exc)):
                            raise self._error(f"cannot write ({exc})") from None
                    except sqlite3.DatabaseError as exc:
                        raise self._error(f"cannot write ({exc})") from None
                    else:
                        try:
                            if settling and self.readonly:  # a writing open migrated at check
                                mark_current(conn)
                            n = work(conn)
                            conn.execute("COMMIT")
                            return n
                        except sqlite3.Error as exc:
                            if conn.in_transaction:  # a full disk has SQLite roll back by itself
                                conn.execute("ROLLBACK")
                            raise self._error(f"cannot write ({exc})") from None
                        except BaseException:
                            if conn.in_transaction:
                                conn.execute("ROLLBACK")
                            raise
                if attempt == 0 and self.on_wait is not None:
                    self.on_wait(f"{self.path}: another process is writing to it; waiting (up to a few minutes)")
                time.sleep(delay)  # busy: another process is writing; retry, without the fork lock
                delay = min(delay * 2, 0.5)
            raise self._error("cannot write: the database stayed locked")

    def _read_with(self, read: Callable[[Any], Any], *, writer: bool = True) -> Any:
        """``read(connection)`` under the lock, on the writing connection or (``writer=False``) the reader's."""
        with self._lock:
            try:
                return read(self._connect() if writer else self._reader())
            except sqlite3.DatabaseError as exc:
                raise self._error(f"cannot read ({exc})") from None

    @staticmethod
    def _lock_traces(conn: sqlite3.Connection, trace_ids: Iterable[str]) -> None:
        """Nothing to do: ``BEGIN IMMEDIATE`` already serializes every write (PostgreSQL locks per trace)."""

    def _reclaim(self) -> None:
        """After a prune: give the freed pages back to the file system, when no other writer is busy."""
        with self._lock:
            try:
                self._connect().execute("PRAGMA incremental_vacuum")
                self._connect().execute("PRAGMA wal_checkpoint(TRUNCATE)")
            except sqlite3.OperationalError:
                pass  # another writer is busy: the space is reused, the file shrinks next time

    def _query(self, sql: str, args: Sequence[Any] = ()) -> Iterator[tuple[Any, ...]]:
        with self._lock:
            try:
                cur = self._reader().execute(sql, args)
            except sqlite3.DatabaseError as exc:
                raise self._error(f"cannot read ({exc})") from None
        while True:
            with self._lock:
                try:
                    rows = cur.fetchmany(256)
                except sqlite3.DatabaseError as exc:
                    raise self._error(f"cannot read ({exc})") from None
            if not rows:
                return
            yield from rows
