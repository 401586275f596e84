"""The trace store: one SQLite file of normalized runs and the raw spans they were read from.

WAL mode so readers (``harvester traces list``) never block the capture writer, and several
processes (workers of one web app) can write to one file: a busy writer waits (busy_timeout) and
retries. Each ``add_many`` is one transaction, so a crash loses at most the batch in flight.

The file announces itself in a ``harvester_meta`` table. A file that is not SQLite, an SQLite
database with other tables and no marker, or one written by a newer harvester is refused with a
``StoreError`` naming the file before anything is written to it.

The capture processor may store a finished trace's (redacted) spans in the ``inbox`` instead of
normalizing them on the production worker: reading the trace's runs costs more CPU than everything
else capture does. The first read of the store (``traces list``, ``harvest``, any read method)
normalizes the inbox into runs, the same way ingest does (``settle``), so readers never see it.

Also here: OTLP/JSON export (``export_otlp``), which only reads stored spans. Import
(``ingest_files``) is ``harvester.ingest``: it runs the capture pipeline, which sits above the store.
"""

from __future__ import annotations

import logging
import math
import os
import sqlite3
import threading
import time
import weakref
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import orjson

from .conventions import run_data_from_spans, subtree
from .errors import NotFoundError, StoreError
from .model import Run, data_failed, data_with_derived
from .redact import Redactor
from .spans import SpanData, to_otlp

log = logging.getLogger(__name__)

DEFAULT_PATH = ".harvester/traces.db"
ENV_PATH = "HARVESTER_STORE"
SCHEMA = "harvester.store"
SCHEMA_VERSION = 2  # 2: the inbox
_SQLITE_MAGIC = b"SQLite format 3\x00"
_BUSY_TIMEOUT_MS = 10_000
_RETRIES = 20
_FORK_WAIT_S = 1.0  # how long a fork waits for this process's write transaction to end
# A run's row (its Run JSON and raw spans) is typically 5-50 KB and a captured batch in the inbox a
# few MB: on 4 KB pages a row spills into a chain of overflow pages. 64 KB pages hold several rows
# each; measured with checkpoints included, writing costs a third less CPU than on 16 KB pages.
_PAGE_SIZE = 65536
_SETTLE_TRIES = 3  # optimistic settles of one inbox row before it is settled inside one transaction


class _Raced(Exception):
    """The stored runs of a trace being settled changed meanwhile: read them again."""


_DDL = """
CREATE TABLE harvester_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE runs (
    id INTEGER PRIMARY KEY,
    trace_id TEXT NOT NULL,
    run_id TEXT NOT NULL,
    agent TEXT,
    started_at TEXT,
    ts REAL NOT NULL,            -- start time (unix seconds), or the time it was stored
    stop TEXT NOT NULL,
    failed INTEGER NOT NULL,
    failure TEXT,                -- one line: why the run counts as failed
    size INTEGER NOT NULL,       -- bytes of run + spans, for retention by size
    run BLOB NOT NULL,           -- Run JSON
    spans BLOB,                  -- JSON list of SpanData dicts
    UNIQUE (trace_id, run_id)
);
CREATE INDEX runs_ts ON runs (ts);
CREATE INDEX runs_agent ON runs (agent, ts);
CREATE INDEX runs_failed ON runs (failed, ts);
CREATE INDEX runs_stop ON runs (stop);
CREATE TABLE inbox (           -- one capture batch per row: one insert, whatever the batch holds
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused: a reader deletes the batch it read, not a newer one
    received REAL NOT NULL,
    redact INTEGER NOT NULL,     -- 1: its runs get the built-in redaction when normalized
    count INTEGER NOT NULL,      -- traces in the batch
    pieces INTEGER NOT NULL,     -- of them, pieces of a trace written in parts: settled in order
    traces BLOB NOT NULL         -- JSON list of traces in their spans_blob form, already redacted
);
"""
_INBOX_DDL = _DDL[_DDL.index("CREATE TABLE inbox"):]


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    return "locked" in str(exc) or "busy" in str(exc)


def _file_id(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def default_path() -> str:
    return os.environ.get(ENV_PATH) or DEFAULT_PATH


def _dumps(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:
        # Lone surrogates (bytes decoded with surrogateescape) are not UTF-8: store them replaced.
        return orjson.dumps(_scrub(value), default=str)


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, dict):
        return {_scrub(k) if isinstance(k, str) else str(k): _scrub(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scrub(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, SpanData):
        return _scrub(value.to_dict())
    return value


def _epoch(iso: str | None) -> float | None:
    if not iso:
        return None
    try:
        dt = datetime.fromisoformat(iso.replace("Z", "+00:00"))
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def _time_arg(value: float | str | datetime | None) -> float | None:
    """``since``/``until`` filters: unix seconds, a datetime, an ISO time, or ``30m``/``12h``/``7d`` ago."""
    if value is None or isinstance(value, (int, float)):
        return value
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).timestamp()
    text = str(value).strip()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
    if text[:-1].replace(".", "", 1).isdigit() and text[-1:] in units:
        return time.time() - float(text[:-1]) * units[text[-1]]
    ts = _epoch(text)
    if ts is None:
        raise StoreError(f"cannot read time {value!r}: use an ISO time (2026-11-30T01:00) or an age (30m, 12h, 7d)")
    return ts


def failure_summary(run: Run | dict[str, Any]) -> str | None:
    """One line saying why a run is kept as a failure, for the list view and the index.

    ``run``: a ``Run`` or its plain-dict form (``Run.model_dump(mode="json")``).
    """
    data = run.model_dump(mode="json") if isinstance(run, Run) else run
    if not data_failed(data):
        return None
    if data["stop"] != "answered":
        err = f": {data['error']['type']}" if data["error"] else ""
        return f"stop {data['stop']}{err}"
    bad = [c for c in data["calls"] if c["status"] != "ok"]
    if bad:
        c = bad[0]
        why = c["error"]["type"] if c["error"] else c["status"]
        return f"{c['name']} {why}" + (f" (+{len(bad) - 1} more)" if len(bad) > 1 else "")
    return f"feedback {data['feedback']}"


class Row(tuple):  # type: ignore[type-arg]
    """A ready ``runs`` table row (``run_row``), for ``TraceStore.add_many``."""

    __slots__ = ()


def run_row(data: dict[str, Any], spans: Sequence[SpanData] | None) -> Row:
    """The ``runs`` table row of a run in its plain-dict form and its raw spans.

    A pure function, so the capture worker and ingest serialize runs outside the store's lock.
    """
    run_json = _dumps(data_with_derived(data))
    spans_json = spans_blob(spans) if spans else None
    started = data["started_at"]
    ts = _epoch(started) or time.time()
    return Row((data["trace_id"], data["run_id"], data["agent"], started, ts, data["stop"], int(data_failed(data)),
                failure_summary(data), len(run_json) + len(spans_json or b""), run_json, spans_json))


def merged_spans(earlier: Iterable[SpanData], new: Sequence[SpanData]) -> list[SpanData]:
    """A trace's spans from two reads (the store, and what arrived since), each span once: the new copy wins."""
    by_id = {s.span_id: s for s in earlier}
    by_id.update((s.span_id, s) for s in new)
    return list(by_id.values())


def run_spans(runs: Sequence[dict[str, Any]], spans: Sequence[SpanData]) -> list[list[SpanData]]:
    """The raw spans to store beside each run: its agent span's subtree.

    Spans outside every run (an HTTP request span above the agent) go with the first run, so the
    trace's spans are all stored once and ``TraceStore.spans`` returns the whole trace.
    """
    if len(runs) == 1:
        return [list(spans)]
    children: dict[str | None, list[SpanData]] = {}
    for s in spans:
        children.setdefault(s.parent_id, []).append(s)
    by_id = {s.span_id: s for s in spans}
    taken: set[str] = set()
    out: list[list[SpanData]] = []
    for run in runs:
        root = by_id.get(run["run_id"])
        out.append(subtree(root, children, taken) if root is not None else [])
    rest = [s for s in spans if s.span_id not in taken]
    if rest and out:
        out[0].extend(rest)
    return out


def run_rows(runs: Sequence[dict[str, Any]], spans: Sequence[SpanData], redactor: Redactor | None,
             drop: Callable[[str], None], wanted: Sequence[bool] | None = None) -> list[Row]:
    """The rows of one trace's runs (those ``wanted``), each redacted with its raw spans.

    Per run, so a redactor bug costs only the run it failed on (counted by ``drop``), and a run that
    could not be redacted is never written.
    """
    rows = []
    for i, (data, part) in enumerate(zip(runs, run_spans(runs, spans))):
        if wanted is not None and not wanted[i]:
            continue
        if redactor is not None:
            try:
                data, part = redactor.redact_data(data, part)
            except Exception:  # noqa: BLE001
                log.debug("could not redact a run", exc_info=True)
                drop("redact_error")
                continue
        try:
            rows.append(run_row(data, part))
        except Exception:  # noqa: BLE001
            log.debug("could not serialize a run", exc_info=True)
            drop("serialize_error")
    return rows


def spans_blob(spans: Sequence[SpanData]) -> bytes:
    """Spans as stored (a run's raw spans, a trace in the inbox): compact, as the capture worker writes them.

    Each span a JSON array of the ``SpanData`` fields, its resource an index into the trace's
    resources (a process has one): ``[resources, spans]``, a quarter smaller than a list of span
    objects and written in half the time. ``spans_from_blob`` also reads schema 1's list of objects.
    """
    resources: list[dict[str, Any]] = []
    index: dict[int, int] = {}
    rows = []
    for s in spans:
        i = index.get(id(s.resource))
        if i is None:
            i = index[id(s.resource)] = len(resources)
            resources.append(s.resource)
        rows.append((s.trace_id, s.span_id, s.parent_id, s.name, s.start_ns, s.end_ns, s.kind, s.status,
                     s.status_message, s.attributes, s.events, s.scope, i))
    return _dumps([resources, rows])


def spans_from_blob(blob: bytes) -> list[SpanData]:
    return _spans_of(orjson.loads(blob))


def _spans_of(data: Any) -> list[SpanData]:
    if not data:
        return []
    if isinstance(data[0], dict):  # schema 1: a list of SpanData objects
        return [SpanData.from_dict(d) for d in data]
    resources, rows = data
    return [SpanData(*row[:12], resource=resources[row[12]]) for row in rows]


def inbox_row(traces: Sequence[bytes], *, redacted: bool, pieces: int = 0) -> tuple[float, int, int, int, bytes]:
    """One ``inbox`` row of traces in their ``spans_blob`` form (their spans already redacted when ``redacted``).

    A batch is one row, not a row per trace: SQLite's Python binding takes the GIL back after
    each row it inserts, and on a busy app thread each of those waits costs two thread switches.
    """
    parts = [b"["]
    for trace in traces:
        parts += (trace, b",")
    parts[-1] = b"]" if traces else b"[]"
    return (time.time(), int(redacted), len(traces), pieces, b"".join(parts))  # one copy of the batch, not two


_settle_redactor: Redactor | None = None


def _builtin_redactor() -> Redactor:
    """The built-in rules, unkeyed: capture defers only runs whose redaction is exactly that."""
    global _settle_redactor
    if _settle_redactor is None:
        _settle_redactor = Redactor(key="")  # "" and not None: $HARVESTER_REDACT_KEY must not apply here
    return _settle_redactor


class TraceStore:
    """Runs and their raw spans in one SQLite file (``.harvester/traces.db``; ``HARVESTER_STORE``).

    Safe to share between threads (one connection, a lock) and to use from several processes. The
    connection is reopened in a forked child, never shared with the parent.
    """

    def __init__(self, path: str | os.PathLike[str] | None = None, *, readonly: bool = False) -> None:
        self.path = str(path) if path is not None else default_path()
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
        transaction lasts milliseconds; the wait is capped (``_FORK_WAIT_S``) because the lock is
        also held while waiting for another process's write, and fork must not hang on that.
        """
        self._txn_held_for_fork = self._txn.acquire(timeout=_FORK_WAIT_S)

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
            if head != _SQLITE_MAGIC:
                raise self._error("not a harvester trace store (not an SQLite database); "
                                  "pass another --store path or move the file away")
        elif self.readonly:
            raise self._error("no trace store here yet; ingest traces first (harvester ingest FILE)")
        else:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise self._error(f"cannot create its folder ({exc.strerror})") from None
        try:
            conn = sqlite3.connect(self._abs, timeout=_BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                                   check_same_thread=False)
        except sqlite3.Error as exc:
            raise self._error(f"cannot open ({exc})") from None
        try:
            conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
            for attempt in range(_RETRIES):  # another process may be creating the file right now
                try:
                    self._check_schema(conn)
                    if not self.readonly:
                        conn.execute("PRAGMA journal_mode = WAL")
                        conn.execute("PRAGMA synchronous = NORMAL")
                    break
                except sqlite3.OperationalError as exc:
                    if attempt == _RETRIES - 1 or not _is_busy(exc):
                        raise
                    time.sleep(0.05 * (attempt + 1))
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise self._error(f"not a readable trace store ({exc})") from None
        except StoreError:
            conn.close()
            raise
        self._conn, self._pid = conn, os.getpid()
        self._file_id = _file_id(self._abs)
        return conn

    def _same_file(self) -> bool:
        """False once the file at ``path`` was deleted or replaced (log rotation, a cleanup job): the open
        connection would go on writing into the old, unlinked file and every run would vanish."""
        return self._conn is None or _file_id(self._abs) == self._file_id

    def _check_schema(self, conn: sqlite3.Connection) -> None:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "harvester_meta" not in tables:
            if tables:
                raise self._error(f"an SQLite database that is not a harvester trace store (tables: "
                                  f"{', '.join(sorted(tables)[:5])}); pass another --store path")
            if self.readonly:
                raise self._error("empty database; ingest traces first (harvester ingest FILE)")
            self._create(conn)
            self._has_inbox = True
            return
        meta = dict(conn.execute("SELECT key, value FROM harvester_meta").fetchall())
        if meta.get("schema") != SCHEMA:
            raise self._error("not a harvester trace store (no schema marker)")
        try:
            version = int(meta.get("version", "0"))
        except ValueError:
            raise self._error(f"unreadable schema version {meta.get('version')!r}") from None
        if version > SCHEMA_VERSION:
            raise self._error(f"written by a newer harvester (store schema {version}, this one reads "
                              f"{SCHEMA_VERSION}); upgrade harvester")
        self._has_inbox = "inbox" in tables
        if not self._has_inbox and not self.readonly:
            self._add_inbox(conn)

    def _add_inbox(self, conn: sqlite3.Connection) -> None:
        """Schema 1 -> 2: a store from before the inbox gains it (in a transaction: another process may race us)."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'inbox'").fetchone() is None:
                conn.execute(_INBOX_DDL)
                conn.execute("UPDATE harvester_meta SET value = ? WHERE key = 'version'", (str(SCHEMA_VERSION),))
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        self._has_inbox = True

    def _create(self, conn: sqlite3.Connection) -> None:
        for attempt in range(_RETRIES):
            try:
                conn.execute(f"PRAGMA page_size = {_PAGE_SIZE}")  # first: auto_vacuum fixes the page size
                conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
                conn.execute("BEGIN IMMEDIATE")
                break
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc):
                    raise
                time.sleep(0.05 * (attempt + 1))
        try:
            # Another process may have created it while we waited for the lock.
            if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'harvester_meta'").fetchone() is None:
                for stmt in _DDL.split(";"):
                    if stmt.strip():
                        conn.execute(stmt)
                conn.executemany("INSERT INTO harvester_meta VALUES (?, ?)",
                                 [("schema", SCHEMA), ("version", str(SCHEMA_VERSION))])
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

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
            conn = sqlite3.connect(self._abs, timeout=_BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                                   check_same_thread=False)
        except sqlite3.Error as exc:
            raise self._error(f"cannot open ({exc})") from None
        self._rconn, self._rpid = conn, os.getpid()
        return conn

    def __enter__(self) -> "TraceStore":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TraceStore({self.path!r})"

    # -- writing -------------------------------------------------------------------------------
    def add(self, run: Run, spans: Sequence[SpanData] | None = None) -> None:
        self.add_many([(run, spans)])

    def add_many(self, items: Iterable[tuple[Run, Sequence[SpanData] | None] | Run | Row], *,
                 replace_traces: Iterable[str] = (), inbox: Sequence[tuple[Any, ...]] = ()) -> int:
        """Store runs (with their raw spans) in one transaction; a run already stored is replaced.

        An item is a ``Run``, a ``(Run, spans)`` pair, or a ``Row`` that ``run_row`` already made.
        ``replace_traces``: traces whose stored runs all go first, in the same transaction, because
        ``items`` holds every run read again from all of their spans (a trace stored in parts: a run
        first read as its own may now be a sub-agent inside another). ``inbox``: ``inbox_row``s of
        traces to normalize at the first read, written in the same transaction.
        """
        rows = [item if isinstance(item, Row) else
                run_row(*(item.model_dump(mode="json"), None) if isinstance(item, Run)
                        else (item[0].model_dump(mode="json"), item[1])) for item in items]
        if not rows and not inbox:
            return 0
        if inbox and not self._has_inbox:
            raise self._error("opened read-only")  # only a read-only schema-1 store lacks one

        def write(conn: sqlite3.Connection) -> int:
            if inbox:
                conn.executemany("INSERT INTO inbox (received, redact, count, pieces, traces) VALUES (?, ?, ?, ?, ?)",
                                 inbox)
            return self._insert(conn, rows, replace_traces)

        return self._transact(write)

    @staticmethod
    def _insert(conn: sqlite3.Connection, rows: list[Row], replace_traces: Iterable[str]) -> int:
        kept: dict[str, list[str]] = {tid: [] for tid in replace_traces}
        for row in rows:
            if row[0] in kept:
                kept[row[0]].append(row[1])
        # Only the runs the new rows do not replace go: the others are replaced in place, as always.
        stale = [(tid, orjson.dumps(ids).decode()) for tid, ids in kept.items()]
        if stale:
            conn.executemany("DELETE FROM runs WHERE trace_id = ? AND run_id NOT IN (SELECT value FROM json_each(?))",
                             stale)
        if rows:
            conn.executemany("INSERT OR REPLACE INTO runs (trace_id, run_id, agent, started_at, ts, stop, failed, "
                             "failure, size, run, spans) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        return len(rows)

    def _write(self, sql: str, rows: list[tuple[Any, ...]] | None = None) -> int:
        """One statement (for each of ``rows``) in one write transaction; the number of rows it changed."""
        return self._transact(lambda conn: (conn.executemany(sql, rows) if rows is not None
                                            else conn.execute(sql)).rowcount)

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
            for attempt in range(_RETRIES):
                with self._txn:
                    try:
                        conn.execute("BEGIN IMMEDIATE")
                    except sqlite3.OperationalError as exc:
                        if not (attempt + 1 < _RETRIES and _is_busy(exc)):
                            raise self._error(f"cannot write ({exc})") from None
                    except sqlite3.DatabaseError as exc:
                        raise self._error(f"cannot write ({exc})") from None
                    else:
                        try:
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

    # -- the inbox -----------------------------------------------------------------------------
    def pending(self) -> int:
        """Traces captured into the inbox and not normalized yet."""
        if not self._has_inbox:
            return 0
        return next(self._query("SELECT COALESCE(SUM(count), 0) FROM inbox"))[0]

    def settle(self) -> dict[str, int]:
        """Normalize the inbox into runs, as ingest would have stored them; what it did, counted.

        Every read calls this first, so callers never need to. The batches in the inbox when it
        starts are taken oldest first (batches captured meanwhile wait for the next read, so a busy
        app cannot keep a reader here). A batch is normalized outside any transaction; a short one
        then stores its runs and deletes its row together, so a crash loses nothing and capture
        writers are not held up while it normalizes. A trace that arrived in parts is merged with
        what is stored of it, and its runs replaced.
        """
        counts: dict[str, int] = {}
        if not self._has_inbox:
            return counts
        last, total = next(self._query("SELECT MAX(id), COALESCE(SUM(count), 0) FROM inbox"))
        done = 0
        while last is not None:
            try:
                n = self._settle_one(last, counts)
            except StoreError as exc:
                if "cannot write" not in str(exc):
                    raise
                raise StoreError(f"{exc} ({total - done} captured traces wait to be normalized into runs; every "
                                 "read does that first, so reading needs write access to the store)") from None
            if n < 0:
                break
            done += n
            if self.on_settle is not None:
                self.on_settle(min(done, total), total)
        lost = {k: v for k, v in counts.items() if k not in ("traces", "runs", "no_agent")}
        if lost:
            log.warning("%s: normalizing captured traces lost some: %s", self.path, lost)
        return counts

    def _settle_one(self, last_id: int, counts: dict[str, int]) -> int:
        """Settle the oldest inbox row up to ``last_id``: its number of traces, or -1 when none is left.

        Optimistic for a row of whole traces (most rows): it is normalized against the stored runs of
        its traces as they were read, and the transaction checks that those are unchanged (another
        reader, or a capture worker, may have stored more of a trace meanwhile) and that the row is
        still there, else it reads again. After a few lost races, and for a row holding pieces of
        traces, the row is settled inside one transaction.
        """
        row = next(self._query("SELECT id, redact, count, pieces, traces FROM inbox WHERE id <= ? ORDER BY id "
                               "LIMIT 1", (last_id,)), None)
        if row is None:
            return -1
        row_id, redact, count, pieces, blob = row
        found: dict[str, int] = {}
        traces: dict[str, list[SpanData]] = {}
        try:
            for trace in orjson.loads(blob):
                spans = _spans_of(trace)
                if spans:
                    traces.setdefault(spans[0].trace_id, []).extend(spans)
        except (ValueError, TypeError, IndexError, KeyError):  # a foreign or damaged row: counted, never a crash
            found["unreadable"] = count
            traces = {}
        ids = list(traces)
        # Pieces of one trace may sit in several rows, and a piece settled before an older one would
        # find nothing to merge with: rows holding pieces are settled inside one transaction, which
        # serializes them, oldest first.
        for attempt in range(_SETTLE_TRIES if pieces else 0, _SETTLE_TRIES + 1):
            last_try = attempt == _SETTLE_TRIES
            tally = dict(found)
            rows: list[Row] = []
            replace: list[str] = []
            version: list[tuple[Any, ...]] = []
            if not last_try:
                with self._lock:
                    try:
                        stored, version = self._stored(self._reader(), ids)
                    except sqlite3.DatabaseError as exc:
                        raise self._error(f"cannot read ({exc})") from None
                rows, replace = self._normalize(traces, stored, redact, tally)

            def write(conn: sqlite3.Connection) -> int:
                nonlocal rows, replace
                if conn.execute("DELETE FROM inbox WHERE id = ?", (row_id,)).rowcount == 0:
                    return 0  # another reader settled it
                if last_try:
                    rows, replace = self._normalize(traces, self._stored(conn, ids)[0], redact, tally)
                elif self._stored(conn, ids, spans=False)[1] != version:
                    raise _Raced
                self._insert(conn, rows, replace)
                return 1

            try:
                if self._transact(write, settling=True):
                    for k, v in tally.items():
                        counts[k] = counts.get(k, 0) + v
                return count
            except _Raced:
                continue
        return count  # not reached: the last try cannot race

    def _normalize(self, traces: dict[str, list[SpanData]], stored: dict[str, list[SpanData] | None],
                   redact: int, counts: dict[str, int]) -> tuple[list[Row], list[str]]:
        """The rows of an inbox row's traces, each merged with what is stored of it, and the traces
        whose stored runs these replace (``None`` in ``stored``: a stored part is unreadable, so the
        trace's stored runs are kept and only those read again are replaced)."""
        def drop(reason: str, n: int = 1) -> None:
            counts[reason] = counts.get(reason, 0) + n

        rows: list[Row] = []
        replace: list[str] = []
        redactor = _builtin_redactor() if redact else None
        for tid, spans in traces.items():
            earlier = stored.get(tid)
            try:
                spans = merged_spans(earlier or (), spans)
                runs = run_data_from_spans(spans)
                if not runs:
                    drop("no_agent")
                    continue
                rows += run_rows(runs, spans, redactor, drop)
            except Exception:  # noqa: BLE001 - one trace never stops the others
                log.debug("could not normalize a trace", exc_info=True)
                drop("normalize_error")
                continue
            if earlier:
                replace.append(tid)
        drop("traces", len(traces))
        drop("runs", len(rows))
        return rows, replace

    def _stored(self, conn: sqlite3.Connection, trace_ids: list[str], *,
                spans: bool = True) -> tuple[dict[str, list[SpanData] | None], list[tuple[Any, ...]]]:
        """The stored spans of these traces (None for a trace with an unreadable part), and what tells
        their runs apart from any others stored in their place: row id, run id and size together (a
        replaced row may get the same row id back)."""
        out: dict[str, dict[str, SpanData] | None] = {}
        version: list[tuple[Any, ...]] = []
        for i in range(0, len(trace_ids), 500):
            part = trace_ids[i:i + 500]
            cols = "id, trace_id, run_id, size, spans" if spans else "id, trace_id, run_id, size, NULL"
            sql = f"SELECT {cols} FROM runs WHERE trace_id IN ({','.join('?' * len(part))})"
            for rid, tid, run_id, size, blob in conn.execute(sql, part):
                version.append((rid, tid, run_id, size))
                seen = out.setdefault(tid, {})
                if blob is None or seen is None:
                    continue
                try:
                    for sp in spans_from_blob(blob):
                        seen.setdefault(sp.span_id, sp)
                except (ValueError, TypeError, IndexError, KeyError):
                    log.warning("%s: a stored run of trace %s has unreadable spans; left as it is", self.path, tid)
                    out[tid] = None
        version.sort()
        return {tid: list(seen.values()) if seen is not None else None for tid, seen in out.items()}, version

    def _settled(self) -> None:
        """Before a read: the inbox normalized, if anything is in it."""
        if self._has_inbox and next(self._query("SELECT EXISTS (SELECT 1 FROM inbox)"))[0]:
            self.settle()

    # -- reading -------------------------------------------------------------------------------
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

    def count(self, *, failed: bool | None = None) -> int:
        self._settled()
        where, args = ("WHERE failed = ?", [int(failed)]) if failed is not None else ("", [])
        return next(self._query(f"SELECT COUNT(*) FROM runs {where}", args))[0]

    def resolve(self, trace_id: str) -> str | None:
        """The stored trace id ``trace_id`` names (exactly or as a unique prefix); None if unknown."""
        tid = trace_id.strip().lower()
        if not tid:
            return None
        self._settled()
        if next(self._query("SELECT 1 FROM runs WHERE trace_id = ? LIMIT 1", (tid,)), None):
            return tid
        matches = self.ids_like(tid, limit=6, prefix_only=True)
        if len(matches) > 1:
            raise NotFoundError(f"trace id prefix {trace_id!r} is ambiguous: {', '.join(matches[:5])}"
                                + (", ..." if len(matches) > 5 else ""))
        return matches[0] if matches else None

    def get(self, trace_id: str) -> list[Run]:
        """Runs of a trace (exact id or unique prefix), in start order; [] when the trace is unknown."""
        tid = self.resolve(trace_id)
        if tid is None:
            return []
        return [Run.model_validate(orjson.loads(r[0]))
                for r in self._query("SELECT run FROM runs WHERE trace_id = ? ORDER BY ts, id", (tid,))]

    def spans(self, trace_id: str) -> list[SpanData]:
        """The raw spans stored with a trace's runs, each once, in start order."""
        tid = self.resolve(trace_id)
        seen: dict[str, SpanData] = {}
        if tid is not None:
            for (blob,) in self._query("SELECT spans FROM runs WHERE trace_id = ? AND spans IS NOT NULL", (tid,)):
                for sp in spans_from_blob(blob):
                    seen.setdefault(sp.span_id, sp)
        return sorted(seen.values(), key=lambda s: s.start_ns)

    def spans_of(self, trace_ids: Iterable[str]) -> dict[str, list[SpanData]]:
        """The stored raw spans of those of ``trace_ids`` (full ids) already in the store, each span once.

        For an import that brings more of a trace already stored (a trace split over two of the
        Collector's files): its runs are read again from all of the trace's spans, not just the new ones.
        The inbox is left as it is (this runs on the capture worker): settling it merges its traces
        with whatever is stored of them by then.
        """
        with self._lock:
            try:
                stored = self._stored(self._connect(), list(dict.fromkeys(trace_ids)))[0]
            except sqlite3.DatabaseError as exc:
                raise self._error(f"cannot read ({exc})") from None
        return {tid: spans for tid, spans in stored.items() if spans}

    def _filters(self, failed: bool | None, agent: str | None, since: Any, until: Any,
                 trace_ids: Sequence[str] | None = None) -> tuple[str, list[Any]]:
        clauses, args = [], []
        if failed is not None:
            clauses.append("failed = ?")
            args.append(int(failed))
        if agent is not None:
            clauses.append("agent = ?")
            args.append(agent)
        if (t := _time_arg(since)) is not None:
            clauses.append("ts >= ?")
            args.append(t)
        if (t := _time_arg(until)) is not None:
            clauses.append("ts < ?")
            args.append(t)
        if trace_ids is not None:
            clauses.append(f"trace_id IN ({', '.join('?' * len(trace_ids))})")
            args.extend(trace_ids)
        return ("WHERE " + " AND ".join(clauses)) if clauses else "", args

    def runs(self, *, failed: bool | None = None, agent: str | None = None, since: Any = None,
             until: Any = None, limit: int | None = None, newest_first: bool = True) -> Iterator[Run]:
        """Stored runs, streamed from the database (never all loaded at once)."""
        self._settled()
        where, args = self._filters(failed, agent, since, until)
        order = "DESC" if newest_first else "ASC"
        sql = f"SELECT run FROM runs {where} ORDER BY ts {order}, id {order}"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(int(limit))
        for (blob,) in self._query(sql, args):
            yield Run.model_validate(orjson.loads(blob))

    def ids_like(self, trace_id: str, *, limit: int = 5, prefix_only: bool = False) -> list[str]:
        """Stored trace ids nearest to ``trace_id``: those sharing its longest prefix (for "did you mean")."""
        tid = trace_id.strip().lower()
        self._settled()
        for n in range(len(tid), 0 if prefix_only else -1, -1):
            if prefix_only and n < len(tid):
                break
            p = tid[:n]
            if p and ord(p[-1]) >= 0x10FFFF:
                continue  # no character sorts after it: not a trace id anyway
            if p:
                hi = p[:-1] + chr(ord(p[-1]) + 1)
                rows = self._query("SELECT DISTINCT trace_id FROM runs WHERE trace_id >= ? AND trace_id < ? "
                                   "ORDER BY trace_id LIMIT ?", (p, hi, limit))
            else:
                rows = self._query("SELECT DISTINCT trace_id FROM runs ORDER BY ts DESC LIMIT ?", (limit,))
            found = [r[0] for r in rows]
            if found:
                return found
        return []

    # -- retention -----------------------------------------------------------------------------
    def prune(self, keep_days: float | None = None, max_mb: float | None = None, *,
              keep_failed_days: float | None = None) -> int:
        """Delete old runs; returns how many. Failures are kept longest.

        ``keep_days`` removes successful runs older than that; failed runs only go by age when
        ``keep_failed_days`` is given. ``max_mb`` then removes runs, oldest successes first and
        failures only once no success is left, until the stored runs fit.
        """
        for name, value in (("keep_days", keep_days), ("keep_failed_days", keep_failed_days), ("max_mb", max_mb)):
            if value is not None and not value >= 0:  # NaN too
                raise StoreError(f"{self.path}: {name} must be a number of 0 or more, not {value!r}")
        # An infinite limit is no limit (keep everything that way).
        keep_days, keep_failed_days, max_mb = (None if v is not None and math.isinf(v) else v
                                               for v in (keep_days, keep_failed_days, max_mb))
        self._settled()  # failures are told apart by their runs
        deleted = 0
        now = time.time()
        if keep_days is not None:
            deleted += self._write(f"DELETE FROM runs WHERE failed = 0 AND ts < {now - keep_days * 86400!r}")
        if keep_failed_days is not None:
            deleted += self._write(f"DELETE FROM runs WHERE failed = 1 AND ts < {now - keep_failed_days * 86400!r}")
        if max_mb is not None:
            excess = next(self._query("SELECT COALESCE(SUM(size), 0) FROM runs"))[0] - int(max_mb * 1024 * 1024)
            victims: list[tuple[int]] = []
            if excess > 0:
                for rid, size in self._query("SELECT id, size FROM runs ORDER BY failed, ts, id"):
                    victims.append((rid,))
                    excess -= size
                    if excess <= 0:
                        break
            if victims:
                deleted += self._write("DELETE FROM runs WHERE id = ?", victims)
        if deleted:
            with self._lock:
                try:
                    self._connect().execute("PRAGMA incremental_vacuum")
                    self._connect().execute("PRAGMA wal_checkpoint(TRUNCATE)")
                except sqlite3.OperationalError:
                    pass  # another writer is busy: the space is reused, the file shrinks next time
        return deleted


# -- OTLP/JSON out ------------------------------------------------------------------------------
def export_otlp(store: TraceStore, trace_ids: Sequence[str] | None = None, *, failed: bool | None = None,
                agent: str | None = None, since: Any = None, until: Any = None,
                limit: int | None = None) -> dict[str, Any]:
    """An OTLP/JSON document of the stored raw spans of the given traces (ids or prefixes) or filters."""
    if trace_ids:
        ids = []
        for t in trace_ids:
            tid = store.resolve(t)
            if tid is None:
                raise NotFoundError(f"no trace {t!r} in {store.path}")
            ids.append(tid)
    else:
        ids = list(dict.fromkeys(r.trace_id for r in store.runs(failed=failed, agent=agent, since=since,
                                                                 until=until, limit=limit)))
    spans: list[SpanData] = []
    for tid in ids:
        spans.extend(store.spans(tid))
    return to_otlp(spans)
