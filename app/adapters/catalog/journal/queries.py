"""Read-only views of the write journal for operators, plus the one-row retry button.

Kept apart from ``journal.py`` (the destage hot path): these queries are for the admin API.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import Engine, func, select

from app.adapters.catalog.engine import Sessions
from app.adapters.catalog.errors import Conflict, NotFound
from app.adapters.catalog.journal.moves import move_rows
from app.adapters.catalog.tables import ObjectVersion
from app.domain.states import DIRTY, VersionState

DIRTY_VALUES = tuple(s.value for s in DIRTY)


def _aware(when: datetime) -> datetime:
    return when if when.tzinfo else when.replace(tzinfo=UTC)


@dataclass(frozen=True)
class JournalEntry:
    seq: int
    bucket: str
    key: str
    op: str
    state: str
    size: int
    node_id: str
    attempts: int
    last_error: str | None
    created_at: datetime
    next_attempt_at: float


@dataclass(frozen=True)
class JournalSummary:
    counts: dict[str, int]
    dirty_objects: int
    dirty_bytes: int
    oldest_dirty_seq: int | None
    oldest_dirty_created_at: datetime | None


class JournalQueries:
    def __init__(self, engine: Engine) -> None:
        self.sessions = Sessions(engine)

    def entries(self, states: list[str], bucket: str | None = None, prefix: str = "", limit: int = 100,
                after_seq: int = 0) -> list[JournalEntry]:
        """Rows in the given (internal) states, oldest first: the head of the outbox."""
        stmt = (select(ObjectVersion).where(ObjectVersion.state.in_(states), ObjectVersion.seq > after_seq)
                .order_by(ObjectVersion.seq).limit(limit))
        if bucket:
            stmt = stmt.where(ObjectVersion.bucket == bucket)
        if prefix:
            stmt = stmt.where(ObjectVersion.key >= prefix, ObjectVersion.key < prefix + "\U0010ffff")
        with self.sessions() as s:
            return [JournalEntry(r.seq, r.bucket, r.key, r.op, r.state, r.size, r.node_id, r.attempts, r.last_error,
                                 _aware(r.created_at), r.next_attempt_at) for r in s.scalars(stmt)]

    def summary(self, bucket: str | None = None, prefix: str = "", upto_seq: int | None = None) -> JournalSummary:
        """Counts by state, and how much and how old the data not yet on the remote is."""
        cond = []
        if bucket:
            cond.append(ObjectVersion.bucket == bucket)
        if prefix:
            cond += [ObjectVersion.key >= prefix, ObjectVersion.key < prefix + "\U0010ffff"]
        if upto_seq is not None:
            cond.append(ObjectVersion.seq <= upto_seq)
        dirty = ObjectVersion.state.in_(DIRTY_VALUES)
        with self.sessions() as s:
            counts = {state: int(n) for state, n in
                      s.execute(select(ObjectVersion.state, func.count()).where(*cond).group_by(ObjectVersion.state))}
            n, nbytes, oldest = s.execute(select(func.count(), func.coalesce(func.sum(ObjectVersion.size), 0),
                                                 func.min(ObjectVersion.seq)).where(dirty, *cond)).one()
            created = None
            if oldest is not None:
                created = s.scalar(select(ObjectVersion.created_at).where(ObjectVersion.seq == oldest))
        for state in VersionState:
            counts.setdefault(state.value, 0)
        return JournalSummary(counts, int(n or 0), int(nbytes or 0), oldest,
                              _aware(created) if created is not None else None)

    def retry(self, seq: int) -> JournalEntry:
        """FAILED -> BUFFERED, due now, with its attempts reset (the operator fixed the cause)."""
        with self.sessions.begin() as s:
            row = s.get(ObjectVersion, seq)
            if row is None:
                raise NotFound(f"no journal row {seq}")
            current = VersionState(row.state)
            if current != VersionState.FAILED:
                raise Conflict(f"journal row {seq} is {current.value}, not failed")
            moved = move_rows(s.connection(), [current], VersionState.BUFFERED, ObjectVersion.seq == seq,
                              ObjectVersion.generation == row.generation, attempts=0, next_attempt_at=0.0,
                              generation=ObjectVersion.generation + 1)
            if moved != 1:
                raise Conflict(f"journal row {seq} changed concurrently; try again")
        with self.sessions() as s:
            r = s.get(ObjectVersion, seq)
            assert r is not None
            return JournalEntry(r.seq, r.bucket, r.key, r.op, r.state, r.size, r.node_id, r.attempts, r.last_error,
                                _aware(r.created_at), r.next_attempt_at)


def age_seconds(when: datetime | None, now: float | None = None) -> float | None:
    if when is None:
        return None
    return round(max(0.0, (now or time.time()) - when.timestamp()), 3)
