"""The cache index: one ``cache_entries`` row per cached object version per node.

Hot lookups use prebuilt Core statements (DESIGN.md: building ``select()`` per call costs 4x).
Access times are written in batches by the caller, not once per hit.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Collection, Iterable, Iterator
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    and_,
    bindparam,
    delete,
    func,
    insert,
    literal,
    or_,
    select,
    text,
    tuple_,
    union_all,
    update,
)
from sqlalchemy.exc import IntegrityError

from app.adapters.catalog.cache.entry_rows import (
    CACHE_LOCK_SPACE,
    COLUMNS,
    HOLDS_BLOCKS,
    SHARED_NODE,
    Row,
    T,
    entry_from_row,
    invalidate_key,
    lock_key_entries,
    meta_to_json,
)
from app.adapters.catalog.cache.hotpath import PgLookups, lookups_for
from app.adapters.catalog.engine import writer
from app.adapters.catalog.tables import ObjectVersion, Tenant, table
from app.adapters.catalog.uploads.remote_opening import key_lock_id
from app.domain.cache import Entry, Lookup, OwnedEntry
from app.domain.objects import ObjectMeta
from app.domain.states import DIRTY, CacheState

V = table(ObjectVersion)
DECODED_SIZE = 8192  # decoded entries kept beside the lookups' memo


class _Refused(Exception):
    """put_ready's checks failed inside its transaction (which then rolls back)."""


class _Retry(Exception):
    """put_ready's insert met a row inserted meanwhile: try the transaction again."""


class CacheIndex:
    def __init__(self, engine: Engine, node_id: str) -> None:
        self.engine = engine
        self.node_id = node_id
        # SQLite: this process's writers take turns here, woken at once, instead of in SQLite's
        # busy handler, which sleeps for milliseconds between attempts (16 fills committing at
        # once spent most of a cold epoch asleep there, measured with py-spy).
        self._write_lock: Any = threading.Lock() if engine.dialect.name == "sqlite" else contextlib.nullcontext()
        self._relaxed_commit = engine.dialect.name == "postgresql"
        self.lookups = lookups_for(engine)
        self._decoded: dict[tuple[str, str], tuple[tuple[Any, ...], Entry]] = {}
        self._get = select(*COLUMNS).where(T.c.node_id == bindparam("n"), T.c.bucket == bindparam("b"),
                                            T.c.key == bindparam("k"))
        # Only this node's rows: an id a peer names (a read by name, cache/owned.py) is the owner's.
        self._touch = (update(T).where(T.c.id == bindparam("eid"), T.c.node_id == self.node_id)
                       .values(last_access=bindparam("at"), hits=T.c.hits + bindparam("n")))
        # put_ready runs once per miss: statements built once compile once (cache key memoized).
        self._written_since = (select(func.count()).select_from(T)
                               .where(T.c.bucket == bindparam("b"), T.c.key == bindparam("k"),
                                      T.c.state == CacheState.INVALID.value, T.c.validated_at >= bindparam("since")))
        # A buffered write of the key is newer than anything the remote can have answered.
        self._dirty_write = (select(V.c.seq).where(V.c.bucket == bindparam("b"), V.c.key == bindparam("k"),
                                                   V.c.state.in_([s.value for s in DIRTY])).limit(1))
        # Both of put_ready's checks in one round trip.
        self._raced = select(or_(self._written_since.scalar_subquery() > 0, self._dirty_write.exists()))
        # PostgreSQL: put_ready's relaxed commit and the key's lock in one round trip.
        self._relax_and_lock = text("SELECT set_config('synchronous_commit', 'off', true), "
                                    "pg_advisory_xact_lock(:space, :id)")
        self._delete_own = delete(T).where(T.c.node_id == bindparam("n"), T.c.bucket == bindparam("b"),
                                           T.c.key == bindparam("k"))
        self._insert = insert(T)
        self._add_bytes = (update(T).where(T.c.id == bindparam("eid"), T.c.state == CacheState.READY.value)
                           .values(cached_bytes=T.c.cached_bytes + bindparam("nbytes")))

    @contextlib.contextmanager
    def _begin(self, *, relaxed: bool = True) -> Iterator[Connection]:
        """A writing transaction. Cache rows describe clean copies of remote data: a commit lost
        in a crash costs a refetch, never a write, so on PostgreSQL it need not wait for the WAL
        flush (``relaxed=False``: the caller relaxes it itself, in its first statement)."""
        with self._write_lock, writer(self.engine).begin() as conn:
            if self._relaxed_commit and relaxed:
                conn.execute(text("SET LOCAL synchronous_commit TO OFF"))
            yield conn

    def get(self, bucket: str, key: str) -> Entry | None:
        if self.lookups is not None:
            return self._entry_of(bucket, key, self.lookups.cache_entry(self.node_id, bucket, key))
        with self.engine.connect() as conn:
            row = conn.execute(self._get, {"n": self.node_id, "b": bucket, "k": key}).first()
        return entry_from_row(row) if row is not None else None

    def get_with_newest(self, bucket: str, key: str, owner: str | None = None) -> Lookup | None:
        """The key's newest journal version (seq, state), this node's cache row and, with
        ``owner`` (another node's id), that node's row, in one round trip where the catalog is a
        server (a GET asks them all); None elsewhere (SQLite answers each from memory between
        commits: the caller asks them one by one, and has no other node)."""
        if not isinstance(self.lookups, PgLookups):
            return None
        newest, raw, owned = self.lookups.newest_entry_and_owned(self.node_id, bucket, key, owner)
        return Lookup(newest, self._entry_of(bucket, key, raw),
                      OwnedEntry(owner, entry_from_row(Row(*owned))) if owner is not None and owned is not None else None)

    def _entry_of(self, bucket: str, key: str, raw: tuple[Any, ...] | None) -> Entry | None:
        if raw is None:
            return None
        # The lookups' memo hands back the same row object until the catalog changes: its
        # decoded Entry (the metadata's JSON) is reused with it. Entries are never mutated.
        known = self._decoded.get((bucket, key))
        if known is not None and known[0] is raw:
            return known[1]
        if len(self._decoded) >= DECODED_SIZE:
            self._decoded.clear()
        entry = entry_from_row(Row(*raw))
        self._decoded[(bucket, key)] = (raw, entry)
        return entry

    def put_ready(self, meta: ObjectMeta, bucket: str, block_size: int, tenant_id: int | None,
                  pinned: bool, started: float, cached_bytes: int = 0) -> Entry | None:
        """Record a discovered version (replacing this node's previous row for the key); None
        when a write replaced the key since ``started``, or a write of the key is still dirty in
        the journal (then nothing is cached).

        A discovery that fetched the remote before a write was destaged sees the write's row
        dirty, or, once it is durable, the tombstone that ``Journal.mark_durable`` moved to the
        destage's time, which is after ``started``. The checks and the insert are one atomic
        step against any commit that invalidates the key (``lock_key_entries``): checked first
        and inserted after such a commit, the old version would be served as current."""
        now = time.time()
        values = {"node_id": self.node_id, "bucket": bucket, "key": meta.key, "etag": meta.etag,
                  "version_id": meta.version_id, "size": meta.size, "block_size": block_size,
                  "meta_json": meta_to_json(meta), "tenant_id": tenant_id, "state": CacheState.READY.value, "pinned": pinned,
                  "cached_bytes": cached_bytes, "created_at": now, "validated_at": now, "last_access": now, "hits": 0}
        for _ in range(3):
            try:
                with self._begin(relaxed=False) as conn:
                    if self._relaxed_commit:  # lock_key_entries's lock, with the relaxed commit
                        conn.execute(self._relax_and_lock, {"space": CACHE_LOCK_SPACE,
                                                            "id": key_lock_id(bucket, meta.key)})
                    else:
                        lock_key_entries(conn, bucket, meta.key)
                    conn.execute(self._delete_own, {"n": self.node_id, "b": bucket, "k": meta.key})
                    if conn.execute(self._raced, {"b": bucket, "k": meta.key, "since": started}).scalar():
                        raise _Refused  # rolls the delete back: the previous row stays as it was
                    try:
                        inserted = conn.execute(self._insert, values).inserted_primary_key
                        assert inserted is not None  # a single-row INSERT always reports its key
                        row_id = inserted[0]
                    except IntegrityError:
                        raise _Retry from None  # another process inserted between delete and insert
            except _Refused:
                return None
            except _Retry:
                continue
            return Entry(int(row_id), bucket, meta.key, meta.etag, meta.size, block_size, meta, tenant_id, CacheState.READY,
                         cached_bytes, now, now)
        return self.get(bucket, meta.key)

    def mark_seen(self, bucket: str, key: str, tenant_id: int | None) -> bool:
        """Second-hit admission: True if this key was already seen once (admit it now)."""
        now = time.time()
        with self._begin() as conn:
            row = conn.execute(self._get, {"n": self.node_id, "b": bucket, "k": key}).first()
            if row is not None:
                return row.state == CacheState.SEEN.value
            try:
                conn.execute(insert(T).values(
                    node_id=self.node_id, bucket=bucket, key=key, etag="", size=0, block_size=1, meta_json="{}",
                    tenant_id=tenant_id, state=CacheState.SEEN.value, pinned=False, cached_bytes=0, created_at=now,
                    validated_at=now, last_access=now, hits=0))
            except IntegrityError:
                return True
        return False

    def set_checksums(self, entry_id: int, etag: str, checksums: dict[str, str]) -> bool:
        """Record the stored checksums of an entry's version (learnt after its discovery)."""
        with self._begin() as conn:
            raw = conn.execute(select(T.c.meta_json).where(T.c.id == entry_id, T.c.etag == etag)).scalar()
            if raw is None:
                return False
            data = json.loads(raw)
            data["checksums"] = dict(checksums)
            return bool(conn.execute(update(T).where(T.c.id == entry_id, T.c.etag == etag)
                                     .values(meta_json=json.dumps(data))).rowcount)

    def add_bytes(self, entry_id: int, nbytes: int) -> bool:
        """Account a published block; False when the entry is gone (evicted or replaced meanwhile)."""
        with self._begin() as conn:
            return bool(conn.execute(self._add_bytes, {"eid": entry_id, "nbytes": nbytes}).rowcount)

    def validated(self, entry_ids: Iterable[int], at: float | None = None) -> None:
        ids = list(entry_ids)
        if not ids:
            return
        with self._begin() as conn:
            for start in range(0, len(ids), 500):
                conn.execute(update(T).where(T.c.id.in_(ids[start:start + 500])).values(validated_at=at or time.time()))

    def touch(self, accesses: dict[int, tuple[float, int]]) -> None:
        """Batched access times and hit counts: {entry id: (last access, hits since last flush)}."""
        if not accesses:
            return
        with self._begin() as conn:
            conn.execute(self._touch, [{"eid": i, "at": at, "n": n} for i, (at, n) in accesses.items()])

    def changed_since(self, bucket: str, key: str, since: float) -> bool:
        """Whether a write of the key was accepted or destaged at or after ``since``, or one is
        still dirty: what ``put_ready`` refuses, asked by a reader about to share a discovery."""
        with self.engine.connect() as conn:
            if conn.execute(self._written_since, {"b": bucket, "k": key, "since": since}).scalar():
                return True
            return conn.execute(self._dirty_write, {"b": bucket, "k": key}).first() is not None

    def invalidate(self, bucket: str, key: str) -> None:
        """A write replaced ``bucket/key``: every node's entry turns invalid, and a shared
        tombstone stops discoveries that started before the write from caching old bytes."""
        with self._begin() as conn:
            invalidate_key(conn, bucket, key)

    def remove(self, entry: Entry) -> bool:
        """Delete this node's row of exactly this version; False if it changed meanwhile."""
        with self._begin() as conn:
            return bool(conn.execute(delete(T).where(T.c.id == entry.id, T.c.etag == entry.etag)).rowcount)

    def block_owners(self, after_id: int, limit: int) -> list[tuple[int, str, str, str, int, int]]:
        """(id, bucket, key, etag, size, block_size) of this node's rows that may own block files
        (ready or invalid), in id order: what the orphan sweep counts as accounted for."""
        q = (select(T.c.id, T.c.bucket, T.c.key, T.c.etag, T.c.size, T.c.block_size)
             .where(T.c.node_id == self.node_id, T.c.state.in_(HOLDS_BLOCKS), T.c.id > after_id)
             .order_by(T.c.id).limit(limit))
        with self.engine.connect() as conn:
            return [(int(r[0]), r[1], r[2], r[3], int(r[4]), int(r[5])) for r in conn.execute(q)]

    def block_count(self) -> int:
        """How many blocks this node's ready and invalid rows name (present or not)."""
        blocks = (T.c.size + T.c.block_size - 1) // T.c.block_size
        q = select(func.coalesce(func.sum(blocks), 0), func.count()).where(
            T.c.node_id == self.node_id, T.c.state.in_(HOLDS_BLOCKS))
        with self.engine.connect() as conn:
            total, rows = conn.execute(q).one()
        return max(int(total or 0), int(rows or 0))

    def invalid_entries(self, limit: int = 500) -> list[Entry]:
        q = select(*COLUMNS).where(T.c.node_id == self.node_id, T.c.state == CacheState.INVALID.value).limit(limit)
        with self.engine.connect() as conn:
            return [entry_from_row(r) for r in conn.execute(q)]

    def expire_tombstones(self, older_than: float, seen_older_than: float) -> int:
        with self._begin() as conn:
            gone = conn.execute(delete(T).where(T.c.node_id == SHARED_NODE, T.c.validated_at < older_than)).rowcount
            gone += conn.execute(delete(T).where(T.c.node_id == self.node_id, T.c.state == CacheState.SEEN.value,
                                                 T.c.last_access < seen_older_than)).rowcount
            return gone

    def lru(self, limit: int, *, tenant_id: int | None = None, bucket: str | None = None,
            after: tuple[float, int] | None = None) -> list[Entry]:
        """Least recently used ready entries of this node (optionally one tenant's or bucket's)."""
        q = select(*COLUMNS).where(T.c.node_id == self.node_id, T.c.state == CacheState.READY.value, T.c.cached_bytes > 0)
        if tenant_id is not None:
            q = q.where(T.c.tenant_id == tenant_id)
        if bucket is not None:
            q = q.where(T.c.bucket == bucket)
        if after is not None:
            q = q.where(or_(T.c.last_access > after[0], and_(T.c.last_access == after[0], T.c.id > after[1])))
        q = q.order_by(T.c.last_access, T.c.id).limit(limit)
        with self.engine.connect() as conn:
            return [entry_from_row(r) for r in conn.execute(q)]

    def under(self, bucket: str, prefix: str, after_key: str | None, limit: int) -> list[Entry]:
        """This node's entries of a bucket under a prefix, in key order (revalidation, evict)."""
        q = select(*COLUMNS).where(T.c.node_id == self.node_id, T.c.bucket == bucket, T.c.state == CacheState.READY.value)
        if prefix:
            q = q.where(T.c.key >= prefix, T.c.key < prefix + "\U0010ffff")
        if after_key is not None:
            q = q.where(T.c.key > after_key)
        q = q.order_by(T.c.key).limit(limit)
        with self.engine.connect() as conn:
            return [entry_from_row(r) for r in conn.execute(q) if r.key.startswith(prefix)]

    def buckets(self) -> list[str]:
        q = select(T.c.bucket).where(T.c.node_id == self.node_id, T.c.state == CacheState.READY.value).distinct()
        with self.engine.connect() as conn:
            return [r[0] for r in conn.execute(q)]

    def total_bytes(self, *, tenant_id: int | None = None, bucket: str | None = None) -> int:
        q = select(func.coalesce(func.sum(T.c.cached_bytes), 0)).where(T.c.node_id == self.node_id)
        if tenant_id is not None:
            q = q.where(T.c.tenant_id == tenant_id)
        if bucket is not None:
            q = q.where(T.c.bucket == bucket)
        with self.engine.connect() as conn:
            return int(conn.execute(q).scalar() or 0)

    def bytes_with(self, keys: Collection[tuple[str, str]]) -> tuple[int, dict[tuple[str, str], int]]:
        """This node's cached bytes, and those of each of ``keys`` (bucket, key), from one
        statement, so one snapshot: admission's measurement, whose promised bytes are what the
        ready rows of the keys it admitted do not hold yet (a block counted in both the total and the
        promise would shrink the budget until the next measurement)."""
        node = T.c.node_id == self.node_id
        whole = select(literal(""), literal(""), func.coalesce(func.sum(T.c.cached_bytes), 0)).where(node)
        if not keys:
            with self.engine.connect() as conn:
                return int(conn.execute(whole).one()[2] or 0), {}
        each = (select(T.c.bucket, T.c.key, func.sum(T.c.cached_bytes))
                .where(node, T.c.state == CacheState.READY.value, tuple_(T.c.bucket, T.c.key).in_(list(keys)))
                .group_by(T.c.bucket, T.c.key))
        total, held = 0, {}
        with self.engine.connect() as conn:
            for bucket, key, n in conn.execute(union_all(whole, each)):
                if bucket == "" and key == "":  # a bucket name is never empty: the total's row
                    total = int(n or 0)
                else:
                    held[(bucket, key)] = int(n or 0)
        return total, held

    def tenant_quotas(self) -> list[tuple[int, int]]:
        """(tenant id, cache quota) of every tenant that has one."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(Tenant.id, Tenant.cache_quota_bytes).where(Tenant.cache_quota_bytes.is_not(None)))
            return [(int(i), int(q)) for i, q in rows if q is not None]

    def usage(self) -> dict[str, Any]:
        """Cached bytes and entries by node, bucket and tenant (every node's rows)."""
        out: dict[str, Any] = {}
        ready = T.c.state == CacheState.READY.value
        with self.engine.connect() as conn:
            for name, column in (("node", T.c.node_id), ("bucket", T.c.bucket), ("tenant", T.c.tenant_id)):
                rows = conn.execute(select(column, func.count(), func.coalesce(func.sum(T.c.cached_bytes), 0))
                                    .where(ready).group_by(column))
                out[name] = {str(k) if k is not None else "": {"entries": int(n), "bytes": int(b)} for k, n, b in rows}
        return out

    def delete_all(self) -> tuple[int, int]:
        """Forget every entry of this node; returns how many held (or had held) blocks, and their
        bytes: read off the rows the one DELETE removed, so a fill recorded meanwhile is counted
        with its bytes or not at all (a count and a sum read apart disagreed: 1 entry, 0 bytes)."""
        with self._begin() as conn:
            gone = conn.execute(delete(T).where(T.c.node_id == self.node_id)
                                .returning(T.c.state, T.c.cached_bytes)).all()
        held = [int(size or 0) for state, size in gone if state in HOLDS_BLOCKS]
        return len(held), sum(held)
