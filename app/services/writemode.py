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

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from app.domain.versions import VersionRow
from app.services.budget import NONE as NO_RESERVATION
from app.services.budget import Reservation

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
    check_bucket: Callable[[str], Awaitable[None]]
    reserve_buffer: Callable[[int | None], Awaitable[Reservation]]
    submit: Callable[[VersionRow], None]
    buffers: bool = True
    claim_seconds: float = BUFFERED_CLAIM_SECONDS

    async def admit(self, bucket: str) -> None:
        await self.check_bucket(bucket)

    async def reserve(self, size: int | None) -> Reservation:
        return await self.reserve_buffer(size)

    async def journals(self, bucket: str, key: str) -> bool:
        return True

    async def hand_on(self, row: VersionRow) -> None:
        self.submit(row)


@dataclass(frozen=True)
class WriteThrough:
    behind_backlog: Callable[[str, str], Awaitable[bool]]
    destage_now: Callable[[VersionRow], Awaitable[None]]
    buffers: bool = False
    claim_seconds: float = THROUGH_CLAIM_SECONDS

    async def admit(self, bucket: str) -> None:
        return None  # the remote itself answers NoSuchBucket

    async def reserve(self, size: int | None) -> Reservation:
        return NO_RESERVATION

    async def journals(self, bucket: str, key: str) -> bool:
        return await self.behind_backlog(bucket, key)

    async def hand_on(self, row: VersionRow) -> None:
        await self.destage_now(row)
