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
the catalog. A PostgreSQL catalog (fleet) has no such counter: ``PgLookups`` asks the server
every time, but in one round trip, and a GET's two lookups in one statement
(``newest_and_entry``). Through the SQLAlchemy pool a point lookup cost four (the checkout's
ping, BEGIN, the query, the ROLLBACK that returns the connection), counted in the server's
statement log of a fleet's hit; here each lookup is a prepared statement on an autocommit
connection.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from typing import Any

from sqlalchemy import Engine

from app.domain.errors import CatalogUnavailable

NEWEST_VERSION = "SELECT seq, state FROM object_versions WHERE bucket = ? AND key = ? ORDER BY seq DESC LIMIT 1"
_ROW_COLUMNS = ("id, bucket, key, etag, size, block_size, meta_json, tenant_id, state, cached_bytes, validated_at, "
                "last_access")
CACHE_ENTRY = f"SELECT {_ROW_COLUMNS} FROM cache_entries WHERE node_id = ? AND bucket = ? AND key = ?"
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
        """Only for a file-backed SQLite catalog; None otherwise."""
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


PG_NEWEST_VERSION = NEWEST_VERSION.replace("?", "%s")
PG_CACHE_ENTRY = CACHE_ENTRY.replace("?", "%s")
# Both of a GET's lookups in one statement and one round trip (a fleet's GET asked twice: the
# catalog server's CPU per statement is the fleet's, docs/benchmarks.md "Peer reads under load").
# One row always: the newest version's (seq, state), NULLs if none, then the cache row's columns.
_NEWEST_AND_ENTRY = (
    "SELECT v.seq, v.state, c.* FROM (SELECT 1) AS one "
    "LEFT JOIN LATERAL (SELECT seq, state FROM object_versions WHERE bucket = %(b)s AND key = %(k)s "
    "ORDER BY seq DESC LIMIT 1) AS v ON true "
    f"LEFT JOIN LATERAL (SELECT {_ROW_COLUMNS} FROM cache_entries WHERE node_id = %(n)s AND bucket = %(b)s "
    "AND key = %(k)s) AS c ON true")
PG_NEWEST_AND_ENTRY = _NEWEST_AND_ENTRY
# The same, plus the row of the node that owns the block the GET starts in (fleet): when this
# node has none, the owner's ready row lets the GET ask the owner for the block's file by name,
# with no lookup on the owner's side (app/services/cache/owned.py).
PG_NEWEST_ENTRY_AND_OWNED = _NEWEST_AND_ENTRY.replace("c.* FROM", "c.*, o.* FROM") + (
    f" LEFT JOIN LATERAL (SELECT {_ROW_COLUMNS} FROM cache_entries WHERE node_id = %(o)s AND bucket = %(b)s "
    "AND key = %(k)s) AS o ON true")
ROW_WIDTH = len(_ROW_COLUMNS.split(", "))
PG_IDLE_KEPT = 8  # connections kept between lookups (more are opened under load, then closed)
PG_OPEN_MAX = 16  # connections open at once per process: the server's max_connections is shared


class PgLookups:
    """The same two lookups on PostgreSQL: autocommit connections of their own (a single SELECT
    needs no transaction: it reads one snapshot), each statement prepared once per connection.
    A connection that fails is dropped and the lookup tried once on a new one, so a restarted
    server costs no request; a server that stays away is ``CatalogUnavailable`` (503), as through
    the engine. Connections belong to the process that opened them (a forked worker opens its own)."""

    def __init__(self, conninfo: str) -> None:
        self._conninfo = conninfo
        self._lock = threading.Lock()
        self._idle: list[Any] = []
        self._pid = os.getpid()
        self._open = threading.BoundedSemaphore(PG_OPEN_MAX)  # held from borrow to give back

    @classmethod
    def for_engine(cls, engine: Engine) -> PgLookups | None:
        """Only for the psycopg (3) driver, whose connections this opens itself."""
        if engine.dialect.driver != "psycopg":
            return None
        url = engine.url.set(drivername="postgresql")
        return cls(url.render_as_string(hide_password=False))

    def _borrow(self) -> Any:
        """An idle connection or a new one; the caller holds one of ``_open``'s permits."""
        with self._lock:
            if self._pid != os.getpid():  # forked: the parent's sockets are not this process's
                self._idle, self._pid = [], os.getpid()
                self._open = threading.BoundedSemaphore(PG_OPEN_MAX)
            if self._idle:
                return self._idle.pop()
        import psycopg  # the fleet's driver; an embedded (SQLite) node never imports it

        return psycopg.connect(self._conninfo, autocommit=True, prepare_threshold=0, connect_timeout=5)

    def _give_back(self, conn: Any) -> None:
        with self._lock:
            if not conn.closed and self._pid == os.getpid() and len(self._idle) < PG_IDLE_KEPT:
                self._idle.append(conn)
                return
        conn.close()

    def _one(self, sql: str, params: tuple[Any, ...] | dict[str, Any]) -> tuple[Any, ...] | None:
        import psycopg

        with self._open:
            for attempt in (1, 2):
                try:
                    conn = self._borrow()
                except psycopg.Error as exc:
                    raise CatalogUnavailable() from exc
                try:
                    row: tuple[Any, ...] | None = conn.execute(sql, params).fetchone()
                except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
                    # A connection the server dropped (a restart): so were the idle ones, all
                    # opened before it. Once more, on a new connection.
                    conn.close()
                    self.close()
                    if attempt == 2:
                        raise CatalogUnavailable() from exc
                    continue
                except BaseException:
                    conn.close()
                    raise
                self._give_back(conn)
                return row
        raise AssertionError("unreachable")

    def newest_version(self, bucket: str, key: str) -> tuple[int, str] | None:
        row = self._one(PG_NEWEST_VERSION, (bucket, key))
        return (int(row[0]), str(row[1])) if row else None

    def cache_entry(self, node_id: str, bucket: str, key: str) -> tuple[Any, ...] | None:
        return self._one(PG_CACHE_ENTRY, (node_id, bucket, key))

    def newest_and_entry(self, node_id: str, bucket: str,
                         key: str) -> tuple[tuple[int, str] | None, tuple[Any, ...] | None]:
        """``newest_version`` and ``cache_entry`` in one round trip (one snapshot, too)."""
        newest, raw, _ = self.newest_entry_and_owned(node_id, bucket, key)
        return newest, raw

    def newest_entry_and_owned(self, node_id: str, bucket: str, key: str, owner: str | None = None) -> tuple[
            tuple[int, str] | None, tuple[Any, ...] | None, tuple[Any, ...] | None]:
        """``newest_and_entry`` and, with ``owner``, that node's row of the key, in the same
        statement (one snapshot: the owner's row is judged against the same newest version)."""
        if owner is None:
            row = self._one(PG_NEWEST_AND_ENTRY, {"n": node_id, "b": bucket, "k": key})
        else:
            row = self._one(PG_NEWEST_ENTRY_AND_OWNED, {"n": node_id, "o": owner, "b": bucket, "k": key})
        if row is None:  # not reached: the statement always answers one row
            return None, None, None
        newest = (int(row[0]), str(row[1])) if row[0] is not None else None
        own = tuple(row[2:2 + ROW_WIDTH])
        owned = tuple(row[2 + ROW_WIDTH:]) if owner is not None else ()
        return newest, (own if own[0] is not None else None), (owned if owned and owned[0] is not None else None)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def lookups_for(engine: Engine) -> SqliteLookups | PgLookups | None:
    """The hot path's lookups for this catalog; None where the caller keeps to SQLAlchemy (an
    in-memory SQLite database, another PostgreSQL driver)."""
    if engine.dialect.name == "postgresql":
        return PgLookups.for_engine(engine)
    return SqliteLookups.for_engine(engine)
