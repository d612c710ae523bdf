"""The read-through cache: serve remote objects from local blocks, fetch each block once.

- A read looks the object up in the cache index. A fresh entry (per policy) is a hit, served
  from block files; an expired one is revalidated with a conditional HEAD (304 keeps it, a new
  ETag drops it).
- A miss discovers the current version with one GET of the block the client wants first (its
  headers carry the metadata) and tees that body into the block while the client reads it. The
  entry's row is written by that fetch once the first bytes are out (or, for a one-block object,
  with the finished block in one commit: app/services/recording.py). Later blocks are fetched
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
import mmap
import os
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, BinaryIO, TypeVar

import anyio
import anyio.to_thread

from app import metrics
from app.adapters.blockformat import DATA_OFFSET
from app.adapters.cachestore import CacheStore, block_name, meta_lock_name
from app.adapters.catalog.cache_index import CacheIndex, Entry
from app.adapters.remote import read_available
from app.domain.checksums import new_checksum, whole_object_checksum
from app.domain.errors import S3Error
from app.domain.objects import FileRange, FileSegment, ObjectMeta
from app.domain.policy import Policy
from app.domain.ranges import ByteRange
from app.domain.states import CacheState
from app.services.blockfill import INLINE_READ, SEND_CHUNK, Fill
from app.services.budget import DiskReserve
from app.services.policies import PolicyBook
from app.services.ports import RemotePort
from app.services.recording import PendingEntry, Recording, row_id
from app.services.scrub import Scrub

log = logging.getLogger("ferry.cache")
T = TypeVar("T")

LOOKUP = object()  # "look the entry up" (as opposed to a known entry, or a known absence)
FETCH_CHUNK = 256 * 1024
LOCK_POLL = 0.005
LOCK_POLL_MAX = 0.05
TOMBSTONE_SECONDS = 3600.0
ORPHAN_GRACE_SECONDS = 600.0  # blocks published this recently are never judged by the sweep
ORPHAN_SWEEP_SECONDS = 86400.0  # the orphan sweep runs a minute after start, then daily
ORPHAN_NAMES_PER_PASS = 1_000_000  # names held in memory at once (~64 MB); more: more passes
SWEEP_LOCK = "e" * 64  # one sweeping process per data directory
SEEN_SECONDS = 86400.0
SCRUB_EVERY = 10  # upkeep passes (seconds) between scrub calls: at most ~3 MiB/s of reads


@dataclass
class CachedRead:
    """What the gateway turns into an ObjectRead."""

    meta: ObjectMeta
    byte_range: ByteRange | None
    stream: AsyncIterator[bytes]
    close: Callable[[], None]
    outcome: str
    files: list[FileSegment] | None = None


def _outcome(outcome: str, bucket: str, tenant: int | None) -> None:
    metrics.cache_outcome(outcome, bucket, tenant)
    setter = getattr(metrics, "set_outcome", None)
    if setter is not None:
        setter(outcome)


def _before(key: str) -> str:
    """A string that sorts just before ``key``, so a listing that starts after it includes key."""
    if not key:
        return ""
    code = ord(key[-1]) - 1
    if 0xD800 <= code <= 0xDFFF:
        code = 0xD7FF
    return key[:-1] + (chr(code) + "\U0010ffff" if code >= 0 else "")


def _first_byte(range_header: str | None) -> int | None:
    """The first byte a ``bytes=a-b`` / ``bytes=a-`` range asks for (None for suffix ranges)."""
    if not range_header:
        return 0
    spec = range_header.strip()[6:]
    head = spec.split("-", 1)[0].strip()
    return int(head) if head.isdigit() else None


class ReadCache:
    def __init__(self, index: CacheIndex, store: CacheStore, remote: RemotePort, policies: PolicyBook, *,
                 block_size: int = 8 * 1024 * 1024, fetch_concurrency: int = 16, budget_bytes: int = 0,
                 dirty_bytes: Callable[[], int] | None = None, revalidate_interval: float = 60.0,
                 limiter: anyio.CapacityLimiter | None = None, disk: DiskReserve | None = None) -> None:
        self.index = index
        self.disk = disk  # the data dir's free space: fills stop before its reserve
        self.store = store
        self.remote = remote
        self.policies = policies
        self.block_size = block_size
        self.fetch_concurrency = fetch_concurrency
        self.budget_bytes = budget_bytes
        self.dirty_bytes = dirty_bytes or (lambda: 0)
        self.revalidate_interval = revalidate_interval
        self.limiter = limiter or anyio.CapacityLimiter(64)
        self.fetch_limiter = anyio.CapacityLimiter(fetch_concurrency)
        self._inflight: dict[str, Fill] = {}
        self._discovering: dict[tuple[str, str], asyncio.Future[Entry | None]] = {}
        # When each running discovery began: a reader may share it only if no write came since.
        self._discovery_began: weakref.WeakKeyDictionary[asyncio.Future[Entry | None], float] = (
            weakref.WeakKeyDictionary())
        self._touches: dict[int, tuple[float, int]] = {}
        self._added_since_check = 0
        self._evicting = False
        self._tasks: list[asyncio.Task[None]] = []
        self.scrub = Scrub(store)  # checks block bytes in the background; hits check only headers

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await anyio.to_thread.run_sync(fn, *args, limiter=self.limiter)

    # ---- lookups -----------------------------------------------------------------------------
    async def current(self, bucket: str, key: str, policy: Policy, known: Any = LOOKUP) -> tuple[Entry | None, str]:
        """The entry to serve and why ('hit', 'stale'), or (None, 'miss') when the remote must be read.
        ``known``: the index row the caller already looked up (None: there is none; LOOKUP: ask)."""
        entry = await self._run(self.index.get, bucket, key) if known is LOOKUP else known
        if entry is None or entry.state != CacheState.READY:
            return None, "miss"
        if policy.is_fresh(entry.validated_at, time.time()):
            return entry, "hit"
        try:
            meta = await self._run(self._conditional_head, bucket, key, entry.etag)
        except S3Error as err:
            if err.code == "NotModified":
                metrics.revalidated("unchanged")
                await self._run(self.index.validated, [entry.id])
                return entry, "hit"
            if err.code in ("NoSuchKey", "NoSuchBucket"):
                metrics.revalidated("deleted")
                await self.drop(entry)
                raise
            if err.status >= 500:
                metrics.revalidated("error")
                if policy.serve_stale:
                    return entry, "stale"
                raise S3Error("ServiceUnavailable", "The remote region is unreachable and the cached copy of this "
                              "object is past its revalidation policy (serve-stale is off).") from err
            raise
        if meta.etag == entry.etag:  # the remote ignored If-None-Match
            metrics.revalidated("unchanged")
            await self._run(self.index.validated, [entry.id])
            return entry, "hit"
        metrics.revalidated("changed")
        await self.drop(entry)
        return None, "miss"

    def _conditional_head(self, bucket: str, key: str, etag: str) -> ObjectMeta:
        return self.remote.head_object(bucket, key, if_none_match=etag)

    async def head(self, bucket: str, key: str, policy: Policy, tenant_id: int | None,
                   known: Any = LOOKUP) -> ObjectMeta:
        entry, _ = await self.current(bucket, key, policy, known)
        if entry is not None:
            self._touch(entry)
            return entry.meta
        return await self._run(self.remote.head_object, bucket, key)

    # ---- reads -------------------------------------------------------------------------------
    async def read(self, bucket: str, key: str, range_header: str | None,
                   byte_range: Callable[[int], ByteRange | None], policy: Policy,
                   tenant_id: int | None, known: Any = LOOKUP, *, file_ranges: bool = False) -> CachedRead | None:
        """Open the object through the cache; None when the caller should read the remote directly
        (second-hit admission's first miss, or a write raced the discovery). With ``file_ranges``
        the stream may yield ``FileRange`` items (for a server that sends files itself)."""
        entry, outcome = await self.current(bucket, key, policy, known)
        if entry is None:
            if self.disk_low() or (policy.admission == "second-hit"
                                   and not await self._run(self.index.mark_seen, bucket, key, tenant_id)):
                _outcome("miss", bucket, tenant_id)
                return None
            entry = await self.discover(bucket, key, _first_byte(range_header), policy, tenant_id,
                                        whole=range_header is None)
            if entry is None:
                _outcome("miss", bucket, tenant_id)
                return None
            outcome = "miss"
        else:
            self._touch(entry)
        rng = byte_range(entry.size) if range_header else None
        first, last = (rng.first, rng.last) if rng else (0, entry.size - 1)
        files = self._segments(entry, first, last) if outcome != "miss" else None
        if files is None and outcome != "miss" and self.disk_low():
            _outcome("miss", bucket, tenant_id)  # blocks to fetch, no room for them: read through
            return None
        _outcome(outcome, bucket, tenant_id)
        if files is not None:
            metrics.served_bytes(outcome, bucket, max(0, last - first + 1))
        stream = self._stream(entry, first, last, outcome, record=files is None, file_ranges=file_ranges)
        return CachedRead(entry.meta, rng, stream, lambda: None, outcome, files)

    def disk_low(self) -> bool:
        """Whether the disk is too close to its reserve for another block. Then misses are read
        through without caching (a fill would fail with ENOSPC mid-answer) and an eviction of
        clean entries is started."""
        if self.disk is None or self.disk.spare() >= 2 * self.block_size:
            return False
        self.schedule_eviction()
        return True

    def _segments(self, entry: Entry, first: int, last: int) -> list[FileSegment] | None:
        """The range as block-file segments when every block is local (a full hit), else None."""
        if last < first:
            return []
        size = entry.block_size
        segments = []
        for idx in range(first // size, last // size + 1):
            path = self.store.path(self._name(entry, idx))
            length = entry.block_length(idx)
            if self.store.size_of(self._name(entry, idx)) != length:
                return None
            start = max(first, idx * size) - idx * size
            end = min(last, idx * size + length - 1) - idx * size
            segments.append(FileSegment(str(path), DATA_OFFSET + start, end - start + 1))
        return segments

    def _touch(self, entry: Entry) -> None:
        _, hits = self._touches.get(entry.id, (0.0, 0))
        self._touches[entry.id] = (time.time(), hits + 1)

    async def _stream(self, entry: Entry, first: int, last: int, outcome: str, *,
                      record: bool = True, file_ranges: bool = False) -> AsyncIterator[bytes | FileRange]:
        if last < first:
            return
        size = entry.block_size
        b0, b1 = first // size, last // size
        pending: dict[int, asyncio.Task[tuple[Any, bool]]] = {}
        served = 0

        def fetch_ahead(lo: int, hi: int) -> None:
            for ahead in range(lo, min(b1, hi) + 1):
                if ahead not in pending and not self.store.has(self._name(entry, ahead), entry.block_length(ahead)):
                    pending[ahead] = asyncio.ensure_future(self.acquire(entry, ahead))

        # Readahead starts once the first chunk is on its way: started earlier, its requests
        # compete with the first block for the GIL and the link (time to first byte).
        reading_ahead = False
        try:
            for idx in range(b0, b1 + 1):
                # Keep up to fetch_concurrency blocks in flight ahead of the reader.
                fetch_ahead(idx, idx + self.fetch_concurrency - 1 if reading_ahead else idx)
                task = pending.pop(idx, None)
                source = (await task)[0] if task is not None else self.store.path(self._name(entry, idx))
                start = max(first, idx * size) - idx * size
                end = min(last, idx * size + entry.block_length(idx) - 1) - idx * size
                if not isinstance(source, Fill) and not os.path.exists(source):
                    source, _ = await self.acquire(entry, idx)  # evicted meanwhile: fetch it again
                async for chunk in self._serve(source, start, end, file_ranges):
                    served += len(chunk)
                    yield chunk
                    if not reading_ahead:
                        reading_ahead = True
                        fetch_ahead(idx + 1, idx + self.fetch_concurrency - 1)
        finally:
            for task in pending.values():
                task.cancel()
            if record:
                metrics.served_bytes(outcome, entry.bucket, served)

    async def _serve(self, source: Any, start: int, end: int,
                     file_ranges: bool = False) -> AsyncIterator[bytes | FileRange]:
        if isinstance(source, Fill):
            fd = source.reader_fd()
            if fd is not None:
                async for chunk in source.follow(fd, start, end, file_ranges):
                    yield chunk
                return
            source = self.store.path(source.name)
        length = end - start + 1
        try:
            fd = os.open(source, os.O_RDONLY)
        except FileNotFoundError as exc:  # evicted between check and open: the client retries
            raise S3Error("ServiceUnavailable", "A cached block disappeared while being served.") from exc
        try:
            if length <= INLINE_READ:
                yield os.pread(fd, length, DATA_OFFSET + start)
                return
            if file_ranges:
                yield FileRange(fd, DATA_OFFSET + start, length)
                return
            # Slices of a read-only map go to the socket without a copy into Python bytes; the
            # map is freed when the last slice is (block files are never truncated, only unlinked).
            view = memoryview(mmap.mmap(fd, 0, access=mmap.ACCESS_READ))
            pos, end = DATA_OFFSET + start, DATA_OFFSET + end
            while pos <= end:
                n = min(SEND_CHUNK, end + 1 - pos)
                yield view[pos:pos + n]
                pos += n
        finally:
            os.close(fd)

    @staticmethod
    def _name(entry: Entry, index: int) -> str:
        return block_name(entry.bucket, entry.key, entry.etag, index, entry.block_size)

    async def acquire(self, entry: Entry, index: int) -> tuple[Any, bool]:
        """A source for block ``index``: its file path, or the Fill that is fetching it. The flag
        tells whether this call started the fetch."""
        name = self._name(entry, index)
        length = entry.block_length(index)
        waited_since: float | None = None
        delay = LOCK_POLL
        while True:
            if self.store.has(name, length):
                if waited_since is not None:
                    metrics.singleflight_waited(time.monotonic() - waited_since)
                return self.store.path(name), False
            fill = self._inflight.get(name)
            if fill is not None:
                metrics.singleflight_waited(0.0)
                return fill, False
            if self.store.try_lock(name):
                if self.store.has(name, length):
                    self.store.unlock(name)
                    continue
                return self._start_fill(entry, index, name, length, None), True
            # Another process is fetching this block: wait for it to publish.
            if waited_since is None:
                waited_since = time.monotonic()
            await asyncio.sleep(delay)
            delay = min(delay * 2, LOCK_POLL_MAX)

    def _start_fill(self, entry: Entry, index: int, name: str, length: int, body: BinaryIO | None) -> Fill:
        """Begin fetching a block we hold the lock of; the fetch outlives any one reader.

        With ``body`` (a discovery's GET) and a pending entry, this fill also writes the entry's
        row (see app/services/recording.py)."""
        loop = asyncio.get_running_loop()
        try:
            fill = Fill(name, length, self.store.open_fill(name, index), loop)
        except BaseException:
            self.store.unlock(name)
            raise
        self._inflight[name] = fill
        rec = entry.recording if isinstance(entry, PendingEntry) and body is not None else None
        single = rec is not None and entry.blocks == 1
        # A fill that holds a whole object (a one-block object's discovery GET) is checked against
        # the checksum the remote stored, when it sent one: corrupt bytes are never published.
        expected = whole_object_checksum(entry.meta.checksums) if single and length == entry.size else None
        digest = new_checksum(expected[0]) if expected else None
        fill.holds_last = digest is not None

        def fetch() -> None:
            src = body
            error: BaseException | None = None
            keep = True  # False: a write raced the discovery; serve these bytes, cache nothing
            published = False
            accounted: int | None = None  # the entry row this block's bytes were added to
            try:
                if src is None:
                    first = index * entry.block_size
                    _, src = self.remote.get_object(entry.bucket, entry.key, f"bytes={first}-{first + length - 1}",
                                                    if_match=entry.etag)
                while True:
                    want = min(FETCH_CHUNK, length - fill.file.written) or FETCH_CHUNK
                    # The first bytes are forwarded as soon as they arrive (time to first byte).
                    chunk = read_available(src, want) if not fill.file.written else src.read(want)
                    if not chunk:
                        break
                    fill.file.write(chunk)
                    if digest is not None:
                        digest.update(chunk)
                    loop.call_soon_threadsafe(fill.notify)
                    if rec is not None and not single and not rec.settled.is_set():
                        keep = self._settle(rec, 0, loop) is not None  # first bytes are out: now the row
                    if fill.file.written >= length:
                        break
                if fill.file.written != length:
                    raise S3Error("ServiceUnavailable", f"the remote sent {fill.file.written} of {length} bytes")
                if digest is not None and expected is not None and digest.b64digest() != expected[1]:
                    metrics.cache_corrupt()
                    raise S3Error("InternalError", f"The remote's bytes do not match its stored {expected[0]} "
                                  "checksum; nothing was cached.")
                if not keep:
                    self.store.discard(fill.file)
                    return
                # Account the block before it becomes visible: a crash in between leaves a row
                # that over-counts (corrected when it is evicted), never a file no row accounts for.
                if single:
                    recorded = self._settle(rec, length, loop)  # type: ignore[arg-type]
                    accounted = recorded.id if recorded is not None else None
                else:
                    entry_id = row_id(entry)
                    accounted = entry_id if entry_id and self.index.add_bytes(entry_id, length) else None
                if accounted is None:
                    # The entry was evicted, replaced or never written while this block was in flight.
                    self.store.discard(fill.file)
                    return
                self.store.publish(fill.file)
                published = True
                metrics.remote_fetched(length)
                now = self.index.get(entry.bucket, entry.key)
                if now is None or now.id != accounted or now.state != CacheState.READY:
                    # Evicted or replaced between the accounting and the rename: nobody would
                    # reclaim this file.
                    self.store.delete(name)
            except BaseException as exc:  # the readers get the error; the next read refetches
                error = exc
                if published:
                    self.store.delete(name)
                else:
                    self.store.discard(fill.file)
                    if accounted is not None:  # counted, never published: take the bytes back
                        with contextlib.suppress(Exception):
                            self.index.add_bytes(accounted, -length)
                if isinstance(exc, S3Error) and exc.code == "PreconditionFailed":
                    # The object changed behind the cache: this entry is gone.
                    with contextlib.suppress(Exception):
                        self.index.invalidate(entry.bucket, entry.key)
            finally:
                if rec is not None and not rec.settled.is_set():
                    self._release_discovery(rec, None, loop)  # no row: the next read discovers again
                if src is not None:
                    with contextlib.suppress(Exception):
                        src.close()
                self.store.unlock(name)
                loop.call_soon_threadsafe(self._fill_done, fill, error)

        self._spawn(anyio.to_thread.run_sync(fetch, limiter=self.fetch_limiter))
        return fill

    def _spawn(self, work: Awaitable[Any]) -> None:
        """Run ``work`` on the loop without anyone awaiting it; ``stop`` cancels what is left."""
        task = asyncio.ensure_future(work)
        self._tasks.append(task)
        task.add_done_callback(lambda t: self._tasks.remove(t) if t in self._tasks else None)

    def _fill_done(self, fill: Fill, error: BaseException | None) -> None:
        self._inflight.pop(fill.name, None)
        fill.finish(error)
        if error is None:
            self._added_since_check += fill.length
            # Check limits after each 1% of the budget, and at least every 32 MiB: quotas are smaller.
            if self._added_since_check >= max(self.block_size, min(self.budget_bytes // 100, 32 * 1024 * 1024)):
                self.schedule_eviction()

    # ---- discovery (first miss of an object) --------------------------------------------------
    async def discover(self, bucket: str, key: str, first_byte: int | None, policy: Policy,
                       tenant_id: int | None, *, whole: bool = False) -> Entry | None:
        """Learn the current version with one GET and start caching; single-flight per key."""
        k = (bucket, key)
        running = self._discovering.get(k)
        if running is not None and running.done() and running.exception() is None:
            shared = running.result()
            if isinstance(shared, PendingEntry) and shared.recording and shared.recording.failed:
                running = None  # its fetch failed (the loop has not heard yet): discover afresh
        if running is not None:
            began = self._discovery_began.get(running)
            if began is not None and await self._run(self.index.changed_since, bucket, key, began):
                # A write (or its destage) came after that discovery began: the version it
                # fetched may be the older one, which this reader must not be served. It reads
                # the remote directly; the running discovery's row is refused by put_ready.
                return None
            return await asyncio.shield(running)
        future: asyncio.Future[Entry | None] = asyncio.get_running_loop().create_future()
        self._discovering[k] = future
        self._discovery_began[future] = time.time()
        try:
            entry = await self._discover_locked(bucket, key, first_byte, policy, tenant_id, whole)
        except BaseException as exc:
            self._discovering.pop(k, None)
            future.set_exception(exc)
            future.exception()  # retrieved: no "never retrieved" warning when nobody waits
            raise
        future.set_result(entry)
        rec = entry.recording if isinstance(entry, PendingEntry) else None
        if rec is None or rec.settled.is_set():
            self._discovering.pop(k, None)
        # else: later readers here share the pending entry until its row is written
        # (_discovery_settled), instead of discovering the object again.
        return entry

    def _settle(self, rec: Recording, block_bytes: int, loop: asyncio.AbstractEventLoop) -> Entry | None:
        """Write a discovered version's row (in a thread); always releases the discovery."""
        entry: Entry | None = None
        try:
            entry = self.index.put_ready(rec.meta, rec.bucket, rec.block_size, rec.tenant_id, rec.pinned,
                                         rec.started, rec.cached_bytes + block_bytes)
            if rec.replaced is not None:
                self._delete_blocks(rec.replaced)
        finally:
            self._release_discovery(rec, entry.id if entry is not None else None, loop)
        if entry is not None and rec.ranged:
            loop.call_soon_threadsafe(self._background, self._complete_checksums, entry)
        return entry

    def _background(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn`` in a thread without anyone waiting for it (on the event loop)."""
        async def run() -> None:
            try:
                await self._run(fn, *args)
            except Exception:
                log.exception("cache background task %s failed", getattr(fn, "__name__", fn))

        self._spawn(run())

    def _complete_checksums(self, entry: Entry) -> None:
        """A ranged discovery's answer carries no stored checksums (S3 leaves them out of ranged
        answers). One HEAD completes the row's metadata, so hits answer ``x-amz-checksum-mode``
        as the remote does. A changed object is left to revalidation."""
        try:
            meta = self.remote.head_object(entry.bucket, entry.key)
        except S3Error:
            return
        if meta.etag == entry.etag and meta.checksums:
            self.index.set_checksums(entry.id, entry.etag, meta.checksums)

    def _release_discovery(self, rec: Recording, entry_id: int | None, loop: asyncio.AbstractEventLoop) -> None:
        rec.settle(entry_id)
        self.store.unlock(rec.lock)
        loop.call_soon_threadsafe(self._discovery_settled, rec)

    def _discovery_settled(self, rec: Recording) -> None:
        k = (rec.bucket, rec.meta.key)
        future = self._discovering.get(k)
        if future is not None and future.done() and not future.cancelled() and future.exception() is None:
            entry = future.result()
            if isinstance(entry, PendingEntry) and entry.recording is rec:
                self._discovering.pop(k, None)

    async def _discover_locked(self, bucket: str, key: str, first_byte: int | None, policy: Policy,
                               tenant_id: int | None, whole: bool) -> Entry | None:
        lock = meta_lock_name(bucket, key)
        started = time.time()
        delay = LOCK_POLL
        waited_since: float | None = None
        while not self.store.try_lock(lock):
            if waited_since is None:
                waited_since = time.monotonic()
            await asyncio.sleep(delay)
            delay = min(delay * 2, LOCK_POLL_MAX)
        if waited_since is not None:
            metrics.singleflight_waited(time.monotonic() - waited_since)
        handed_off = False  # True once the lock is the Recording's to release
        try:
            # A point lookup: inline on the raw SQLite connection, a thread otherwise.
            old = (self.index.get(bucket, key) if self.index.lookups is not None
                   else await self._run(self.index.get, bucket, key))
            if old is not None and old.state == CacheState.READY and (
                    old.validated_at >= started - 1 or policy.is_fresh(old.validated_at, time.time())):
                return old  # another process discovered it while we waited
            index = (first_byte // self.block_size) if first_byte is not None else 0
            meta, body = await self._fetch_first(bucket, key, index, whole)
            if meta.size <= index * self.block_size and meta.size:
                index = 0
            same = old is not None and old.etag == meta.etag and old.block_size == self.block_size
            rec = Recording(meta, bucket, self.block_size, tenant_id, policy.pinned, started,
                            old.cached_bytes if old is not None and same else 0, lock,
                            old if old is not None and not same else None,
                            ranged=not whole and not meta.checksums and meta.size > 0)
            entry = rec.provisional()
            name = self._name(entry, index)
            length = entry.block_length(index)
            if (body is not None and length > 0 and name not in self._inflight and not self.store.has(name, length)
                    and self.store.try_lock(name)):
                self._start_fill(entry, index, name, length, body)  # it writes the row
                handed_off = True
                return entry
            if body is not None:
                body.close()
            handed_off = True
            return await self._run(self._settle, rec, 0, asyncio.get_running_loop())
        finally:
            if not handed_off:
                self.store.unlock(lock)

    async def _fetch_first(self, bucket: str, key: str, index: int, whole: bool) -> tuple[ObjectMeta, BinaryIO | None]:
        """One GET of block ``index``: the metadata from its headers, the body for the block.

        A whole-object read asks without a Range, because only such an answer carries the
        object's stored checksums (S3 omits them from ranged answers); the fill then takes the
        first block of that stream and drops the connection if the object is larger.
        """
        if whole:
            return await self._run(self.remote.get_object, bucket, key, None)
        first = index * self.block_size
        try:
            return await self._run(self.remote.get_object, bucket, key, f"bytes={first}-{first + self.block_size - 1}")
        except S3Error as err:
            if err.code != "InvalidRange":
                raise
        # Empty object, or a range past the end: the whole object tells its size.
        meta, body = await self._run(self.remote.get_object, bucket, key, None)
        if meta.size > self.block_size:
            body.close()
            return meta, None
        return meta, body

    # ---- warming (staging) --------------------------------------------------------------------
    async def warm(self, bucket: str, key: str, policy: Policy, tenant_id: int | None) -> int:
        """Fetch every block of the object not cached yet; returns the bytes fetched."""
        if self.disk_low():
            return 0
        entry, _ = await self.current(bucket, key, policy, LOOKUP)
        if entry is None:
            # A whole-object GET, as a client's first read would be: its answer carries the
            # stored checksums, which a ranged one does not.
            entry = await self.discover(bucket, key, 0, policy, tenant_id, whole=True)
            if entry is None:
                return 0
        blocks = range(entry.blocks) if entry.size else range(0)
        missing = [i for i in blocks if not self.store.has(self._name(entry, i), entry.block_length(i))]
        sem = asyncio.Semaphore(self.fetch_concurrency)

        async def one(index: int) -> None:
            async with sem:
                source, _ = await self.acquire(entry, index)
                if isinstance(source, Fill):
                    await source.wait_finished()
        await asyncio.gather(*(one(i) for i in missing))
        return sum(entry.block_length(i) for i in missing)

    # ---- invalidation and eviction ------------------------------------------------------------
    async def invalidate(self, bucket: str, key: str) -> None:
        """A write through the gateway replaced the key: no node serves the old version again."""
        await self._run(self.index.invalidate, bucket, key)

    async def drop(self, entry: Entry) -> None:
        await self._run(self._drop_sync, entry)

    def _drop_sync(self, entry: Entry) -> int:
        if not self.index.remove(entry):
            return 0
        return self._delete_blocks(entry)

    def _delete_blocks(self, entry: Entry) -> int:
        if not entry.size:
            return 0
        return sum(self.store.delete(self._name(entry, i)) for i in range(entry.blocks))

    def schedule_eviction(self) -> None:
        if self._evicting:
            return
        self._evicting = True
        self._added_since_check = 0

        async def run() -> None:
            try:
                await self._run(self.enforce_limits)
            except Exception:
                log.exception("cache eviction failed")
            finally:
                self._evicting = False

        self._spawn(run())

    def enforce_limits(self) -> int:
        """Evict until every tenant is within quota, every bucket within its policy's quota and
        the node within its budget. Returns the bytes freed."""
        self.flush_touches()
        freed = 0
        for tenant_id, quota in self.index.tenant_quotas():
            used = self.index.total_bytes(tenant_id=tenant_id)
            if used > quota:
                freed += self.evict(used - quota, tenant_id=tenant_id, reason="tenant-quota")
        rules = self.policies.rules()
        with_quota = {r.bucket for r in rules if r.quota_bytes is not None}
        buckets = self.index.buckets() if "*" in with_quota else sorted(with_quota)
        for bucket in buckets:
            quota = self.policies.for_bucket(bucket).quota_bytes
            if quota is not None:
                used = self.index.total_bytes(bucket=bucket)
                if used > quota:
                    freed += self.evict(used - quota, bucket=bucket, reason="bucket-quota")
        if self.disk is not None and (spare := self.disk.spare()) < 2 * self.block_size:
            freed += self.evict(4 * self.block_size - spare, reason="disk")  # up to a low-water mark
        if self.budget_bytes:
            used = self.index.total_bytes() + self.dirty_bytes()
            if used > self.budget_bytes:
                # Down to a low-water mark, so eviction does not run on every fill.
                freed += self.evict(used - int(self.budget_bytes * 0.95), reason="capacity")
        return freed

    def evict(self, need: int, *, tenant_id: int | None = None, bucket: str | None = None,
              reason: str = "capacity") -> int:
        """Drop least recently used, unpinned entries until ``need`` bytes are freed."""
        freed = entries = 0
        after: tuple[float, int] | None = None
        while freed < need:
            batch = self.index.lru(256, tenant_id=tenant_id, bucket=bucket, after=after)
            if not batch:
                break
            for entry in batch:
                after = (entry.last_access, entry.id)
                if self.policies.for_key(entry.bucket, entry.key).pinned:
                    continue
                dropped = self._drop_sync(entry)
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
            batch = self.index.under(bucket, prefix, after, 1000)
            if not batch:
                break
            for entry in batch:
                freed += self._drop_sync(entry)
                entries += 1
            after = batch[-1].key
        metrics.evicted("operator", entries, freed)
        return entries, freed

    def wipe(self) -> tuple[int, int]:
        """Drop every clean block of this node; the remote has all of it."""
        usage = self.index.total_bytes()
        count = self.index.delete_all()
        self.store.wipe()
        metrics.evicted("wipe", count, usage)
        return count, usage

    def sweep_orphans(self, grace: float = ORPHAN_GRACE_SECONDS) -> tuple[int, int]:
        """Delete block files no entry row accounts for; returns (files, bytes).

        A crash between a row's delete (eviction, invalidation, a new version replacing the row)
        and the unlink of its blocks leaves such files, and the budget never sees them. Fills
        write or account their row before they publish a block, so a block published before the
        sweep started whose row still exists is among the names collected from the rows after
        that: only files published before the start (less ``grace``) are judged. Memory stays
        bounded: names are collected for a range of shard directories at a time, in as many
        passes as ``ORPHAN_NAMES_PER_PASS`` needs."""
        if not self.store.try_lock(SWEEP_LOCK):
            return 0, 0  # another worker process of this node is sweeping
        try:
            cutoff = time.time() - grace
            blocks = self.index.block_count()
            passes = 1
            while passes < 256 and blocks / passes > ORPHAN_NAMES_PER_PASS:
                passes *= 2
            shards = [f"{i:02x}" for i in range(256)]
            per_pass = 256 // passes
            files = freed = 0
            for group in (shards[p * per_pass:(p + 1) * per_pass] for p in range(passes)):
                known = self._accounted_blocks(set(group) if passes > 1 else None)
                for shard in group:
                    for name, published, size in self.store.block_files(shard):
                        if published < cutoff and int(name[:16], 16) not in known:
                            self.store.delete(name)
                            files += 1
                            freed += size
        finally:
            self.store.unlock(SWEEP_LOCK)
        if files:
            metrics.evicted("orphan", files, freed)
            log.warning("cache sweep removed %d block files (%d bytes) that no entry accounted for", files, freed)
        return files, freed

    def _accounted_blocks(self, shards: set[str] | None) -> set[int]:
        """The first 64 bits of every block name this node's rows own (in ``shards`` only)."""
        known: set[int] = set()
        after = 0
        while rows := self.index.block_owners(after, 5000):
            for _, bucket, key, etag, size, block_size in rows:
                for index in range(max(1, -(-size // block_size))):
                    name = block_name(bucket, key, etag, index, block_size)
                    if shards is None or name[:2] in shards:
                        known.add(int(name[:16], 16))
            after = rows[-1][0]
        return known

    def usage(self) -> dict[str, Any]:
        out = self.index.usage()
        out["node_id"] = self.index.node_id
        out["budget_bytes"] = self.budget_bytes
        out["cached_bytes"] = self.index.total_bytes()
        out["dirty_bytes"] = self.dirty_bytes()
        return out

    # ---- bulk revalidation -------------------------------------------------------------------
    def revalidate_bucket(self, bucket: str, prefix: str = "") -> dict[str, int]:
        """Compare this node's entries with the remote listing, one LIST per 1000 keys; drop
        entries whose object changed or was deleted, mark the rest validated."""
        stats = {"unchanged": 0, "changed": 0, "deleted": 0, "lists": 0}
        after_key: str | None = None
        while True:
            batch = self.index.under(bucket, prefix, after_key, 1000)
            if not batch:
                return stats
            after_key = batch[-1].key
            entries = [e for e in batch if self.policies.for_key(bucket, e.key).revalidate != "immutable"]
            # Some servers (SeaweedFS) list directory by directory, not in S3's byte order, so a
            # key can be missing from a page that spans it; their profile says so.
            ordered = self.remote.profile(bucket).ordered_listing
            pos = 0
            while pos < len(entries):
                page = self.remote.list_objects(bucket, prefix, None, _before(entries[pos].key), 1000)
                stats["lists"] += 1
                remote = {c.key: c.etag for c in page.contents}
                horizon = page.contents[-1].key if page.is_truncated and page.contents else None
                fresh: list[int] = []
                while pos < len(entries) and (horizon is None or entries[pos].key <= horizon):
                    entry = entries[pos]
                    etag = remote.get(entry.key)
                    if etag is None and not ordered:
                        # Absent from a page that spans it, on a remote that may list out of
                        # byte order: ask about it directly before dropping anything.
                        etag = self._current_etag(bucket, entry.key)
                        stats["heads"] = stats.get("heads", 0) + 1
                    result = "unchanged" if etag == entry.etag else ("deleted" if etag is None else "changed")
                    stats[result] += 1
                    metrics.revalidated(result)
                    if result == "unchanged":
                        fresh.append(entry.id)
                    else:
                        self._drop_sync(entry)
                    pos += 1
                self.index.validated(fresh)

    def _current_etag(self, bucket: str, key: str) -> str | None:
        try:
            return self.remote.head_object(bucket, key).etag
        except S3Error as err:
            if err.code in ("NoSuchKey", "NoSuchBucket"):
                return None
            raise

    def revalidate_all(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for bucket in self.index.buckets():
            try:
                for name, n in self.revalidate_bucket(bucket).items():
                    totals[name] = totals.get(name, 0) + n
            except S3Error as err:
                if err.code == "NoSuchBucket":
                    continue
                log.warning("revalidation of %s failed: %s", bucket, err.message)
        return totals

    # ---- background upkeep -------------------------------------------------------------------
    def flush_touches(self) -> None:
        touches, self._touches = self._touches, {}
        if touches:
            try:
                self.index.touch(touches)
            except Exception:
                log.exception("recording cache access times failed")

    def janitor_pass(self, enforce: bool = True) -> None:
        """Drop this node's invalidated entries and old tombstones; enforce limits."""
        self.flush_touches()
        if not self.store.try_lock("f" * 64):
            return  # another worker process of this node is doing it
        try:
            for entry in self.index.invalid_entries():
                self._delete_blocks(entry)
                self.index.remove(entry)
            now = time.time()
            self.index.expire_tombstones(now - TOMBSTONE_SECONDS, now - SEEN_SECONDS)
            if enforce:
                self.enforce_limits()
        finally:
            self.store.unlock("f" * 64)

    async def start(self) -> None:
        await self._run(self.store.clear_stale_tmp, 600.0)
        self._tasks.append(asyncio.ensure_future(self._upkeep()))

    async def _upkeep(self) -> None:
        last_revalidation = time.monotonic()
        next_sweep = time.monotonic() + 60.0
        passes = 0
        while True:
            await asyncio.sleep(1.0)
            passes += 1
            try:
                # Limits are summed over the whole index: every few seconds is enough, since
                # fills also trigger a check once they add 1% of the budget.
                await self._run(self.janitor_pass, passes % 3 == 0)
                if self.revalidate_interval and time.monotonic() - last_revalidation >= self.revalidate_interval:
                    last_revalidation = time.monotonic()
                    await self._run(self.revalidate_all)
                if time.monotonic() >= next_sweep:
                    next_sweep = time.monotonic() + ORPHAN_SWEEP_SECONDS
                    await self._run(self.sweep_orphans)
                if passes % SCRUB_EVERY == 0:
                    await self._run(self.scrub.run)
            except Exception:
                log.exception("cache upkeep failed")

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        await self._run(self.flush_touches)
