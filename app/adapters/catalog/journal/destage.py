"""The journal's destage moves: a row's claim with a lease, its renewal, and the moves that end
a destage (durable, retry, superseded), plus the repairs (expired leases, retry now).

Split from ``journal.py`` (appending and reading rows); ``Journal`` inherits these. Every state
change goes through ``move_rows`` (``moves.py``), which checks the state table.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, and_, bindparam, exists, select, text, update
from sqlalchemy.orm import aliased

from app.adapters.catalog.cache.entry_rows import invalidate_key
from app.adapters.catalog.control.remotes import check_route
from app.adapters.catalog.engine import Sessions, affected
from app.adapters.catalog.journal.moves import move_rows, prepared_move
from app.adapters.catalog.journal.rows import version_row
from app.adapters.catalog.tables import ObjectVersion
from app.adapters.catalog.uploads.remote_opening import key_lock_id, opener_of_key
from app.domain.routing import RouteStamp
from app.domain.states import VersionState
from app.domain.versions import VersionRow

# A claim and the has-newer check run for every destage, the small write's too: their statements
# are built once (with parameters) rather than per call. The claim moves BUFFERED -> DESTAGING
# unless another row of the key holds a live lease, or one that ended less than the takeover
# grace ago (``since``), or an eager part copy is opening a remote upload of the key.
_OTHER = aliased(ObjectVersion)
_CLAIM_READ = select(ObjectVersion.state, ObjectVersion.generation, ObjectVersion.node_id, ObjectVersion.bucket,
                     ObjectVersion.key).where(ObjectVersion.seq == bindparam("seq"))
_CLAIM = prepared_move(
    [VersionState.BUFFERED], VersionState.DESTAGING,
    ObjectVersion.seq == bindparam("b_seq"), ObjectVersion.generation == bindparam("b_generation"),
    ~exists().where(_OTHER.bucket == bindparam("b_bucket"), _OTHER.key == bindparam("b_key"), _OTHER.seq != bindparam("b_seq"),
                    _OTHER.state == VersionState.DESTAGING.value, _OTHER.lease_until > bindparam("b_since")),
    ~opener_of_key(bindparam("b_bucket"), bindparam("b_key"), bindparam("b_now")),
    generation=ObjectVersion.generation + 1, lease_until=bindparam("b_until"), attempts=ObjectVersion.attempts + 1)
# Every destage ends in this commit (``mark_durable``), the small write's too.
_DURABLE = prepared_move(
    [VersionState.DESTAGING], VersionState.DURABLE,
    ObjectVersion.seq == bindparam("b_seq"), ObjectVersion.generation == bindparam("b_generation"),
    generation=ObjectVersion.generation + 1, remote_etag=bindparam("b_etag"), remote_version_id=bindparam("b_version"),
    durable_at=bindparam("b_at"), last_error=None, lease_until=0.0)
_HAS_NEWER = select(ObjectVersion.seq).where(ObjectVersion.bucket == bindparam("bucket"),
                                             ObjectVersion.key == bindparam("key"),
                                             ObjectVersion.seq > bindparam("seq")).limit(1)


class DestageMoves:
    """Needs the attributes ``Journal.__init__`` sets and its ``get``."""

    node_id: str
    engine: Engine
    takeover_grace: float
    clock: Callable[[], float]
    sessions: Sessions
    bookkeeping: Sessions
    is_postgres: bool

    def get(self, seq: int) -> VersionRow | None:
        raise NotImplementedError

    def claim(self, seq: int, lease_seconds: float) -> VersionRow | None:
        """BUFFERED -> DESTAGING with a lease, unless another row of the key holds a live lease
        or one that ended less than the takeover grace ago (its holder may still be writing), or
        an eager part copy is opening a remote upload of the key (``uploads/remote_opening.py``).
        Returns the claimed row as committed (read in the claim's transaction)."""
        now = self.clock()
        with self.bookkeeping.begin() as s:
            conn = s.connection()
            found = conn.execute(_CLAIM_READ, {"seq": seq}).first()
            if found is None or found.state != VersionState.BUFFERED.value:
                return None
            if self.is_postgres and found.node_id != self.node_id:
                return None  # a shared catalog: its bytes are on another node (or it was taken over)
            if self.is_postgres:
                conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": key_lock_id(found.bucket, found.key)})
            moved = conn.execute(_CLAIM, {"b_seq": seq, "b_generation": found.generation, "b_bucket": found.bucket,
                                          "b_key": found.key, "b_since": now - self.takeover_grace, "b_now": now,
                                          "b_until": now + lease_seconds}).rowcount
            if moved != 1:
                return None
            row = s.get(ObjectVersion, seq)
            return version_row(row) if row is not None else None

    def has_newer(self, row: VersionRow) -> bool:
        with self.engine.connect() as conn:
            return conn.execute(_HAS_NEWER, {"bucket": row.bucket, "key": row.key, "seq": row.seq}).first() is not None

    def renew(self, row: VersionRow, lease_seconds: float) -> bool:
        """Extend a DESTAGING row's lease (no move: the state is not written)."""
        with self.bookkeeping.begin() as s:
            result = s.execute(
                update(ObjectVersion)
                .where(ObjectVersion.seq == row.seq, ObjectVersion.state == VersionState.DESTAGING.value,
                       ObjectVersion.generation == row.generation)
                .values(lease_until=self.clock() + lease_seconds).execution_options(synchronize_session=False))
            return affected(result) == 1

    def record_remote_upload(self, row: VersionRow, remote_upload_id: str) -> bool:
        """The remote multipart upload a DESTAGING row's holder just created, named on the row
        before any part is sent: a destage killed mid-upload leaves it owned (never a leak the
        remote-uploads sweep waits days for), and the retry resumes it (only missing parts go)."""
        with self.bookkeeping.begin() as s:
            result = s.execute(
                update(ObjectVersion)
                .where(ObjectVersion.seq == row.seq, ObjectVersion.state == VersionState.DESTAGING.value,
                       ObjectVersion.generation == row.generation)
                .values(remote_upload_id=remote_upload_id).execution_options(synchronize_session=False))
            return affected(result) == 1

    def mark_durable(self, row: VersionRow, remote_etag: str, remote_version: str | None, *,
                     invalidate_cache: bool = False, relaxed: bool = False, route: RouteStamp | None = None) -> bool:
        """DESTAGING -> DURABLE. With ``invalidate_cache`` the key's cache entries and tombstone move in the
        same commit: a discovery that fetched the remote before this version landed (so it may hold the
        older one) never records it (CacheIndex.put_ready). ``relaxed``: only if no blob file is dropped.
        ``route``: where the upload went; raises ``RouteMoved`` (nothing committed) if the bucket maps
        elsewhere now (``remotes.check_route``, before the cache locks, in a remap's lock order)."""
        with (self.bookkeeping if relaxed else self.sessions).begin() as s:
            conn = s.connection()
            moved = conn.execute(_DURABLE, {"b_seq": row.seq, "b_generation": row.generation, "b_etag": remote_etag,
                                            "b_version": remote_version, "b_at": datetime.now(UTC)}).rowcount
            if moved != 1:
                return False
            if route is not None:
                check_route(conn, row.bucket, route)
            if invalidate_cache:
                invalidate_key(conn, row.bucket, row.key)
            return True

    def make_due(self, seq: int) -> bool:
        """A buffered row's next attempt is now (the repair after a lost destage)."""
        with self.bookkeeping.begin() as s:
            result = s.execute(update(ObjectVersion).where(ObjectVersion.seq == seq,
                                                           ObjectVersion.state == VersionState.BUFFERED.value)
                               .values(next_attempt_at=0.0).execution_options(synchronize_session=False))
            return affected(result) == 1

    def mark_superseded(self, row: VersionRow) -> bool:
        """The row's state (as read) -> SUPERSEDED; raises if the table forbids it (a final row)."""
        return self.move(row, VersionState.SUPERSEDED, lease_until=0.0)

    def mark_retry(self, row: VersionRow, error: str, retry_at: float, *, failed: bool) -> bool:
        target = VersionState.FAILED if failed else VersionState.BUFFERED
        return self.move(row, target, expected=VersionState.DESTAGING, last_error=error[:2000],
                         next_attempt_at=retry_at, lease_until=0.0, relaxed=True)

    def move(self, row: VersionRow, target: VersionState, *, expected: VersionState | None = None,
             relaxed: bool = False, **values: Any) -> bool:
        """Compare-and-swap ``expected`` (default: ``row.state`` as read) -> ``target`` on (state,
        generation), checked against the state table (an illegal move raises). ``relaxed``: a
        bookkeeping commit (see ``__init__``)."""
        current = row.state if expected is None else expected
        with (self.bookkeeping if relaxed else self.sessions).begin() as s:
            return move_rows(s.connection(), [current], target, ObjectVersion.seq == row.seq,
                             ObjectVersion.generation == row.generation,
                             generation=ObjectVersion.generation + 1, **values) == 1

    def release_expired_leases(self, now: float | None = None) -> int:
        """DESTAGING rows whose worker died (lease ran out) go back to BUFFERED, once the takeover
        grace has passed too: a holder whose lease lapsed (the catalog restarting) may still have
        a write request in flight until then, never after (``app/domain/fencing.py``)."""
        now = self.clock() if now is None else now
        with self.bookkeeping.begin() as s:
            return move_rows(s.connection(), [VersionState.DESTAGING], VersionState.BUFFERED,
                             ObjectVersion.lease_until < now - self.takeover_grace, generation=ObjectVersion.generation + 1,
                             next_attempt_at=now, last_error="destage lease expired (worker lost)")

    def retry_now(self, bucket: str | None = None, prefix: str = "", include_failed: bool = True) -> int:
        """Make buffered (and failed) rows due immediately: the flush. Buffered rows stay buffered
        (no move, state not written); failed ones move FAILED -> BUFFERED. Attempts are kept: a
        row that cannot succeed gets one more try and is FAILED again with its error, instead of
        a fresh set of attempts at every flush (``flush --wait`` would wait on it for ever). The
        operator's retry of one row (``JournalQueries.retry``) is what starts its count anew."""
        cond: list[Any] = []
        if bucket:
            cond.append(ObjectVersion.bucket == bucket)
        if prefix:
            cond.append(and_(ObjectVersion.key >= prefix, ObjectVersion.key < prefix + "\U0010ffff"))
        reset = {"next_attempt_at": 0.0, "generation": ObjectVersion.generation + 1}
        with self.sessions.begin() as s:
            conn = s.connection()
            # Buffered first, so rows the second statement moves are not counted (or bumped) twice.
            done = int(conn.execute(update(ObjectVersion).where(
                ObjectVersion.state == VersionState.BUFFERED.value, *cond).values(**reset)
                .execution_options(synchronize_session=False)).rowcount or 0)
            if include_failed:
                done += move_rows(conn, [VersionState.FAILED], VersionState.BUFFERED, *cond, **reset)
            return done
