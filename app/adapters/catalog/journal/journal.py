"""The write journal (``object_versions``): the outbox of write-back.

A write is acknowledged only after its row commits; the destage worker moves the row through
``domain.states`` with compare-and-swap updates guarded by ``generation``. Per key, only the
newest row is ever uploaded and only one row at a time holds a destage lease, so an older
version can never land on the remote after a newer one (a worker that outlives its lease is
fenced by conditional requests, see ``services/destage/destager.py``). Writes in every mode go through
here while a key has dirty rows (``has_dirty``), so they are ordered after them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Engine, and_, bindparam, delete, exists, func, or_, select, update
from sqlalchemy.orm import aliased

from app.adapters.catalog.cache.hotpath import lookups_for
from app.adapters.catalog.engine import Sessions, affected
from app.adapters.catalog.journal.destage import DestageMoves
from app.adapters.catalog.journal.rows import NEWEST_ROW, after_json, version_row
from app.adapters.catalog.tables import JournalReplica, MultipartPart, ObjectVersion, table
from app.adapters.catalog.unit_of_work import UnitsOfWork
from app.domain.states import DIRTY, TERMINAL, VersionState
from app.domain.versions import BlobRef, VersionRow

__all__ = ["BlobRef", "Journal", "VersionRow"]  # the records its rows become, for its callers

DIRTY_VALUES = tuple(s.value for s in DIRTY)
_INLINE_BODY = select(ObjectVersion.inline_body).where(ObjectVersion.seq == bindparam("seq"))  # once per small destage


class Journal(DestageMoves):
    def __init__(self, engine: Engine, node_id: str, *, bookkeeping: Engine | None = None,
                 takeover_grace: float = 0.0, clock: Callable[[], float] = time.time) -> None:
        """``takeover_grace``: seconds after a destage lease ends before another worker may take
        its row (``claim``, ``release_expired_leases``): at least as long as a write request of
        the old holder may still be in flight at the remote (``app/domain/fencing.py``).
        ``clock``: the leases' wall clock (a fake one in tests).
        ``bookkeeping``: an engine (SQLite at ``synchronous=NORMAL``) for the commits whose loss
        in a power cut only repeats work (a destage's claim, lease renewal, retry schedule): they
        skip the WAL fsync, so a destage costs one fsync (its final move), and a later FULL commit
        makes them durable in order. A kill -9 loses none of them. Never for a write's row or a
        move after which blobs are dropped."""
        self.engine = engine
        self.node_id = node_id
        self.takeover_grace = takeover_grace
        self.clock = clock
        self.sessions = Sessions(engine)
        self.units = UnitsOfWork(engine, node_id)  # a write's commit: the service composes it
        self.bookkeeping = Sessions(bookkeeping or engine)
        self.is_postgres = engine.dialect.name == "postgresql"
        self.lookups = lookups_for(engine)
        t = table(ObjectVersion)
        self._dirty = (select(t.c.seq).where(t.c.bucket == bindparam("b"), t.c.key == bindparam("k"),
                                             t.c.state.in_(DIRTY_VALUES)).limit(1))

    def newest_seq(self, bucket: str, key: str) -> int | None:
        """The key's newest journal row, whatever its state (None: the journal has none)."""
        with self.sessions() as s:
            found = s.execute(NEWEST_ROW, {"b": bucket, "k": key}).first()
        return int(found[0]) if found else None

    def renamed_away(self, put: VersionRow) -> int | None:
        """The buffered delete of a rename whose put is ``put`` (None: the row is no rename's)."""
        with self.sessions() as s:
            return s.scalar(select(ObjectVersion.seq).where(
                ObjectVersion.bucket == put.bucket, ObjectVersion.op == "delete",
                ObjectVersion.state == VersionState.BUFFERED.value, ObjectVersion.seq > put.seq,
                ObjectVersion.headers_json == after_json(put.seq)).limit(1))

    # ---- reading -------------------------------------------------------------------------------
    def get(self, seq: int) -> VersionRow | None:
        with self.sessions() as s:
            r = s.get(ObjectVersion, seq)
            return version_row(r) if r else None

    def inline_body(self, seq: int) -> bytes | None:
        """The body kept in row ``seq`` (``INLINE_BLOB``); None once the row is final or gone."""
        with self.engine.connect() as conn:
            return conn.scalar(_INLINE_BODY, {"seq": seq})

    def latest_dirty(self, bucket: str, key: str) -> VersionRow | None:
        """The newest row for the key if it is not yet durable (read-your-writes), else None.

        Every GET asks this, and the answer is nearly always "nothing buffered": a prebuilt Core
        statement reads only (seq, state); the ORM loads the row only when it is dirty."""
        if self.lookups is not None:
            newest = self.lookups.newest_version(bucket, key)
        else:
            with self.engine.connect() as conn:
                found = conn.execute(NEWEST_ROW, {"b": bucket, "k": key}).first()
            newest = (found.seq, found.state) if found is not None else None
        return self.dirty_row(newest)

    def dirty_row(self, newest: tuple[int, str] | None) -> VersionRow | None:
        """``latest_dirty``'s answer from the key's newest (seq, state), looked up by the caller
        (with the cache row, in one statement: ``CacheIndex.get_with_newest``)."""
        if newest is None or newest[1] not in DIRTY_VALUES:
            return None
        with self.sessions() as s:
            r = s.get(ObjectVersion, newest[0])
        return version_row(r) if r is not None else None

    def has_dirty(self, bucket: str, key: str) -> bool:
        """Whether any row of the key is not on the remote yet: a write of the key in any mode
        must then be journaled behind it, or the backlog's destage would land over it."""
        with self.engine.connect() as conn:
            return conn.execute(self._dirty, {"b": bucket, "k": key}).first() is not None

    def newest(self, bucket: str, key: str) -> VersionRow | None:
        """The key's newest row, whatever its state (the repair after a lost destage)."""
        with self.sessions() as s:
            r = s.scalars(select(ObjectVersion).where(ObjectVersion.bucket == bucket, ObjectVersion.key == key)
                          .order_by(ObjectVersion.seq.desc()).limit(1)).first()
            return version_row(r) if r is not None else None

    def dirty_under(self, bucket: str, prefix: str, after: str | None, limit: int) -> list[VersionRow]:
        """Newest dirty row per key under a prefix, keys after ``after``, in key order."""
        newer = aliased(ObjectVersion)
        stmt = (
            select(ObjectVersion)
            .where(ObjectVersion.bucket == bucket, ObjectVersion.state.in_(DIRTY_VALUES),
                   ~exists().where(newer.bucket == ObjectVersion.bucket, newer.key == ObjectVersion.key,
                                   newer.seq > ObjectVersion.seq))
            .order_by(ObjectVersion.key)
        )
        if prefix:
            stmt = stmt.where(ObjectVersion.key >= prefix, ObjectVersion.key < prefix + "\U0010ffff")
        if after:
            stmt = stmt.where(ObjectVersion.key > after)
        with self.sessions() as s:
            return [version_row(r) for r in s.scalars(stmt.limit(limit)) if r.key.startswith(prefix)][:limit]

    def versions(self, bucket: str, prefix: str = "", limit: int = 1000) -> list[VersionRow]:
        """All journal rows under a prefix, newest first (durability report)."""
        with self.sessions() as s:
            stmt = (select(ObjectVersion).where(ObjectVersion.bucket == bucket)
                    .order_by(ObjectVersion.seq.desc()).limit(limit))
            if prefix:
                stmt = stmt.where(ObjectVersion.key >= prefix, ObjectVersion.key < prefix + "\U0010ffff")
            return [version_row(r) for r in s.scalars(stmt)]

    def has_bucket(self, bucket: str) -> bool:
        """Whether any write to this bucket was ever journaled (so the remote accepted it once)."""
        with self.sessions() as s:
            return s.scalar(select(ObjectVersion.seq).where(ObjectVersion.bucket == bucket).limit(1)) is not None

    def max_seq(self) -> int:
        with self.sessions() as s:
            return int(s.scalar(select(func.coalesce(func.max(ObjectVersion.seq), 0))) or 0)

    def pending_count(self, bucket: str | None, prefix: str, upto_seq: int) -> dict[str, int]:
        """Counts by state of rows at or below ``upto_seq`` that are not durable yet."""
        stmt = (select(ObjectVersion.state, func.count()).where(ObjectVersion.seq <= upto_seq,
                ObjectVersion.state.in_(DIRTY_VALUES)).group_by(ObjectVersion.state))
        if bucket:
            stmt = stmt.where(ObjectVersion.bucket == bucket)
        if prefix:
            stmt = stmt.where(ObjectVersion.key >= prefix, ObjectVersion.key < prefix + "\U0010ffff")
        with self.sessions() as s:
            return {state: int(n) for state, n in s.execute(stmt)}

    def dirty_bytes(self) -> int:
        """Bytes not yet on the remote that this node's disk holds: its dirty versions, parts
        of open multipart uploads, and the copies it holds of other nodes' dirty versions
        (``write_replicas: 2``); the write buffer and the cache budget are per node."""
        with self.sessions() as s:
            versions = s.scalar(select(func.coalesce(func.sum(ObjectVersion.size), 0))
                                .where(ObjectVersion.state.in_(DIRTY_VALUES), ObjectVersion.node_id == self.node_id)) or 0
            parts = s.scalar(select(func.coalesce(func.sum(MultipartPart.size), 0)).where(
                or_(MultipartPart.node_id == self.node_id, MultipartPart.node_id.is_(None)))) or 0
            copies = s.scalar(select(func.coalesce(func.sum(ObjectVersion.size), 0))
                              .join(JournalReplica, and_(JournalReplica.seq == ObjectVersion.seq,
                                                         JournalReplica.node_id == self.node_id))
                              .where(ObjectVersion.state.in_(DIRTY_VALUES))) or 0
        return int(versions) + int(parts) + int(copies)

    def due(self, limit: int = 1000, now: float | None = None, node_id: str | None = None,
            resend_after: float = 0.0) -> list[int]:
        """Buffered rows whose retry time has come (the outbox sweeper re-enqueues these).

        A fleet node passes its ``node_id``: a row's bytes are on the node that accepted it, so
        only that node's worker can destage it. With ``resend_after``, the rows returned are not
        due again for that long (not a state move: the row stays buffered and any worker may
        claim it): a row whose message is still queued behind a backlog is not sent again on
        every sweep, which would grow the queue faster than workers drain it; a message that was
        lost is sent again once that time has passed.
        """
        now = time.time() if now is None else now
        stmt = (select(ObjectVersion.seq)
                .where(ObjectVersion.state == VersionState.BUFFERED.value, ObjectVersion.next_attempt_at <= now)
                .order_by(ObjectVersion.seq).limit(limit))
        if node_id is not None:
            stmt = stmt.where(ObjectVersion.node_id == node_id)
        with self.sessions.begin() as s:
            seqs = list(s.scalars(stmt))
            if seqs and resend_after > 0:
                s.execute(update(ObjectVersion)
                          .where(ObjectVersion.seq.in_(seqs), ObjectVersion.state == VersionState.BUFFERED.value,
                                 ObjectVersion.next_attempt_at <= now)
                          .values(next_attempt_at=now + resend_after).execution_options(synchronize_session=False))
            return seqs

    def blobs_referenced(self, blob_ids: Sequence[str]) -> set[str]:
        """Which of these blob ids a dirty row or an open upload still references."""
        wanted = set(blob_ids)
        found: set[str] = set()
        with self.sessions() as s:
            for (blobs_json,) in s.execute(select(ObjectVersion.blobs_json)
                                           .where(ObjectVersion.state.in_(DIRTY_VALUES))):
                found |= {b[0] for b in json.loads(blobs_json)} & wanted
            found |= set(s.scalars(select(MultipartPart.blob).where(MultipartPart.blob.in_(wanted))))
            found |= set(s.scalars(select(MultipartPart.replica_blob).where(  # copies of parts of other nodes
                MultipartPart.replica_blob.in_(wanted), MultipartPart.replica_node == self.node_id)))
            for (blobs_json,) in s.execute(select(JournalReplica.blobs_json)
                                           .where(JournalReplica.node_id == self.node_id)):
                found |= {b[0] for b in json.loads(blobs_json)} & wanted  # copies held for other nodes
        return found

    # ---- compaction ----------------------------------------------------------------------------
    def compact(self, retention_seconds: float, now: datetime | None = None, batch: int = 1000) -> int:
        """Delete durable and superseded rows that left the buffer more than ``retention_seconds``
        ago; returns how many. Kept whatever their age: a row with an older dirty row of its key
        (that row's destage asks ``has_newer`` and must still see it, or it would overwrite a
        newer version remotely) and the newest row of each bucket (``has_bucket`` lets writes go
        on during an outage). Dirty rows are never touched: reads, listings and conditional
        checks only ever look at dirty rows, so they answer the same after a compaction."""
        cutoff = (now or datetime.now(UTC)) - timedelta(seconds=retention_seconds)
        done = 0
        while True:
            with self.sessions.begin() as s:
                deleted = affected(s.execute(delete(ObjectVersion).where(ObjectVersion.seq.in_(
                    self._compactable(cutoff, batch))).execution_options(synchronize_session=False)))
            done += deleted
            if deleted < batch:
                return done

    @staticmethod
    def _compactable(cutoff: datetime, batch: int) -> Any:
        row, older, newer = aliased(ObjectVersion), aliased(ObjectVersion), aliased(ObjectVersion)
        return (select(row.seq).where(
            row.state.in_(sorted(s.value for s in TERMINAL)),  # final: deleting them skips no move
            func.coalesce(row.durable_at, row.created_at) < cutoff,
            ~exists().where(older.bucket == row.bucket, older.key == row.key, older.seq < row.seq,
                            older.state.in_(DIRTY_VALUES)),
            exists().where(newer.bucket == row.bucket, newer.seq > row.seq),
        ).order_by(row.seq).limit(batch))

    def dirty_for_node(self, limit: int = 10_000) -> list[int]:
        with self.sessions() as s:
            return list(s.scalars(select(ObjectVersion.seq).where(
                ObjectVersion.node_id == self.node_id,
                or_(ObjectVersion.state == VersionState.BUFFERED.value,
                    ObjectVersion.state == VersionState.DESTAGING.value)).order_by(ObjectVersion.seq).limit(limit)))
