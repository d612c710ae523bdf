"""Admission of bodies into the write buffer: the whole buffer, each tenant's share, the disk.

A body's declared size is reserved before any of its bytes are read and released when the
request ends (stored, refused or timed out). One tenant's reservations are capped (a share of
the buffer beyond its first body, and a number of bodies in flight), so a tenant that opens many
slow uploads gets ``SlowDown`` while the others go on. Counts are per process, like the reservations themselves.
"""

from __future__ import annotations

import os
from collections import defaultdict
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path

from app.domain.errors import S3Error

# The tenant of the request being served (set by the protocol layer once it is authenticated).
CURRENT_TENANT: ContextVar[int | None] = ContextVar("ferry_tenant", default=None)

RETRY_AFTER = {"Retry-After": "5"}


def slow_down(message: str) -> S3Error:
    return S3Error("SlowDown", message, headers=dict(RETRY_AFTER))


@dataclass(frozen=True, slots=True)
class Reservation:
    """Bytes held for one body in flight, and whose they are."""

    size: int
    tenant: int | None
    counted: bool  # whether it holds one of the tenant's upload slots


NONE = Reservation(0, None, False)


class WriteBudget:
    """The bytes and bodies in flight in this process, in total and per tenant."""

    def __init__(self, buffer_bytes: int, *, tenant_share: float = 1.0, tenant_uploads: int = 0) -> None:
        self.buffer_bytes = buffer_bytes
        self.tenant_share = tenant_share
        self.tenant_uploads = tenant_uploads  # 0: unbounded
        self.reserved = 0
        self._bytes: dict[int | None, int] = defaultdict(int)
        self._bodies: dict[int | None, int] = defaultdict(int)

    def admit(self, want: int, dirty: int, tenant: int | None) -> Reservation:
        """Reserve ``want`` bytes for ``tenant`` or raise SlowDown (nothing reserved)."""
        if dirty + self.reserved + want > self.buffer_bytes:
            raise slow_down("The write buffer is full; retry later.")
        # A tenant's first body is never refused for its share: one upload that fits the buffer
        # always goes through (retrying it must eventually succeed).
        if self._bodies[tenant] and self._bytes[tenant] + want > self.buffer_bytes * self.tenant_share:
            raise slow_down("Too many bytes of this account's uploads are in flight; retry later.")
        if self.tenant_uploads and self._bodies[tenant] >= self.tenant_uploads:
            raise slow_down("Too many uploads of this account are in flight; retry later.")
        self.reserved += want
        self._bytes[tenant] += want
        self._bodies[tenant] += 1
        return Reservation(want, tenant, True)

    def release(self, reservation: Reservation) -> None:
        if not reservation.counted:
            return
        self.reserved -= reservation.size
        tenant = reservation.tenant
        self._bytes[tenant] -= reservation.size
        self._bodies[tenant] -= 1
        if self._bodies[tenant] <= 0:
            del self._bytes[tenant], self._bodies[tenant]


@dataclass(frozen=True, slots=True)
class DiskReserve:
    """Free space the data directory's filesystem must keep: the larger of a ratio of its size
    and a number of bytes. Budgets in bytes are only promises; the disk is the real bound."""

    path: Path
    min_free_bytes: int = 1024**3
    min_free_ratio: float = 0.05

    def spare(self) -> int:
        """Bytes that may still be written before the reserve is reached (negative: past it)."""
        st = os.statvfs(self.path)
        total = st.f_blocks * st.f_frsize
        free = st.f_bavail * st.f_frsize
        return free - max(self.min_free_bytes, int(total * self.min_free_ratio))
