"""Eviction: keeping the cache within the node's budget, tenant and bucket quotas and the data
disk's reserve (LRU by last access, pinned prefixes skipped), and the operator's evict and wipe.
Only clean data is in the cache: eviction never touches the journal's dirty bytes, it counts them.
The retired sweep: deleted blocks (renamed into ``cache/retired/`` for readers still walking to
them, adapters/local/cachestore.py) are unlinked once their grace is over, by one process per data dir.
"""

from __future__ import annotations

import logging
import threading

from app import metrics
from app.adapters.local.cachestore import RETIRED_GRACE_SECONDS
from app.services.cache.base import CacheBase

log = logging.getLogger("ferry.cache")

RETIRED_LOCK = "c" * 64  # one process per data directory unlinks retired blocks
# A lock of cache/locks is the process's: a second thread of the holder would get it too, and its
# unlock would free the first's. Threads of one process take this one first.
_retired_in_process = threading.Lock()


class Eviction:
    """Limits and what frees space."""

    def __init__(self, cache: CacheBase) -> None:
        self.cache = cache

    def disk_low(self) -> bool:
        """Whether the disk is too close to its reserve for another block. Then misses are read
        through without caching (a fill would fail with ENOSPC mid-answer) and an eviction of
        clean entries is started."""
        if self.cache.disk.spare() >= 2 * self.cache.block_size:
            return False
        self.schedule_eviction()
        return True

    def schedule_eviction(self) -> None:
        if self.cache.evicting:
            return
        self.cache.evicting = True
        self.cache.added_since_check = 0

        async def run() -> None:
            try:
                await self.cache.run(self.enforce_limits)
            except Exception:
                log.exception("cache eviction failed")
            finally:
                self.cache.evicting = False

        self.cache.spawn(run())

    def enforce_limits(self) -> int:
        """Evict until every tenant is within quota, every bucket within its policy's quota and
        the node within its budget. Returns the bytes freed."""
        self.cache.flush_touches()
        freed = 0
        for tenant_id, quota in self.cache.index.tenant_quotas():
            used = self.cache.index.total_bytes(tenant_id=tenant_id)
            if used > quota:
                freed += self.evict(used - quota, tenant_id=tenant_id, reason="tenant-quota")
        rules = self.cache.policies.rules()
        with_quota = {r.bucket for r in rules if r.quota_bytes is not None}
        buckets = self.cache.index.buckets() if "*" in with_quota else sorted(with_quota)
        for bucket in buckets:
            bucket_quota = self.cache.policies.for_bucket(bucket).quota_bytes
            if bucket_quota is not None:
                used = self.cache.index.total_bytes(bucket=bucket)
                if used > bucket_quota:
                    freed += self.evict(used - bucket_quota, bucket=bucket, reason="bucket-quota")
        if (spare := self.cache.disk.spare()) < 2 * self.cache.block_size:
            # Retired blocks first: their bytes were counted freed, but they are still on the disk
            # (a reader still reaching one of those is cut: the disk is short of space).
            self.sweep_retired(need=4 * self.cache.block_size - spare)
            if (spare := self.cache.disk.spare()) < 2 * self.cache.block_size:
                freed += self.evict(4 * self.cache.block_size - spare, reason="disk")  # up to a low-water mark
        if self.cache.budget_bytes:
            used = self.cache.index.total_bytes() + self.cache.dirty_bytes()
            if used > self.cache.budget_bytes:
                # Down to a low-water mark, so eviction does not run on every fill.
                freed += self.evict(used - int(self.cache.budget_bytes * 0.95), reason="capacity")
        return freed

    def evict(self, need: int, *, tenant_id: int | None = None, bucket: str | None = None,
              reason: str = "capacity") -> int:
        """Drop least recently used, unpinned entries until ``need`` bytes are freed."""
        freed = entries = 0
        after: tuple[float, int] | None = None
        while freed < need:
            batch = self.cache.index.lru(256, tenant_id=tenant_id, bucket=bucket, after=after)
            if not batch:
                break
            for entry in batch:
                after = (entry.last_access, entry.id)
                if self.cache.policies.for_key(entry.bucket, entry.key).pinned:
                    continue
                dropped = self.cache.drop_now(entry)
                if dropped or entry.cached_bytes:
                    entries += 1
                    freed += max(dropped, entry.cached_bytes)
                if freed >= need:
                    break
        if entries:
            metrics.evicted(reason, entries, freed)
            log.info("evicted %d entries (%d bytes): %s", entries, freed, reason)
        return freed

    def evict_prefix(self, bucket: str, prefix: str) -> tuple[int, int]:
        """Operator's evict: drop this node's clean entries under a prefix (pinned ones too: the
        operator asked by name). Dirty data is not in the cache and is never touched."""
        entries = freed = 0
        after: str | None = None
        while True:
            batch = self.cache.index.under(bucket, prefix, after, 1000)
            if not batch:
                break
            for entry in batch:
                freed += self.cache.drop_now(entry)
                entries += 1
            after = batch[-1].key
        metrics.evicted("operator", entries, freed)
        return entries, freed

    def wipe(self) -> tuple[int, int]:
        """Drop every clean block of this node; the remote has all of it."""
        count, usage = self.cache.index.delete_all()
        self.cache.store.wipe()
        metrics.evicted("wipe", count, usage)
        return count, usage

    def sweep_retired(self, grace: float = RETIRED_GRACE_SECONDS, need: int = 0) -> tuple[int, int]:
        """Unlink retired blocks past ``grace`` (and, with ``need``, the oldest others until that
        many bytes are freed); returns (files, bytes). Under the data dir's retired lock: (0, 0)
        when another process (or thread) of the node is at it."""
        if not _retired_in_process.acquire(blocking=False):
            return 0, 0
        try:
            if not self.cache.store.try_lock(RETIRED_LOCK):
                return 0, 0
            try:
                files, freed = self.cache.store.sweep_retired(grace, need)
            finally:
                self.cache.store.unlock(RETIRED_LOCK)
        finally:
            _retired_in_process.release()
        if files:
            log.debug("cache sweep unlinked %d retired block files (%d bytes)", files, freed)
        return files, freed
