"""Discovery: the first miss of an object learns its current version with one GET and starts
caching it, single-flight per key in the process (a shared future) and across processes (the
key's meta lock). The entry's row is written by the fill of the first block (recording.py).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import BinaryIO

from app import metrics
from app.domain.cache import Entry, first_block, meta_lock_name
from app.domain.errors import S3Error
from app.domain.objects import ObjectMeta
from app.domain.policy import Policy
from app.domain.states import CacheState
from app.services.cache.base import LOCK_POLL, LOCK_POLL_MAX, CacheBase
from app.services.cache.copies import SmallBody, read_small
from app.services.cache.on_behalf import on_behalf_of
from app.services.cache.recording import PendingEntry, Recording


@dataclass
class EarlyAnswer:
    """Block 0's answer, fetched before the key's lock (``Discovery._relay``) and handed to the
    locked discovery: ``started`` is when it was asked for, so a write after that still keeps
    the version out of the cache (put_ready's check), however long the lock took."""

    started: float
    meta: ObjectMeta
    body: BinaryIO | None

    def close(self) -> None:
        if self.body is not None:
            self.body.close()


class Discovery:
    """Discovering versions and writing their rows. Starts fills through ``cache.filling``."""

    def __init__(self, cache: CacheBase) -> None:
        self.cache = cache

    async def discover(self, bucket: str, key: str, first_byte: int | None, policy: Policy,
                       tenant_id: int | None, *, whole: bool = False, gate: bool = True,
                       absent: bool = False) -> Entry | None:
        """Learn the current version with one GET and start caching; single-flight per key.
        ``gate``: a new key passes frequency admission (admission.py) before it is kept; staging
        does not ask. ``absent``: the caller's lookup just found no row of the key (a first read
        of an owner's object may then be relayed without the key's lock: ``_relay``)."""
        k = (bucket, key)
        running = self.cache.discovering.get(k)
        if running is not None and running.done() and running.exception() is None:
            shared = running.result()
            if isinstance(shared, PendingEntry) and shared.recording and shared.recording.failed:
                running = None  # its fetch failed (the loop has not heard yet): discover afresh
        if running is not None:
            began = self.cache.discovery_began.get(running)
            if began is not None and await self.cache.run(self.cache.index.changed_since, bucket, key, began):
                # A write (or its destage) came after that discovery began: the version it
                # fetched may be the older one, which this reader must not be served. It reads
                # the remote directly; the running discovery's row is refused by put_ready.
                return None
            return await asyncio.shield(running)
        future: asyncio.Future[Entry | None] = asyncio.get_running_loop().create_future()
        self.cache.discovering[k] = future
        self.cache.discovery_began[future] = time.time()
        try:
            fetched = await self._relay(bucket, key, first_byte, policy, tenant_id, whole) \
                if absent and gate else None
            if isinstance(fetched, Entry):
                entry: Entry | None = fetched
            else:
                entry = await self._discover_locked(bucket, key, first_byte, policy, tenant_id, whole, gate, fetched)
        except BaseException as exc:
            self.cache.discovering.pop(k, None)
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when nobody waits
            raise
        future.set_result(entry)
        rec = entry.recording if isinstance(entry, PendingEntry) else None
        if rec is None or rec.settled.is_set():
            self.cache.discovering.pop(k, None)
        # else: later readers here share the pending entry until its row is written
        # (_discovery_settled), instead of discovering the object again.
        return entry

    async def _relay(self, bucket: str, key: str, first_byte: int | None, policy: Policy, tenant_id: int | None,
                     whole: bool) -> Entry | EarlyAnswer | None:
        """A first read here of a small object another node owns (copies.py) is relayed, with no
        row and no copy: it needs neither the key's lock nor a second look at its row, only the
        owner's answer (one thread hop: the peer's GET, read whole). The entry to serve; else,
        when the answer is not such an object after all (larger than a block, say), that answer
        for the locked discovery to use (no second GET); None when no relay is likely."""
        if (first_byte or 0) >= self.cache.block_size or not self.cache.copies.likely_relay(bucket, key):
            return None
        started = time.time()
        with on_behalf_of(tenant_id):  # a peer that serves the block charges this tenant
            meta, body = await self.cache.run(self._fetch_first, bucket, key, 0, whole)
        if not isinstance(body, SmallBody) or not self.cache.copies.relay_only(bucket, key, meta, True):
            return EarlyAnswer(started, meta, body)
        rec = Recording(meta, bucket, self.cache.block_size, tenant_id, policy.pinned, started, 0, None, None,
                        refused=True, relayed=True, data=body.getvalue())
        metrics.peer_relayed()
        rec.settle(None)  # no row and no lock: nothing to release
        return rec.provisional()

    def settle(self, rec: Recording, block_bytes: int, loop: asyncio.AbstractEventLoop) -> Entry | None:
        """Write a discovered version's row (in a thread); always releases the discovery. A
        version admission refused gets no row: its readers were served, the next read asks again."""
        entry: Entry | None = None
        if rec.refused:
            self.release_discovery(rec, None, loop)
            return None
        try:
            entry = self.cache.index.put_ready(rec.meta, rec.bucket, rec.block_size, rec.tenant_id, rec.pinned,
                                               rec.started, rec.cached_bytes + block_bytes)
            if rec.replaced is not None:
                self.cache.delete_blocks(rec.replaced)
        finally:
            self.release_discovery(rec, entry.id if entry is not None else None, loop)
        if entry is not None and rec.ranged:
            loop.call_soon_threadsafe(self.cache.background, self._complete_checksums, entry)
        return entry

    def _complete_checksums(self, entry: Entry) -> None:
        """A ranged discovery's answer carries no stored checksums (S3 leaves them out of ranged
        answers). One HEAD completes the row's metadata, so hits answer ``x-amz-checksum-mode``
        as the remote does. A changed object is left to revalidation."""
        try:
            meta = self.cache.remote.head_object(entry.bucket, entry.key)
        except S3Error:
            return
        if meta.etag == entry.etag and meta.checksums:
            self.cache.index.set_checksums(entry.id, entry.etag, meta.checksums)

    def release_discovery(self, rec: Recording, entry_id: int | None, loop: asyncio.AbstractEventLoop) -> None:
        rec.settle(entry_id)
        if rec.lock is not None:
            self.cache.store.unlock(rec.lock)
        loop.call_soon_threadsafe(self._discovery_settled, rec)

    def _discovery_settled(self, rec: Recording) -> None:
        k = (rec.bucket, rec.meta.key)
        future = self.cache.discovering.get(k)
        if future is not None and future.done() and not future.cancelled() and future.exception() is None:
            entry = future.result()
            if isinstance(entry, PendingEntry) and entry.recording is rec:
                self.cache.discovering.pop(k, None)

    async def _discover_locked(self, bucket: str, key: str, first_byte: int | None, policy: Policy,
                               tenant_id: int | None, whole: bool, gate: bool,
                               early: EarlyAnswer | None = None) -> Entry | None:
        lock = meta_lock_name(bucket, key)
        started = time.time() if early is None else early.started
        try:
            await self._take_lock(bucket, key, lock)
        except BaseException:
            if early is not None:
                early.close()
            raise
        handed_off = False  # True once the lock is the Recording's to release
        try:
            index = (first_byte // self.cache.block_size) if first_byte is not None else 0
            if early is not None:  # block 0's answer, fetched by _relay before the lock
                old, fetched = await self.cache.run(self._look_with, bucket, key, early, policy)
            else:
                with on_behalf_of(tenant_id):  # a peer that serves the block charges this tenant
                    old, fetched = await self.cache.run(self._look_and_fetch, bucket, key, index, whole, started,
                                                        policy)
            if fetched is None:
                return old  # another process discovered it while we waited
            meta, body = fetched
            index = first_block(meta.size, first_byte, self.cache.block_size)[0]
            same = old is not None and old.etag == meta.etag and old.block_size == self.cache.block_size
            rec = Recording(meta, bucket, self.cache.block_size, tenant_id, policy.pinned, started,
                            self._carried_bytes(old) if old is not None and same else 0, lock,
                            old if old is not None and not same else None,
                            ranged=not whole and not meta.checksums and meta.size > 0)
            if old is not None and not same:
                self.cache.admission.forget_allowance(bucket, key)  # another version: kept whole
            await self._judge(rec, old is None and gate, body, policy, first_byte)
            entry = rec.provisional()
            if rec.relayed and isinstance(body, SmallBody):  # read whole with the GET: served from memory
                rec.data = body.getvalue()
                handed_off = True
                self.settle(rec, 0, asyncio.get_running_loop())  # no row: releases the lock
                return entry
            name = self.cache.block_file(entry, index)
            length = entry.block_length(index)
            store = self.cache.store
            if (body is not None and length > 0 and name not in self.cache.inflight and not store.has(name, length)
                    and store.try_lock(name)):
                self.cache.filling.start_fill(entry, index, name, length, body)  # it writes the row
                handed_off = True
                return entry
            if body is not None:
                body.close()
            handed_off = True
            return await self.cache.run(self.settle, rec, 0, asyncio.get_running_loop())
        finally:
            if not handed_off:
                self.cache.store.unlock(lock)

    async def _take_lock(self, bucket: str, key: str, lock: str) -> None:
        """The key's discovery lock (cross-process), polled with backoff while another process
        holds it or the janitor is dropping the key's row; the wait is a single-flight metric."""
        delay = LOCK_POLL
        waited_since: float | None = None
        while (bucket, key) in self.cache.sweeping or not self.cache.store.try_lock(lock):
            if waited_since is None:
                waited_since = time.monotonic()
            await asyncio.sleep(delay)
            delay = min(delay * 2, LOCK_POLL_MAX)
        if waited_since is not None:
            metrics.singleflight_waited(time.monotonic() - waited_since)

    async def _judge(self, rec: Recording, newcomer: bool, body: BinaryIO | None, policy: Policy,
                     first_byte: int | None) -> None:
        """Whether a newcomer (a key the cache holds no row of, read by a gated reader) is kept:
        an owner's bytes read here for the first time are relayed, not kept (copies.py); else it
        is kept if admission says so, whole or in part (from the block read first)."""
        if not newcomer:
            return
        bucket, key, meta = rec.bucket, rec.meta.key, rec.meta
        rec.relayed = self.cache.copies.relay_only(bucket, key, meta, bool(getattr(body, "from_peer", False)))
        if rec.relayed:
            rec.refused = True
            metrics.peer_relayed()
            return
        length = first_block(meta.size, first_byte, self.cache.block_size)[1]
        admitted = self.cache.admission.decide_at_once(bucket, key, meta.size, policy)
        if admitted is None:
            admitted = await self.cache.run(self.cache.admission.decide, bucket, key, meta.size, policy, length)
        rec.refused = not admitted
        if rec.refused:
            self.cache.admission.remember_refused(bucket, key, meta.size)

    def _carried_bytes(self, old: Entry) -> int:
        """The bytes of this same version already cached, which the new row takes over. A ready
        row's count is its blocks; an invalid row's blocks may be gone already (the janitor
        deletes them, and they share their names with this version's), so count those still
        there: carried over blindly, a block fetched again was counted twice."""
        if old.state == CacheState.READY:
            return old.cached_bytes
        return sum(old.block_length(i) for i in range(old.blocks)
                   if self.cache.store.has(self.cache.block_file(old, i), old.block_length(i)))

    def _get(self, bucket: str, key: str, byte_range: str | None, index: int) -> tuple[ObjectMeta, BinaryIO]:
        """The source's GET (in a thread); a small object's whole answer from a peer is read here
        too (copies.read_small), so relaying it takes no other thread."""
        meta, body = self.cache.source.get_object(bucket, key, byte_range)
        if index or meta.size > self.cache.block_size:
            return meta, body
        return meta, read_small(body, meta.size)

    def _look_and_fetch(self, bucket: str, key: str, index: int, whole: bool, started: float,
                        policy: Policy) -> tuple[Entry | None, tuple[ObjectMeta, BinaryIO | None] | None]:
        """In one thread (one hop, not two): the key's row read again under the lock, then,
        unless another process discovered the version meanwhile (the row, and no GET), the GET."""
        old, discovered = self._row_again(bucket, key, started, policy)
        return old, None if discovered else self._fetch_first(bucket, key, index, whole)

    def _look_with(self, bucket: str, key: str, early: EarlyAnswer,
                   policy: Policy) -> tuple[Entry | None, tuple[ObjectMeta, BinaryIO | None] | None]:
        """``_look_and_fetch`` for an answer fetched before the lock (``_relay``): dropped if
        another process discovered the version meanwhile."""
        try:
            old, discovered = self._row_again(bucket, key, early.started, policy)
        except BaseException:
            early.close()
            raise
        if not discovered:
            return old, (early.meta, early.body)
        early.close()
        return old, None

    def _row_again(self, bucket: str, key: str, started: float, policy: Policy) -> tuple[Entry | None, bool]:
        """The key's row, and whether it is a version another process discovered since ``started``."""
        old = self.cache.index.get(bucket, key)
        return old, old is not None and old.state == CacheState.READY and (
            old.validated_at >= started - 1 or policy.is_fresh(old.validated_at, time.time()))

    def _fetch_first(self, bucket: str, key: str, index: int, whole: bool) -> tuple[ObjectMeta, BinaryIO | None]:
        """One GET of block ``index``: the metadata from its headers, the body for the block.

        A whole-object read asks without a Range, because only such an answer carries the
        object's stored checksums (S3 omits them from ranged answers); the fill then takes the
        first block of that stream and drops the connection if the object is larger.
        """
        if whole:
            return self._get(bucket, key, None, index)
        first, size = index * self.cache.block_size, self.cache.block_size
        try:
            return self._get(bucket, key, f"bytes={first}-{first + size - 1}", index)
        except S3Error as err:
            if err.code != "InvalidRange":
                raise
        # Empty object, or a range past the end: the whole object tells its size.
        meta, body = self.cache.source.get_object(bucket, key, None)
        if meta.size > self.cache.block_size:
            body.close()
            return meta, None
        return meta, body
