"""The orphan sweep: block files no entry row accounts for (a crash between a row's delete and
its blocks' unlink) are found and deleted, with bounded memory, by one process per data dir.
"""

from __future__ import annotations

import logging
import time

from app import metrics
from app.domain.cache import block_name
from app.services.cache.base import CacheBase

log = logging.getLogger("ferry.cache")

ORPHAN_GRACE_SECONDS = 600.0  # blocks published this recently are never judged by the sweep
ORPHAN_SWEEP_SECONDS = 86400.0  # the orphan sweep runs a minute after start, then daily
ORPHAN_NAMES_PER_PASS = 1_000_000  # names held in memory at once (~64 MB); more: more passes
SWEEP_LOCK = "e" * 64  # one sweeping process per data directory


class Orphans:
    """The sweep of unaccounted block files."""

    def __init__(self, cache: CacheBase) -> None:
        self.cache = cache

    def sweep_orphans(self, grace: float = ORPHAN_GRACE_SECONDS) -> tuple[int, int]:
        """Delete block files no entry row accounts for; returns (files, bytes).

        A crash between a row's delete (eviction, invalidation, a new version replacing the row)
        and the unlink of its blocks leaves such files, and the budget never sees them. Fills
        write or account their row before they publish a block, so a block published before the
        sweep started whose row still exists is among the names collected from the rows after
        that: only files published before the start (less ``grace``) are judged. Memory stays
        bounded: names are collected for a range of shard directories at a time, in as many
        passes as ``ORPHAN_NAMES_PER_PASS`` needs."""
        if not self.cache.store.try_lock(SWEEP_LOCK):
            return 0, 0  # another worker process of this node is sweeping
        try:
            cutoff = time.time() - grace
            blocks = self.cache.index.block_count()
            passes = 1
            while passes < 256 and blocks / passes > ORPHAN_NAMES_PER_PASS:
                passes *= 2
            shards = [f"{i:02x}" for i in range(256)]
            per_pass = 256 // passes
            files = freed = 0
            for group in (shards[p * per_pass:(p + 1) * per_pass] for p in range(passes)):
                known = self._accounted_blocks(set(group) if passes > 1 else None)
                for shard in group:
                    for name, published, size in self.cache.store.block_files(shard):
                        if published < cutoff and int(name[:16], 16) not in known:
                            self.cache.store.delete(name)
                            files += 1
                            freed += size
        finally:
            self.cache.store.unlock(SWEEP_LOCK)
        if files:
            metrics.evicted("orphan", files, freed)
            log.warning("cache sweep removed %d block files (%d bytes) that no entry accounted for", files, freed)
        return files, freed

    def _accounted_blocks(self, shards: set[str] | None) -> set[int]:
        """The first 64 bits of every block name this node's rows own (in ``shards`` only)."""
        known: set[int] = set()
        after = 0
        while rows := self.cache.index.block_owners(after, 5000):
            for _, bucket, key, etag, size, block_size in rows:
                for index in range(max(1, -(-size // block_size))):
                    name = block_name(bucket, key, etag, index, block_size)
                    if shards is None or name[:2] in shards:
                        known.add(int(name[:16], 16))
            after = rows[-1][0]
        return known
