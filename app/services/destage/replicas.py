"""The replica side of ``write_replicas: 2`` (fleet), run by the node's journal sweeper.

A node holds copies of other nodes' buffered writes (``GatewayCore.accept_replica``). Each sweep
it takes over the rows of lost nodes that it holds copies of (and their deletes, which need no
bytes) and queues their destage here, drops the copies of rows that left the buffer, and drops
copies whose row never committed (the origin died between the copy and its commit) once they are
``orphan_after`` old.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from app.services.ports import BlobPort

log = logging.getLogger("ferry.replicas")

# A copy no row references is garbage only once its origin can no longer commit the row that
# would: longer than any write takes between its body's copy and its commit (a body of
# gigabytes crossing the LAN, a slow catalog). An hour, against "until the holder restarts".
ORPHAN_AFTER = 3600.0


class ReplicaPort(Protocol):
    def take_over(self, stale_after: float, now: float | None = None, limit: int = 1000) -> list[int]: ...
    def finished(self, limit: int = 1000) -> list[tuple[int, list[str]]]: ...
    def forget(self, seq: int) -> None: ...


class ReplicaKeeper:
    """Takeover and cleanup of this node's replicas; ``sweep`` is a sweeper chore."""

    def __init__(self, repo: ReplicaPort, blobs: BlobPort, submit: Callable[[int], None], stale_after: float,
                 referenced: Callable[[list[str]], set[str]] | None = None,
                 orphan_after: float = ORPHAN_AFTER) -> None:
        self.repo = repo
        self.blobs = blobs
        self.submit = submit
        self.stale_after = stale_after
        self.referenced = referenced  # Journal.blobs_referenced: which blob ids a row still needs
        self.orphan_after = orphan_after

    def sweep(self) -> int:
        """Returns how many rows this node took over."""
        taken = self.repo.take_over(self.stale_after)
        if taken:
            log.warning("took over %d buffered writes of lost nodes (seq %s..%s)", len(taken), taken[0], taken[-1])
        for seq in taken:
            self.submit(seq)
        for seq, blob_ids in self.repo.finished():
            for blob in blob_ids:
                self.blobs.delete(blob)
            self.repo.forget(seq)
        if self.referenced is not None:
            dropped = self.blobs.collect(self.referenced, self.orphan_after)
            if dropped:
                log.warning("dropped %d copies that no committed write references (their node died first)", dropped)
        return len(taken)
