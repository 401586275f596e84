"""The store's file: what makes an SQLite file a harvester trace store, its tables, and migrations.

The file announces itself in a ``harvester_meta`` table. A file that is not SQLite, an SQLite
database with other tables and no marker, or one written by a newer harvester is refused with a
``StoreError`` naming the file before anything is written to it. Schema 2 added the inbox: a
schema-1 store gains it the first time it is opened for writing. Schema 3 compresses the blobs of new
rows (``_codec``), schema 4 packs them without zlib's checksum: an older store is marked 4 the first
time it is opened for writing (its rows read as they are), so a harvester that cannot read the new
rows refuses the file instead.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from typing import Any

from ..errors import StoreError

__all__ = [
    "BUSY_TIMEOUT_MS",
    "RETRIES",
    "SCHEMA",
    "SCHEMA_VERSION",
    "SQLITE_MAGIC",
    "check",
    "file_id",
    "is_busy",
    "mark_current",
]

SCHEMA = "harvester.store"
SCHEMA_VERSION = 4  # 2: the inbox; 3: run and span blobs may be compressed; 4: raw deflate
SQLITE_MAGIC = b"SQLite format 3\x00"
BUSY_TIMEOUT_MS = 10_000
RETRIES = 20
# A run's row (its Run JSON and raw spans) is typically 5-50 KB and a captured batch in the inbox a
# few MB: on 4 KB pages a row spills into a chain of overflow pages. 64 KB pages hold several rows
# each; measured with checkpoints included, writing costs a third less CPU than on 16 KB pages.
PAGE_SIZE = 65536

DDL = """
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
INBOX_DDL = DDL[DDL.index("CREATE TABLE inbox") :]


def is_busy(exc: sqlite3.OperationalError) -> bool:
    return "locked" in str(exc) or "busy" in str(exc)


def file_id(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def check(conn: sqlite3.Connection, *, readonly: bool, error: Callable[[str], StoreError]) -> bool:
    """Check (and, for writing, create or migrate) the schema; returns whether the inbox exists."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if "harvester_meta" not in tables:
        if tables:
            raise error(
                f"an SQLite database that is not a harvester trace store (tables: "
                f"{', '.join(sorted(tables)[:5])}); pass another --store path"
            )
        if readonly:
            raise error("empty database; ingest traces first (harvester ingest FILE)")
        _create(conn)
        return True
    version = check_version(dict(conn.execute("SELECT key, value FROM harvester_meta").fetchall()), error)
    has_inbox = "inbox" in tables
    if not has_inbox and not readonly:
        _add_inbox(conn)
        has_inbox = True
    elif version < SCHEMA_VERSION and not readonly:
        _migrate(conn, lambda: _set_version(conn))
    return has_inbox


def check_version(meta: dict[str, str], error: Callable[[str], StoreError]) -> int:
    """The schema version ``harvester_meta`` holds (either engine's), refused when it is not ours or newer."""
    if meta.get("schema") != SCHEMA:
        raise error("not a harvester trace store (no schema marker)")
    try:
        version = int(meta.get("version", "0"))
    except ValueError:
        raise error(f"unreadable schema version {meta.get('version')!r}") from None
    if version > SCHEMA_VERSION:
        raise error(
            f"written by a newer harvester (store schema {version}, this one reads {SCHEMA_VERSION}); upgrade harvester"
        )
    return version


def _add_inbox(conn: sqlite3.Connection) -> None:
    """Schema 1 -> 4: a store from before the inbox gains it."""

    def add() -> None:
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'inbox'").fetchone() is None:
            conn.execute(INBOX_DDL)
            _set_version(conn)

    _migrate(conn, add)


def _set_version(conn: sqlite3.Connection) -> None:
    """Schema 2 or 3 -> 4 is this alone: the version marks that new rows may be packed."""
    conn.execute("UPDATE harvester_meta SET value = ? WHERE key = 'version'", (str(SCHEMA_VERSION),))


def mark_current(conn: Any) -> None:
    """Inside a write that a read-only open makes (settling the inbox; on PostgreSQL, any first write):
    the rows it writes may be packed, so a store still marked older must say 4 in the same transaction.
    ``conn``: an sqlite3 connection, or the PostgreSQL store's, which speaks the same SQL. The older
    versions are named, not compared as numbers: PostgreSQL may cast the schema row's value too, and
    a store a newer harvester marked meanwhile must keep its mark."""
    older = [str(v) for v in range(1, SCHEMA_VERSION)]
    conn.execute(
        f"UPDATE harvester_meta SET value = ? WHERE key = 'version' AND value IN ({', '.join('?' * len(older))})",
        (str(SCHEMA_VERSION), *older),
    )


def _migrate(conn: sqlite3.Connection, change: Callable[[], None]) -> None:
    """``change`` in a write transaction: another process may be migrating the same file."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        change()
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _create(conn: sqlite3.Connection) -> None:
    for attempt in range(RETRIES):
        try:
            conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")  # first: auto_vacuum fixes the page size
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
            conn.execute("BEGIN IMMEDIATE")
            break
        except sqlite3.OperationalError as exc:
            if not is_busy(exc):
                raise
            time.sleep(0.05 * (attempt + 1))
    try:
        # Another process may have created it while we waited for the lock.
        if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'harvester_meta'").fetchone() is None:
            for stmt in DDL.split(";"):
                if stmt.strip():
                    conn.execute(stmt)
            conn.executemany(
                "INSERT INTO harvester_meta VALUES (?, ?)", [("schema", SCHEMA), ("version", str(SCHEMA_VERSION))]
            )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
