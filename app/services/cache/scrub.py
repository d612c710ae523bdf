"""The cache scrub: a background pass that checks published blocks against their checksums.

Hits only check a block's header (one small read), so they stay zero-copy; the bytes are
checked here, a shard directory at a time and at most ``budget`` bytes a call, so the scrub's
disk reads are bounded. A block whose bytes do not match is dropped (the next read refetches
it from the remote, the source of truth)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from app import metrics
from app.services.ports import BlockStore

log = logging.getLogger("ferry.cache.scrub")

SCRUB_BYTES_PER_PASS = 32 * 1024 * 1024
SCRUB_LOCK = "d" * 64  # one scrubbing process per data directory


@dataclass
class Scrub:
    """Walks the 256 shard directories round-robin; remembers where it stopped."""

    store: BlockStore
    shard: int = 0
    checked: int = 0
    dropped: int = 0

    def run(self, budget: int = SCRUB_BYTES_PER_PASS) -> int:
        """Check blocks until ``budget`` bytes were read or every shard was seen once;
        returns the number of blocks dropped."""
        if not self.store.try_lock(SCRUB_LOCK):
            return 0  # another worker process of this data directory is scrubbing
        try:
            dropped = self._walk(budget)
        finally:
            self.store.unlock(SCRUB_LOCK)
        self.dropped += dropped
        return dropped

    def _walk(self, budget: int) -> int:
        dropped = read = 0
        for _ in range(256):
            shard = f"{self.shard:02x}"
            self.shard = (self.shard + 1) % 256
            for name, _published, size in list(self.store.block_files(shard)):
                if self.store.verify(name) is False:
                    dropped += 1
                    metrics.cache_corrupt()
                    log.warning("cache scrub dropped block %s: its bytes do not match its header", name)
                self.checked += 1
                read += size
            if read >= budget:
                break
        return dropped
