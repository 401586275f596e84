"""psycopg_pool's log records, one line each.

While PostgreSQL restarts, the pool behind a PostgreSQL store reconnects by itself and logs every failed
attempt and every dropped connection as a warning whose text is psycopg's multi-line error (``connection
failed: ...`` then a tab-indented hint). Unconfigured, Python prints those on stderr in the middle of a
command's output. This filter makes each one line, prefixed so the reader knows whose it is, and drops
any traceback attached to it: the reconnect is the pool's business, and a write that finally fails is
harvester's own one-line ``StoreError``.
"""

from __future__ import annotations

import logging

__all__ = ["one_line_pool_logs"]

POOL_LOGGER = "psycopg.pool"
PREFIX = "store (PostgreSQL): "


class _OneLine(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        text = " ".join(record.getMessage().split())
        record.msg = text if text.startswith(PREFIX) else PREFIX + text
        record.args = None
        record.exc_info = record.exc_text = record.stack_info = None
        return True


_FILTER = _OneLine()


def one_line_pool_logs() -> None:
    """Install the filter on psycopg_pool's logger (once; adding the same filter again is a no-op)."""
    logging.getLogger(POOL_LOGGER).addFilter(_FILTER)
