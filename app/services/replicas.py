"""The replica side of ``write_replicas: 2`` (fleet), run by the node's journal sweeper.

A node holds copies of other nodes' buffered writes (``GatewayCore.accept_replica``). Each sweep
it takes over the rows of lost nodes that it holds copies of (and their deletes, which need no
bytes) and queues their destage here, and drops the copies of rows that left the buffer.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from app.services.ports import BlobPort

log = logging.getLogger("ferry.replicas")


class ReplicaPort(Protocol):
    def take_over(self, stale_after: float, now: float | None = None, limit: int = 1000) -> list[int]: ...
    def finished(self, limit: int = 1000) -> list[tuple[int, list[str]]]: ...
    def forget(self, seq: int) -> None: ...


class ReplicaKeeper:
    """Takeover and cleanup of this node's replicas; ``sweep`` is a sweeper chore."""

    def __init__(self, repo: ReplicaPort, blobs: BlobPort, submit: Callable[[int], None], stale_after: float) -> None:
        self.repo = repo
        self.blobs = blobs
        self.submit = submit
        self.stale_after = stale_after

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
        return len(taken)
