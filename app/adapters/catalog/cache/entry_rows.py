"""The rows of ``cache_entries``: their columns and decoding, the one mover of an entry's state,
and the key-level lock and invalidation that other transactions (the journal's commit of a write,
a bucket's remap) run inside their own. Kept apart from ``index.py`` so that those writers need
not import the index's lookups."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Connection, Update, bindparam, insert, select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from app.adapters.catalog.tables import CacheEntry, table
from app.adapters.catalog.uploads.remote_opening import key_lock_id
from app.domain.cache import Entry
from app.domain.objects import ObjectMeta
from app.domain.states import CACHE_ALLOWED, CacheState, IllegalTransition, check_move

SHARED_NODE = "*"  # tombstones of writes: visible to every node's discoveries
T = table(CacheEntry)
# The shared tombstone of a written key, inserted unless there (values given at execution).
_TOMBSTONE = {"postgresql": pg_insert(T).on_conflict_do_nothing(), "sqlite": sqlite_insert(T).on_conflict_do_nothing()}


def meta_to_json(meta: ObjectMeta) -> str:
    return json.dumps({
        "content_headers": meta.content_headers, "metadata": meta.metadata, "checksums": meta.checksums,
        "last_modified": meta.last_modified.isoformat(), "version_id": meta.version_id,
        "storage_class": meta.storage_class, "parts_count": meta.parts_count,
    })


def meta_from_json(key: str, size: int, etag: str, text: str) -> ObjectMeta:
    data = json.loads(text or "{}")
    return ObjectMeta(key=key, size=size, etag=etag,
                      last_modified=datetime.fromisoformat(data.get("last_modified", "1970-01-01T00:00:00+00:00")),
                      content_headers=data.get("content_headers", {}), metadata=data.get("metadata", {}),
                      checksums=data.get("checksums", {}), version_id=data.get("version_id"),
                      storage_class=data.get("storage_class", "STANDARD"), parts_count=data.get("parts_count"))


# Rows that may own block files: the orphan sweep counts them as accounted for.
HOLDS_BLOCKS = (CacheState.READY.value, CacheState.INVALID.value)


def entry_from_row(row: Any) -> Entry:
    return Entry(row.id, row.bucket, row.key, row.etag, row.size, row.block_size,
                 meta_from_json(row.key, row.size, row.etag, row.meta_json), row.tenant_id,
                 CacheState(row.state),
                 row.cached_bytes, row.validated_at, row.last_access)


class Row(NamedTuple):
    """A cache_entries row from the raw SQLite lookup, in hotpath.CACHE_ENTRY's column order."""

    id: int
    bucket: str
    key: str
    etag: str
    size: int
    block_size: int
    meta_json: str
    tenant_id: int | None
    state: str
    cached_bytes: int
    validated_at: float
    last_access: float


COLUMNS = (T.c.id, T.c.bucket, T.c.key, T.c.etag, T.c.size, T.c.block_size, T.c.meta_json, T.c.tenant_id,
            T.c.state, T.c.cached_bytes, T.c.validated_at, T.c.last_access)


def move_entries(conn: Connection, froms: Iterable[CacheState], to: CacheState,
                 *where: Any, **values: Any) -> int:
    """The one writer of a cache entry's state: moves the rows matching ``where`` that are in
    one of ``froms`` to ``to``, each (from, to) checked against ``CACHE_ALLOWED`` first."""
    return int(conn.execute(prepared_entry_move(froms, to, *where, **values)).rowcount or 0)


def prepared_entry_move(froms: Iterable[CacheState], to: CacheState, *where: Any, **values: Any) -> Update:
    """``move_entries``'s statement built and checked once, for a hot path to run with its own
    parameters (``bindparam``), as the journal's ``prepared_move``."""
    declared = frozenset(CacheState(f) for f in froms)
    if not declared:
        raise IllegalTransition(f"a move to {to} must declare the states it leaves")
    for current in sorted(declared):
        check_move(CACHE_ALLOWED, current, to)
    return (update(T).where(T.c.state.in_(sorted(s.value for s in declared)), *where)
            .values(state=to.value, **values))


CACHE_LOCK_SPACE = 0x46657272  # PostgreSQL advisory locks (space, id): apart from the destage's


def lock_key_entries(conn: Connection, bucket: str, key: str) -> None:
    """Serialise, within the caller's transaction, everything that checks or invalidates the
    key's cache entries. PostgreSQL: an advisory lock of the key, taken before any of them is
    touched. SQLite: every writing transaction begins with ``BEGIN IMMEDIATE`` (engine.writer)
    and holds the database's one write lock until it ends, so nothing is left to lock here."""
    if conn.dialect.name == "postgresql":
        conn.execute(text("SELECT pg_advisory_xact_lock(:space, :id)"),
                     {"space": CACHE_LOCK_SPACE, "id": key_lock_id(bucket, key)})


def invalidate_key(conn: Connection, bucket: str, key: str) -> None:
    """Inside the caller's transaction (e.g. the journal's commit of a write, so a buffered
    write pays one commit): every node's entry of the key turns invalid, and the shared
    tombstone's time moves to now."""
    lock_key_entries(conn, bucket, key)
    now = time.time()
    conn.execute(_INVALIDATE_KEY, {"e_bucket": bucket, "e_key": key, "e_at": now})
    values = {"node_id": SHARED_NODE, "bucket": bucket, "key": key, "etag": "", "size": 0, "block_size": 1,
              "meta_json": "{}", "tenant_id": None, "state": CacheState.INVALID.value, "pinned": False, "cached_bytes": 0,
              "created_at": now, "validated_at": now, "last_access": now, "hits": 0}
    tombstone = _TOMBSTONE.get(conn.dialect.name)
    if tombstone is not None:
        conn.execute(tombstone, values)
    elif conn.execute(select(T.c.id).where(T.c.node_id == SHARED_NODE, T.c.bucket == bucket,
                                           T.c.key == key)).first() is None:
        conn.execute(insert(T).values(**values))


# Every write's durable commit invalidates its key: the statement is built once (a write's
# destage spent more CPU building and keying it than running it).
_INVALIDATE_KEY = prepared_entry_move(CacheState, CacheState.INVALID, T.c.bucket == bindparam("e_bucket"),
                                      T.c.key == bindparam("e_key"), validated_at=bindparam("e_at"))
