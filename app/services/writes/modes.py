"""Write-back vs write-through, chosen once per write as one strategy object.

The write services (put, copy, delete, Complete) ask the mode four things instead of branching:
what admits a write (``admit``), what it reserves of the write buffer (``reserve``), whether it
goes through the journal (``journals``), and what happens to its committed row (``hand_on``).

- ``WriteBack``: the bucket is checked without asking the remote each time, the body counts
  against the buffer, every write is journaled and handed to the executor.
- ``WriteThrough``: the remote answers for the bucket, nothing is reserved; a write is journaled
  only behind a backlog of the key (older rows not yet on the remote), and then destaged inline.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from app.domain.versions import VersionRow
from app.services.destage.executor import Executor
from app.services.writes.admission import KnownBuckets, Run, WriteAdmission
from app.services.writes.budget import NONE as NO_RESERVATION
from app.services.writes.budget import Reservation

log = logging.getLogger("ferry.gateway")  # the inline destage logged there before

# How long a Complete's claim holds before another Complete may take the upload over (the
# claimer crashed). Write-through uploads the whole object under it, hence the longer lease.
BUFFERED_CLAIM_SECONDS = 60.0
THROUGH_CLAIM_SECONDS = 3600.0


class WriteMode(Protocol):
    @property
    def buffers(self) -> bool: ...  # whether accepted bodies wait in the local buffer for the destage
    @property
    def claim_seconds(self) -> float: ...  # a Complete's claim lease under this mode

    async def admit(self, bucket: str) -> None: ...
    async def reserve(self, size: int | None) -> Reservation: ...
    async def journals(self, bucket: str, key: str) -> bool: ...
    async def hand_on(self, row: VersionRow) -> None: ...


@dataclass(frozen=True)
class WriteBack:
    """The bucket is known to exist (without a remote request each time), the body counts
    against the write buffer, and the committed row goes to the executor."""

    buckets: KnownBuckets
    admission: WriteAdmission
    executor: Executor
    buffers: bool = True
    claim_seconds: float = BUFFERED_CLAIM_SECONDS

    async def admit(self, bucket: str) -> None:
        await self.buckets.check(bucket)

    async def reserve(self, size: int | None) -> Reservation:
        return await self.admission.reserve(size)

    async def journals(self, bucket: str, key: str) -> bool:
        return True

    async def hand_on(self, row: VersionRow) -> None:
        self.executor.submit(row.seq)


class Backlog(Protocol):
    def has_dirty(self, bucket: str, key: str) -> bool: ...


class InlineDestage(Protocol):
    def destage(self, seq: int) -> str: ...


@dataclass(frozen=True)
class WriteThrough:
    """The remote answers for the bucket and nothing is reserved; a write is journaled only
    behind a backlog of its key, and then destaged before the answer when it can go now."""

    journal: Backlog
    destager: InlineDestage
    executor: Executor
    run: Run
    buffers: bool = False
    claim_seconds: float = THROUGH_CLAIM_SECONDS

    async def admit(self, bucket: str) -> None:
        return None  # the remote itself answers NoSuchBucket

    async def reserve(self, size: int | None) -> Reservation:
        return NO_RESERVATION

    async def journals(self, bucket: str, key: str) -> bool:
        """Whether this write must be journaled instead: the key still has rows not on the
        remote, and a write sent around them would be overwritten (or undone) by their destage,
        and reads would serve the older row meanwhile."""
        return bool(await self.run(self.journal.has_dirty, bucket, key))

    async def hand_on(self, row: VersionRow) -> None:
        """A write journaled behind a backlog: destaged before answering when it can go now. The
        older rows are superseded by it; if one is still being uploaded, or the remote fails,
        the row stays buffered (acknowledged) and the executor sends it later."""
        try:
            if await self.run(self.destager.destage, row.seq) == "durable":
                return
        except Exception:  # the row is committed: the write stands, the executor retries it
            log.warning("inline destage of seq %s failed", row.seq, exc_info=True)
        self.executor.submit(row.seq)
