"""What a write must pass before its body is read: the bucket exists, and the disk and the write
buffer can hold it. Two small collaborators of the write services and their modes
(``modes.py``), each holding its own state.

- ``KnownBuckets``: NoSuchBucket before a write is accepted, without asking the remote on every
  request: a bucket the remote confirmed in the last minutes is trusted, so writes go on during
  an outage (and a bucket the journal has written to before, while the remote is unreachable).
- ``WriteAdmission``: backpressure. A write the disk, the buffer or the tenant's share of it
  cannot hold is refused (SlowDown) before its bytes are read; the reservation is released when
  the body ends.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from app.domain.errors import S3Error
from app.services.bodies import BUCKET_TRUST_SECONDS
from app.services.writes.budget import CURRENT_TENANT, DiskReserve, Reservation, WriteBudget, slow_down
from app.services.writes.budget import NONE as NO_RESERVATION

Run = Callable[..., Awaitable[Any]]  # the services' thread runner (GatewayCore._run)

DIRTY_REREAD_SECONDS = 0.2


class BucketProbe(Protocol):
    def head_bucket(self, bucket: str) -> None: ...


class JournalFacts(Protocol):
    def has_bucket(self, bucket: str) -> bool: ...
    def dirty_bytes(self) -> int: ...


class KnownBuckets:
    def __init__(self, remote: BucketProbe, journal: JournalFacts, run: Run) -> None:
        self.remote = remote
        self.journal = journal
        self.run = run
        self._confirmed: dict[str, float] = {}  # bucket -> when the remote last confirmed it

    async def check(self, bucket: str) -> None:
        """NoSuchBucket (or the remote's error) unless the bucket is known to exist."""
        confirmed = self._confirmed.get(bucket)
        if confirmed is not None and time.monotonic() - confirmed < BUCKET_TRUST_SECONDS:
            return
        try:
            await self.run(self.remote.head_bucket, bucket)
        except S3Error as err:
            # Remote unreachable (e.g. just after a restart during an outage): a bucket the
            # journal has written to before is known to exist, so writes go on.
            if err.status < 500 or not await self.run(self.journal.has_bucket, bucket):
                raise
        self.confirm(bucket)

    def confirm(self, bucket: str) -> None:
        """The remote just said the bucket exists (a create, a HEAD)."""
        self._confirmed[bucket] = time.monotonic()

    def forget(self, bucket: str) -> None:
        """The bucket is being deleted: the next write asks the remote again."""
        self._confirmed.pop(bucket, None)


class WriteAdmission:
    def __init__(self, budget: WriteBudget, disk: DiskReserve | None, journal: JournalFacts, run: Run) -> None:
        self.budget = budget  # bodies being received by this process
        self.disk = disk  # the data directory's free space, when budgeted against it
        self.journal = journal
        self.run = run
        self.dirty_cached = 0  # the journal's dirty bytes as last read (see dirty_bytes)
        self.dirty_read_at = -1.0

    async def reserve(self, size: int | None, write_back: bool = True) -> Reservation:
        """Room for a body of ``size`` bytes (None: unknown), or SlowDown. Write-through bodies
        only need the disk's room; write-back ones count against the buffer too."""
        want = size or 0
        if self.disk is not None and self.disk.spare() < self.budget.reserved + want:
            raise slow_down("The data directory's disk is nearly full; retry later.")
        if not write_back:
            return NO_RESERVATION
        dirty = await self.dirty_bytes()
        return self.budget.admit(want, dirty, CURRENT_TENANT.get())

    def release(self, reservation: Reservation) -> None:
        self.budget.release(reservation)

    def added(self, nbytes: int) -> None:
        """This process just journaled ``nbytes``: counted until the next re-read."""
        self.dirty_cached += nbytes

    async def dirty_bytes(self) -> int:
        """The buffer's fill, re-read at most every DIRTY_REREAD_SECONDS: an aggregate over the
        journal costs more than a small write itself, and this process's own bodies in flight are
        counted exactly in ``budget.reserved``."""
        now = time.monotonic()
        if now - self.dirty_read_at > DIRTY_REREAD_SECONDS:
            self.dirty_cached = await self.run(self.journal.dirty_bytes)
            self.dirty_read_at = now
        return self.dirty_cached
