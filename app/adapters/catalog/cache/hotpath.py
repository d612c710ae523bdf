"""The read hot path's two point lookups on SQLite, without SQLAlchemy's execution machinery.

Every GET asks "is a newer version of this key buffered here?" and "is it cached?". Through
SQLAlchemy each costs a pool checkout and a compiled-statement round (most of a small hit's
time, measured with py-spy); on one raw ``sqlite3`` connection each is a few microseconds. Reads
in WAL mode never wait for writers, so the connection is shared behind a lock.

Answers are also kept in memory, for as long as the database has not changed: ``PRAGMA
data_version`` moves whenever any other connection commits (another thread's engine, another
``--workers`` process, the Celery worker), and this connection never writes. So a repeated
lookup costs that one pragma instead of the query, and the next lookup after any commit
(a write, a destage, an eviction, a revalidation) runs the query again: never staler than
the catalog. A PostgreSQL catalog (fleet) has no such counter and gets no ``SqliteLookups``.
"""

from __future__ import annotations

import sqlite3
import threading
from typing import Any

from sqlalchemy import Engine

NEWEST_VERSION = "SELECT seq, state FROM object_versions WHERE bucket = ? AND key = ? ORDER BY seq DESC LIMIT 1"
CACHE_ENTRY = ("SELECT id, bucket, key, etag, size, block_size, meta_json, tenant_id, state, cached_bytes, "
               "validated_at, last_access FROM cache_entries WHERE node_id = ? AND bucket = ? AND key = ?")
DATA_VERSION = "PRAGMA data_version"
MEMO_SIZE = 8192  # answers kept between commits; a full memo starts over


class SqliteLookups:
    def __init__(self, path: str) -> None:
        self._conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
        self._conn.execute("PRAGMA query_only=ON")
        self._lock = threading.Lock()
        self._version = -1  # the data_version the memo's answers were read at
        self._memo: dict[tuple[str, tuple[Any, ...]], tuple[Any, ...] | None] = {}

    @classmethod
    def for_engine(cls, engine: Engine) -> SqliteLookups | None:
        """Only for a file-backed SQLite catalog; None otherwise (the caller uses SQLAlchemy)."""
        if engine.dialect.name != "sqlite" or not engine.url.database or engine.url.database == ":memory:":
            return None
        return cls(engine.url.database)

    def _one(self, sql: str, params: tuple[Any, ...]) -> tuple[Any, ...] | None:
        # fetchall, not fetchone: a statement left mid-result keeps its read transaction open,
        # and every later query on this connection would see that old snapshot (another
        # worker's commits invisible).
        with self._lock:
            version = self._conn.execute(DATA_VERSION).fetchall()[0][0]
            if version != self._version or len(self._memo) >= MEMO_SIZE:
                self._memo.clear()
                self._version = version
            memo_key = (sql, params)
            if memo_key in self._memo:
                return self._memo[memo_key]
            rows: list[tuple[Any, ...]] = self._conn.execute(sql, params).fetchall()
            found = rows[0] if rows else None
            # Read after the version: a commit in between moves the version again, so the next
            # lookup drops this answer (it may already include the commit; never older than it).
            self._memo[memo_key] = found
            return found

    def newest_version(self, bucket: str, key: str) -> tuple[int, str] | None:
        row = self._one(NEWEST_VERSION, (bucket, key))
        return (int(row[0]), str(row[1])) if row else None

    def cache_entry(self, node_id: str, bucket: str, key: str) -> tuple[Any, ...] | None:
        return self._one(CACHE_ENTRY, (node_id, bucket, key))

    def close(self) -> None:
        self._conn.close()
