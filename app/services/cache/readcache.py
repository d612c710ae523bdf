"""The read-through cache: serve remote objects from local blocks, fetch each block once.

- A read looks the object up in the cache index. A fresh entry (per policy) is a hit, served
  from block files; an expired one is revalidated with a conditional HEAD (304 keeps it, a new
  ETag drops it).
- A miss discovers the current version with one GET of the block the client wants first (its
  headers carry the metadata) and tees that body into the block while the client reads it. The
  entry's row is written by that fetch once the first bytes are out (or, for a one-block object,
  with the finished block in one commit: recording.py). Later blocks are fetched
  with parallel ranged GETs (``If-Match`` the entry's ETag, so bytes of two versions never mix),
  ``fetch_concurrency`` ahead of the reader, started once the first chunk is on its way.
- Single-flight: one fetch per block per process (readers follow the filling file) and across
  processes (a byte-range lock per block in ``cache/locks``; waiters poll for the finished block).
- Capacity: LRU by last access over this node's entries, within the byte budget (dirty bytes
  count against it too), per-tenant quotas and per-bucket quotas; pinned prefixes are skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, cast

from app import metrics
from app.domain.cache import Entry, Lookup, first_block, meta_lock_name
from app.domain.conditions import NO_CONDITIONS, Conditions
from app.domain.errors import S3Error
from app.domain.objects import FileSegment, ObjectMeta
from app.domain.policy import Policy
from app.domain.ranges import ByteRange, RangeRequest
from app.domain.states import CacheState
from app.services.cache.base import CacheBase
from app.services.cache.copies import PeerCopies
from app.services.cache.discovery import Discovery
from app.services.cache.eviction import Eviction
from app.services.cache.fill import Fill, Filling
from app.services.cache.orphans import Orphans
from app.services.cache.owned import OwnedRead, OwnedReads
from app.services.cache.recording import PendingEntry
from app.services.cache.revalidation import Revalidation
from app.services.cache.serve import Serving

log = logging.getLogger("ferry.cache")

LOOKUP = object()  # "look the entry up" (as opposed to a known entry, or a known absence)
TOMBSTONE_SECONDS = 3600.0
SEEN_SECONDS = 86400.0


@dataclass
class CachedRead:
    """What the gateway turns into an ObjectRead."""

    meta: ObjectMeta
    byte_range: ByteRange | None
    stream: AsyncIterator[bytes]
    close: Callable[[], None]
    outcome: str
    files: list[FileSegment] | None = None
    data: bytes | None = None  # the bytes of ``stream``, already read (a small hit)


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


def _nothing_to_close() -> None:
    return None


def _outcome(outcome: str, bucket: str, tenant: int | None) -> None:
    metrics.cache_outcome(outcome, bucket, tenant)  # also the request's outcome (the slow log's record)


class ReadCache(CacheBase):
    """The facade over the cache's state (base.py): current/head/read/warm/invalidate, usage, and
    the background upkeep. The parts, each a plain class holding the state: serve.py (Serving),
    fill.py (Filling), discovery.py (Discovery), eviction.py (Eviction), revalidation.py
    (Revalidation), orphans.py (Orphans), copies.py (PeerCopies), owned.py (OwnedReads); scrub.py
    and prefetch.py are the state's own helpers."""

    def _build_parts(self) -> None:
        self.serving = Serving(self)
        self.filling = Filling(self)
        self.discovery = Discovery(self)
        self.eviction = Eviction(self)
        self.revalidation = Revalidation(self)
        self.orphans = Orphans(self)
        self.copies = PeerCopies(self, self.copy_reads)
        self.owned = OwnedReads(self)
        # What the chores, the admin API and the fleet's peers call.
        self.disk_low = self.eviction.disk_low
        self.enforce_limits = self.eviction.enforce_limits
        self.evict = self.eviction.evict
        self.evict_prefix = self.eviction.evict_prefix
        self.wipe = self.eviction.wipe
        self.sweep_retired = self.eviction.sweep_retired
        self.revalidate_bucket = self.revalidation.revalidate_bucket
        self.revalidate_all = self.revalidation.revalidate_all
        self.sweep_orphans = self.orphans.sweep_orphans
        self.acquire = self.serving.acquire

    # ---- lookups -----------------------------------------------------------------------------
    def lookup(self, bucket: str, key: str) -> Entry | None:
        """The key's entry as the index holds it (a point lookup, blocking: the caller picks the
        thread), for a caller that reads it with other state and passes it back as ``known``."""
        return self.index.get(bucket, key)

    def lookup_with_newest(self, bucket: str, key: str, first_byte: int | None = None) -> Lookup | None:
        """The key's newest journal version (seq, state) and its entry in one round trip, where
        the index can (a PostgreSQL catalog); None: ask ``lookup`` and the journal apart. With
        ``first_byte`` (a GET), also the row of the node owning the block it starts in (owned.py)."""
        owner = self.owned.owner_of(bucket, key, first_byte) if first_byte is not None else None
        return self.index.get_with_newest(bucket, key, owner)

    def changed_since(self, bucket: str, key: str, since: float) -> bool:
        """Whether a write of the key was accepted or destaged since ``since`` (wall time), or one
        is still dirty: bytes of the key read from the remote before then may be the older
        version (blocking)."""
        return self.index.changed_since(bucket, key, since)

    async def current(self, bucket: str, key: str, policy: Policy, known: Any = LOOKUP) -> tuple[Entry | None, str]:
        """The entry to serve and why ('hit', 'stale'), or (None, 'miss') when the remote must be read.
        ``known``: the index row the caller already looked up (None: there is none; LOOKUP: ask)."""
        entry = await self.run(self.index.get, bucket, key) if known is LOOKUP else known
        if entry is None or entry.state != CacheState.READY:
            return None, "miss"
        if policy.is_fresh(entry.validated_at, time.time()):
            return entry, "hit"
        return await self.revalidation.revalidate(entry, bucket, key, policy)

    async def head(self, bucket: str, key: str, policy: Policy, tenant_id: int | None,
                   known: Any = LOOKUP) -> ObjectMeta:
        entry, _ = await self.current(bucket, key, policy, known)
        if entry is not None:
            self._touch(entry)
            return entry.meta
        return await self.run(self.remote.head_object, bucket, key)

    # ---- reads -------------------------------------------------------------------------------
    async def read(self, bucket: str, key: str, wanted: RangeRequest, policy: Policy,
                   tenant_id: int | None, known: Any = LOOKUP, *, file_ranges: bool = False,
                   conditions: Conditions = NO_CONDITIONS, owned: OwnedRead | None = None) -> CachedRead | None:
        """Open the object through the cache; None when the caller should read the remote directly
        (second-hit admission's first miss, or a write raced the discovery). With ``file_ranges``
        the stream may yield ``FileRange`` items (for a server that sends files itself).
        ``conditions`` are judged from an entry the cache serves before anything else happens,
        so a 304 or 412 the index can answer costs no remote request, even with its blocks gone;
        a miss judges them once its discovery told the version (its fill goes on). Every read
        counts for frequency admission, after the cache decided about this one. ``owned``: the
        owner's answer by name, fetched with the lookup that found no row here (owned.py)."""
        try:
            found = self._read_owned(owned, tenant_id, conditions) if owned is not None and known is None else None
            if found is None:
                found = await self._read(bucket, key, wanted, policy, tenant_id, known, file_ranges, conditions)
        finally:
            self.admission.record(bucket, key, from_start=wanted.first_byte == 0)
        prefix = self.policies.prefix_setting(bucket, key, "prefetch") if policy.prefetch == "prefix" else None
        self.prefetch.saw(bucket, key, policy, tenant_id, prefix)
        return found

    async def _read(self, bucket: str, key: str, wanted: RangeRequest, policy: Policy, tenant_id: int | None,
                    known: Any, file_ranges: bool, conditions: Conditions) -> CachedRead | None:
        entry, outcome = await self.current(bucket, key, policy, known)
        if entry is None:
            if self.disk_low() or (policy.admission == "second-hit"
                                   and not await self.run(self.index.mark_seen, bucket, key, tenant_id)):
                _outcome("miss", bucket, tenant_id)
                return None
            gate = True
            refused = self.admission.refused_size(bucket, key)
            if refused is not None:  # refused a moment ago: judged again with no GET to learn its size
                if not await self.run(self.admission.decide, bucket, key, refused, policy,
                                      first_block(refused, wanted.first_byte, self.block_size)[1]):
                    self.admission.remember_refused(bucket, key, refused)
                    _outcome("miss", bucket, tenant_id)
                    return None  # read through, exactly the range asked for
                gate = False  # admitted (and room made): the discovery keeps it
            entry = await self.discovery.discover(bucket, key, wanted.first_byte, policy, tenant_id,
                                                  whole=wanted.spec is None, gate=gate, absent=known is None)
            if entry is None:
                _outcome("miss", bucket, tenant_id)
                return None
            outcome = "miss"
        else:
            self._touch(entry)
        return self._serve(entry, outcome, wanted, tenant_id, file_ranges, conditions)

    def _read_owned(self, found: OwnedRead, tenant_id: int | None, conditions: Conditions) -> CachedRead | None:
        """The read the owner's block file answered by name (owned.py ``fetch_now``). Counted a
        miss here, as a relay is (this node's cache did not answer); the owner counts its hit."""
        entry = found.owned.entry
        try:
            conditions.check(entry.etag, entry.meta.last_modified)
        except S3Error:
            self._counted(entry, "miss", tenant_id)  # answered from the owner's row: no bytes were asked for
            raise
        if found.data is None:
            return None
        self._counted(entry, "miss", tenant_id)
        metrics.served_bytes("miss", entry.bucket, len(found.data))
        return CachedRead(entry.meta, found.byte_range, _once(found.data), _nothing_to_close, "miss", None, found.data)

    def _counted(self, entry: Entry, outcome: str, tenant_id: int | None) -> None:
        """A read's outcome, once, in both of its records: the outcome counters and the sizing
        curve's measured ratio (one definition of a hit for both)."""
        _outcome(outcome, entry.bucket, tenant_id)
        self.sizing.record(entry.bucket, entry.key, entry.etag, entry.size, tenant_id, outcome != "miss")

    def _serve(self, entry: Entry, outcome: str, wanted: RangeRequest, tenant_id: int | None, file_ranges: bool,
               conditions: Conditions) -> CachedRead | None:
        """The read of a known entry (a hit, or a miss whose discovery just told the version):
        its conditions, then the bytes from memory, one block, the block files or the fills."""
        bucket = entry.bucket
        try:
            conditions.check(entry.etag, entry.meta.last_modified)
        except S3Error:
            self._counted(entry, outcome, tenant_id)  # a 304 or 412 answered from what the cache knows
            raise
        rng = wanted.resolve(entry.size)
        first, last = (rng.first, rng.last) if rng else (0, entry.size - 1)
        relayed = entry.recording.data if isinstance(entry, PendingEntry) and entry.recording else None
        if relayed is not None:  # a small object relayed from its owner, whole in memory (copies.py)
            self._counted(entry, outcome, tenant_id)
            data = relayed[first:last + 1] if rng else relayed
            metrics.served_bytes(outcome, bucket, len(data))
            return CachedRead(entry.meta, rng, _once(data), _nothing_to_close, outcome, None, data)
        if outcome != "miss":
            small = self.serving.small_hit(entry, first, last)
            if small is not None:
                self._counted(entry, outcome, tenant_id)
                metrics.served_bytes(outcome, bucket, len(small[0]))
                return CachedRead(entry.meta, rng, _once(small[0]), _nothing_to_close, outcome, small[1], small[0])
        files = self.serving.segments(entry, first, last) if outcome != "miss" else None
        if files is None and outcome != "miss" and (self.disk_low() or self._beyond_allowance(entry, first, last)):
            self._counted(entry, "miss", tenant_id)  # blocks to fetch, no room for them (or no allowance): read through
            return None
        if files is None:
            # Some block is not local (an object admitted in part, or one still filling): this read
            # waits on the remote, so it is counted a miss, not a hit, whatever part is cached.
            outcome = "miss"
        self._counted(entry, outcome, tenant_id)
        if files is not None:
            metrics.served_bytes(outcome, bucket, max(0, last - first + 1))
        stream = self.serving.stream(entry, first, last, outcome, record=files is None, file_ranges=file_ranges)
        # FileRange items only for a caller that asked for them (the S3 edge's zero-copy path).
        return CachedRead(entry.meta, rng, cast(AsyncIterator[bytes], stream), lambda: None, outcome, files)

    def _beyond_allowance(self, entry: Entry, first: int, last: int) -> bool:
        """Whether the range needs a block of an object admitted in part that its allowance
        cannot keep (admission.py): such a read goes to the remote with exactly its range."""
        left = self.admission.allowance(entry.bucket, entry.key)
        if left is None:
            return False
        return any(entry.block_length(i) > left and not self.store.has(self.block_file(entry, i), entry.block_length(i))
                   for i in range(first // entry.block_size, last // entry.block_size + 1))

    # ---- warming (staging) --------------------------------------------------------------------
    async def warm(self, bucket: str, key: str, policy: Policy, tenant_id: int | None, known: Any = LOOKUP) -> int:
        """Fetch every block of the object not cached yet; returns the bytes fetched. ``known``:
        the caller's own lookup (the prefetcher's verdict read the row; None: there was none,
        so no second lookup: the discovery reads the row again under the key's lock anyway)."""
        if self.disk_low():
            return 0
        self.admission.forget_allowance(bucket, key)  # asked for by name: kept whole
        entry, _ = await self.current(bucket, key, policy, known)
        if entry is None:
            # A whole-object GET, as a client's first read would be: its answer carries the
            # stored checksums, which a ranged one does not.
            entry = await self.discovery.discover(bucket, key, 0, policy, tenant_id, whole=True, gate=False)
            if entry is None:
                return 0
        blocks = range(entry.blocks) if entry.size else range(0)
        missing = [i for i in blocks if not self.store.has(self.block_file(entry, i), entry.block_length(i))]
        sem = asyncio.Semaphore(self.fetch_concurrency)

        async def one(index: int) -> None:
            async with sem:
                source, _ = await self.serving.acquire(entry, index)
                if isinstance(source, Fill):
                    await source.wait_finished()
        await asyncio.gather(*(one(i) for i in missing))
        return sum(entry.block_length(i) for i in missing)

    # ---- invalidation ------------------------------------------------------------------------
    async def invalidate(self, bucket: str, key: str) -> None:
        """A write through the gateway replaced the key: no node serves the old version again."""
        await self.run(self.index.invalidate, bucket, key)

    def usage(self) -> dict[str, Any]:
        out = self.index.usage()
        out["node_id"] = self.index.node_id
        out["budget_bytes"] = self.budget_bytes
        out["cached_bytes"] = self.index.total_bytes()
        out["dirty_bytes"] = self.dirty_bytes()
        return out

    # ---- background upkeep -------------------------------------------------------------------
    def publish_sizing(self) -> None:
        """The sizing gauges of this process (predicted and measured hit ratio per bucket)."""
        self.sizing.publish()

    def janitor_pass(self, enforce: bool = True) -> None:
        """Drop this node's invalidated entries and old tombstones; enforce limits."""
        self.flush_touches()
        if not self.store.try_lock("f" * 64):
            return  # another worker process of this node is doing it
        try:
            for entry in self.index.invalid_entries():
                self._drop_invalid(entry)
            now = time.time()
            self.index.expire_tombstones(now - TOMBSTONE_SECONDS, now - SEEN_SECONDS)
            if enforce:
                self.enforce_limits()
        finally:
            self.store.unlock("f" * 64)

    def _drop_invalid(self, entry: Entry) -> None:
        """One invalidated row and its blocks, under the key's discovery lock. A rediscovery of
        the same version (the same bytes written again) names the same block files and takes
        over those still on disk: deleted behind its back, the new row would count bytes that
        are gone, and count them again when they are fetched again. Under the lock, either the
        row and its blocks go first, or the rediscovery has replaced the row (``remove`` says
        so) and its blocks are the new row's. A busy key is left for the next pass.

        The file lock excludes other processes only; a discovery of this process is excluded by
        ``sweeping`` (marked before ``discovering`` is read here, read by the discovery after it
        marked ``discovering``: one of the two sees the other)."""
        k = (entry.bucket, entry.key)
        lock = meta_lock_name(*k)
        self.sweeping.add(k)
        try:
            if k in self.discovering or not self.store.try_lock(lock):
                return
            try:
                if self.index.remove(entry):
                    self.delete_blocks(entry)
            finally:
                self.store.unlock(lock)
        finally:
            self.sweeping.discard(k)

    async def start(self) -> None:
        await self.run(self.store.clear_stale_tmp, 600.0)
        await self.run(self.sweep_retired)  # retired by an earlier run, past their grace

    async def stop(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        for task in list(self.tasks):
            with contextlib.suppress(BaseException):
                await task
        await self.run(self.flush_touches)
