"""Engine creation: SQLite gets WAL, a busy timeout and writing transactions that take the write
lock first; PostgreSQL a sized pool."""

from __future__ import annotations

import sqlite3
import weakref
from contextlib import AbstractContextManager
from typing import Any, cast

from sqlalchemy import CursorResult, Engine, Result, create_engine, event
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from app.domain.errors import CatalogFull, CatalogUnavailable


def affected(result: Result[Any]) -> int:
    """Rows an UPDATE or DELETE matched. ``Session.execute`` is typed as returning a plain
    ``Result``; for DML it is the ``CursorResult`` that carries the count."""
    return int(cast(CursorResult[Any], result).rowcount or 0)


_IMMEDIATE = "ferry_sqlite_immediate"
_WRITERS: weakref.WeakKeyDictionary[Engine, Engine] = weakref.WeakKeyDictionary()


def writer(engine: Engine) -> Engine:
    """The same engine (one pool) for writing transactions: on SQLite they begin with
    ``BEGIN IMMEDIATE``, so a check and the write it decides are one step against every other
    writer (pysqlite left the reads before a transaction's first write outside it: the class of
    check-then-write races issue 16 fixed one at a time). PostgreSQL ignores the option and keeps
    its row and advisory locks."""
    found = _WRITERS.get(engine)
    if found is None:
        found = _WRITERS[engine] = engine.execution_options(**{_IMMEDIATE: True})
    return found


class Sessions:
    """ORM sessions of one engine: ``sessions()`` to read, ``sessions.begin()`` for a writing
    transaction (on SQLite it begins with ``BEGIN IMMEDIATE``, see ``writer``)."""

    def __init__(self, engine: Engine) -> None:
        self._read = sessionmaker(engine, expire_on_commit=False)
        self._write = sessionmaker(writer(engine), expire_on_commit=False)

    def __call__(self) -> Session:
        return self._read()

    def begin(self) -> AbstractContextManager[Session]:
        return self._write.begin()


def make_engine(url: str, *, pool_size: int = 10, synchronous: str = "FULL") -> Engine:
    """One engine per process; SQLite pragmas are set on every new connection.

    ``synchronous="NORMAL"`` (SQLite only) is for tables whose rows a crash may lose without
    losing data, such as the cache index: a commit then skips the WAL fsync, and a power cut
    loses at most the last commits (never their order, so a later FULL commit covers them)."""
    if synchronous not in ("FULL", "NORMAL"):
        raise ValueError(f"synchronous must be FULL or NORMAL, not {synchronous!r}")
    if url.startswith("sqlite"):
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute(f"PRAGMA synchronous={synchronous}")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()
            # SQLAlchemy, not pysqlite, begins transactions (below): pysqlite's own BEGIN comes
            # only before the first write, and is never IMMEDIATE.
            dbapi_conn.isolation_level = None

        @event.listens_for(engine, "begin")
        def _sqlite_begin(conn: Any) -> None:
            conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get(_IMMEDIATE) else "BEGIN")

        event.listen(engine, "handle_error", _disk_full)
        return engine
    engine = create_engine(url, pool_size=pool_size, max_overflow=pool_size, pool_pre_ping=True)
    event.listen(engine, "handle_error", _unavailable)
    return engine


def _unavailable(ctx: ExceptionContext) -> None:
    """A lost or refused server connection becomes ``CatalogUnavailable`` (503 with Retry-After
    for S3 clients and the admin API alike) instead of a 500. The pool has already dropped the
    dead connection; ``pool_pre_ping`` replaces it once the server is back."""
    if ctx.is_pre_ping:
        return  # the pool replaces a dropped connection by itself: no outage, nothing to say
    if ctx.is_disconnect or isinstance(ctx.sqlalchemy_exception, (OperationalError, InterfaceError)):
        raise CatalogUnavailable() from ctx.original_exception


_SQLITE_FULL = 13


def _disk_full(ctx: ExceptionContext) -> None:
    """SQLite's "database or disk is full" becomes ``CatalogFull`` (503 SlowDown, Retry-After)."""
    original = ctx.original_exception
    if isinstance(original, sqlite3.OperationalError) and (
            getattr(original, "sqlite_errorcode", None) == _SQLITE_FULL or "disk is full" in str(original)):
        raise CatalogFull() from original
