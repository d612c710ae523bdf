"""A discovered object version whose catalog row is written by the fetch of its first block.

A miss forwards the remote's first bytes before anything is committed. The row is written by the
fetch thread: after the first chunk for an object of several blocks (so fills of its other blocks
can account theirs), or once the only block is published for a small object (one commit per
object instead of two). Until the row is written, the discovery's cross-process lock stays held,
so other workers wait for the row instead of fetching the object again, and fills of the
object's other blocks wait for the row's id before accounting their bytes.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from app.domain.cache import Entry
from app.domain.objects import ObjectMeta
from app.domain.states import CacheState

SETTLE_TIMEOUT = 120.0  # a fill never waits longer than this for its entry's row


@dataclass
class Recording:
    meta: ObjectMeta
    bucket: str
    block_size: int
    tenant_id: int | None
    pinned: bool
    started: float  # when the discovery began: a write after it means "do not cache"
    cached_bytes: int  # bytes of this same version already cached (a re-discovery)
    lock: str | None  # the discovery lock, released once the row is written (None: a lock-free relay)
    replaced: Entry | None  # the previous version's row, whose blocks go with it
    ranged: bool = False  # discovered by a ranged GET: S3 sent no stored checksums with it
    refused: bool = False  # frequency admission said no: the discovery's bytes are served, not kept
    relayed: bool = False  # refused because an owner's bytes are read here the first time (copies.py)
    data: bytes | None = None  # a small relayed object, whole: served from memory, no fill (copies.py)
    entry_id: int | None = None
    settled: threading.Event = field(default_factory=threading.Event)

    def provisional(self) -> PendingEntry:
        """The entry readers are served from while its row is being written."""
        now = time.time()
        meta = self.meta
        return PendingEntry(0, self.bucket, meta.key, meta.etag, meta.size, self.block_size, meta, self.tenant_id,
                            CacheState.READY, self.cached_bytes, now, now, recording=self)

    def settle(self, entry_id: int | None) -> None:
        self.entry_id = entry_id
        self.settled.set()

    def wait(self, timeout: float = SETTLE_TIMEOUT) -> int | None:
        """The row's id once written; None if it was not (a write raced the discovery, an error)."""
        return self.entry_id if self.settled.wait(timeout) else None

    @property
    def failed(self) -> bool:
        """Settled without a row: whoever holds its pending entry should discover again."""
        return self.settled.is_set() and self.entry_id is None


@dataclass
class PendingEntry(Entry):
    recording: Recording | None = None


def row_id(entry: Entry) -> int | None:
    """The entry's row id; for a pending entry, once its row is written (None if it never is)."""
    if isinstance(entry, PendingEntry) and entry.recording is not None:
        return entry.recording.wait()
    return entry.id or None
