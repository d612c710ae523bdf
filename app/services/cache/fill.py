"""The block fill: one block fetched into the cache, readable while it fills (the tee of a miss).

The fetch runs in a worker thread as named steps, **fetch -> verify -> account -> publish**
(``Filling._run_fill``; a one-block object's discovery publishes, then writes its row, one
transaction and no read after, see ``_fill_publish_and_record``); any failure rolls back (the
file is discarded, bytes counted are taken back, a changed object's entry is invalidated) and
the release always runs (the discovery, the response and the block's lock). The fetch appends
to a file in ``cache/tmp``; readers in the same process follow it with their own descriptor
(``Fill.follow``: ``pread``, or ranges of it the server sends with ``sendfile``), so the first
byte of a miss reaches the client as soon as it arrives, and every reader of the block shares
one request.

Where the bytes come from is one seam, ``BlockSource`` (app/services/ports.py): a discovery hands
its own GET's body to the fill of the first block; every other fill asks ``self.source``
(``RemoteBlockSource`` unless bootstrap injects another, e.g. a peer node).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import anyio
import anyio.to_thread

from app import metrics
from app.adapters.remote import body_failure, read_available
from app.domain.cache import Entry
from app.domain.checksums import new_checksum, whole_object_checksum
from app.domain.errors import S3Error
from app.domain.objects import FileRange, ObjectMeta
from app.domain.states import CacheState
from app.services.cache.base import CacheBase
from app.services.cache.on_behalf import on_behalf_of
from app.services.cache.recording import PendingEntry, Recording, row_id
from app.services.ports import BlockFill, BlockReads, RemoteObjects

INLINE_READ = 256 * 1024
SEND_CHUNK = 4 * 1024 * 1024
FETCH_CHUNK = 256 * 1024
READINTO_CHUNK = 1024 * 1024  # a body read into one reused buffer (a peer's): fewer, larger steps


@dataclass
class Fill:
    """The reader side of a block being fetched: its file, how much has landed, the verdict."""

    name: str
    length: int
    file: BlockFill
    loop: asyncio.AbstractEventLoop
    reader: BlockReads
    read_fd: int = -1
    holds_last: bool = False  # the last byte waits for the fill's verdict (a checksum to check)
    done: bool = False
    error: BaseException | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _finished: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.read_fd = self.file.open_reader()
        # Closes the descriptor once, at ``finish`` or, for a block that was not kept, once
        # nobody holds this fill any more (its readers may start after it finished).
        self._closer = weakref.finalize(self, self.reader.close, self.read_fd)

    @property
    def written(self) -> int:
        return self.file.written

    @property
    def visible(self) -> int:
        """Bytes readers may have: all written ones, except the last while a verdict is pending,
        so a reader never completes an answer the fill may still reject."""
        return self.file.written if self.done or not self.holds_last else max(0, self.file.written - 1)

    # Called on the event loop (from the fetch thread through call_soon_threadsafe).
    def notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def finish(self, error: BaseException | None, unkept: bool = False) -> None:
        """The fetch ended. ``unkept``: its bytes were served but not published (a relay, an
        admission refusal); a reader that got this fill and starts now still reads them from
        the filling file's descriptor, since there is no block file to open."""
        self.error = error
        self.done = error is None
        self.notify()
        self._finished.set()
        if not (unkept and self.done):
            self._closer()
            self.read_fd = -1

    def reader_fd(self) -> int | None:
        """A private descriptor of the filling file, or None once it finished (read the block, or
        for a failed fill, nothing: the error)."""
        return self.reader.dup(self.read_fd) if self.read_fd >= 0 else None

    async def wait_finished(self) -> None:
        await self._finished.wait()
        if self.error is not None:
            raise self.error

    async def follow(self, fd: int, first: int, last: int,
                     file_ranges: bool = False) -> AsyncIterator[bytes | FileRange]:
        """Bytes ``first..last`` of the block as they land; raises if the fetch fails. With
        ``file_ranges``, what has landed is yielded as ranges of ``fd`` instead of read."""
        pos = first
        try:
            while pos <= last:
                available = min(self.visible, last + 1)
                if available > pos:
                    n = min(available - pos, SEND_CHUNK)
                    if file_ranges:
                        yield self.reader.file_range(fd, pos, n)
                        pos += n
                        continue
                    if n <= INLINE_READ:
                        chunk = self.reader.read(fd, pos, n)
                    else:
                        chunk = await asyncio.to_thread(self.reader.read, fd, pos, n)
                    if not chunk:
                        raise S3Error("InternalError", "a cached block is shorter than recorded")
                    pos += len(chunk)
                    yield chunk
                    continue
                if self.error is not None:
                    raise S3Error("ServiceUnavailable", f"The remote stream failed: {self.error}")
                if self.done and self.written <= pos:
                    raise S3Error("InternalError", "a cached block ended early")
                changed = self._changed
                if self.visible > pos or self.error is not None or (self.done and self.written <= pos):
                    continue
                await changed.wait()
        finally:
            with contextlib.suppress(OSError):
                self.reader.close(fd)


class BlockCrc:
    """The whole object's CRC32 checksum when the object is one block: the running CRC-32 the fill
    file keeps for the block's header is that value, so the bytes are not checksummed twice
    (a pass costs ~5 ms per 8 MiB here)."""

    algorithm = "CRC32"

    def __init__(self, file: BlockFill) -> None:
        self.file = file

    def update(self, data: bytes | bytearray | memoryview) -> None:
        """Nothing: the fill file has already folded these bytes into its CRC."""

    def b64digest(self) -> str:
        return base64.b64encode((self.file.crc & 0xFFFFFFFF).to_bytes(4, "big")).decode("ascii")


class RemoteBlockSource:
    """The default ``BlockSource``: a ranged GET of the remote, ``If-Match`` the entry's ETag, so
    bytes of two versions never mix in one object."""

    def __init__(self, remote: RemoteObjects) -> None:
        self.remote = remote

    def open_range(self, bucket: str, key: str, etag: str, first: int, last: int) -> BinaryIO:
        _, body = self.remote.get_object(bucket, key, f"bytes={first}-{last}", if_match=etag)
        return body

    def get_object(self, bucket: str, key: str, byte_range: str | None = None,
                   if_match: str | None = None) -> tuple[ObjectMeta, BinaryIO]:
        return self.remote.get_object(bucket, key, byte_range, if_match=if_match)

    def from_peer(self, bucket: str, key: str, index: int) -> bool:
        """Never: a node alone holds every block it reads."""
        return False

    def owner_of(self, bucket: str, key: str, index: int) -> str | None:
        return None  # no other node

    def read_owned(self, owner: str, entry: Entry, first: int, last: int, tenant_id: int | None) -> bytes | None:
        return None


@dataclass
class FillJob:
    """One block's fetch as the fetch thread carries it through its steps."""

    entry: Entry
    index: int
    fill: Fill
    loop: asyncio.AbstractEventLoop
    body: BinaryIO | None  # the response read from: a discovery's GET, or the source's
    rec: Recording | None = None  # set: this fill writes the discovered entry's row
    single: bool = False  # the row is written with this block, the object's only one
    expected: tuple[str, str] | None = None  # (algorithm, value) the remote stored for the object
    digest: Any = None  # the running checksum of the bytes, when there is one to check
    keep: bool = True  # False: a write raced the discovery; serve these bytes, cache nothing
    accounted: int | None = None  # the entry row this block's bytes were added to
    published: bool = False

    @property
    def name(self) -> str:
        return self.fill.name

    @property
    def length(self) -> int:
        return self.fill.length


class Filling:
    """Starting fills, and the fetch thread's steps. Settles discoveries through
    ``cache.discovery`` and schedules eviction through ``cache.eviction``."""

    def __init__(self, cache: CacheBase) -> None:
        self.cache = cache

    def start_fill(self, entry: Entry, index: int, name: str, length: int, body: BinaryIO | None) -> Fill:
        """Begin fetching a block we hold the lock of; the fetch outlives any one reader.

        With ``body`` (a discovery's GET) and a pending entry, this fill also writes the entry's
        row (see recording.py)."""
        loop = asyncio.get_running_loop()
        rec = entry.recording if isinstance(entry, PendingEntry) else None
        # A relay (copies.py): the owner's bytes pass through a file its readers follow, with no
        # CRC pass and no checksum verdict (the owner checked them when it filled the block; a
        # relay is that owner's hit plus one hop), and are never kept.
        relay = rec is not None and rec.relayed
        try:
            fill = Fill(name, length, self.cache.store.open_fill(name, index, checksummed=not relay), loop,
                        self.cache.store.reader)
        except BaseException:
            self.cache.store.unlock(name)
            raise
        self.cache.inflight[name] = fill
        job = FillJob(entry, index, fill, loop, body)
        if isinstance(entry, PendingEntry) and body is not None:
            job.rec = entry.recording
            job.single = job.rec is not None and entry.blocks == 1
            job.keep = job.rec is None or not job.rec.refused  # refused by admission: served, not kept
        # An object admitted in part keeps blocks while its allowance lasts (admission.py).
        job.keep = job.keep and not relay and self.cache.admission.keep_block(entry.bucket, entry.key, length)
        # A fill that holds a whole object (a one-block object's discovery GET) is checked against
        # the checksum the remote stored, when it sent one: corrupt bytes are never published.
        if job.single and length == entry.size and not relay:
            job.expected = whole_object_checksum(entry.meta.checksums)
            if job.expected and job.expected[0] == "CRC32":
                job.digest = BlockCrc(fill.file)  # the fill file's own running CRC: no second pass
            elif job.expected:
                job.digest = new_checksum(job.expected[0])
        fill.holds_last = job.digest is not None
        self.cache.spawn(anyio.to_thread.run_sync(self._run_fill, job, limiter=self.cache.fetch_limiter))
        return fill

    def _run_fill(self, job: FillJob) -> None:
        """The fetch thread: fetch -> verify -> account -> publish. Bytes of a version a write
        raced, or of a row that is gone, are served to the readers but never published. A failure
        rolls back and reaches every reader; the release always runs."""
        error: BaseException | None = None
        try:
            self._fill_fetch(job)
            self._fill_verify(job)
            if job.keep and job.single:
                self._fill_publish_and_record(job)
            elif job.keep and self._fill_account(job):
                self._fill_publish(job)
            else:
                self.cache.store.discard(job.fill.file)
            if job.accounted is not None:
                self.cache.admission.landed(job.entry.bucket, job.entry.key, job.length)
        except BaseException as exc:  # the readers get the error; the next read refetches
            error = exc
            self._fill_roll_back(job, exc)
        finally:
            self._fill_release(job, error)

    def _fill_fetch(self, job: FillJob) -> None:
        """Step 1: copy the block's bytes into the fill file as they arrive (readers follow). A
        discovery's fill of a several-block object writes the entry's row after its first chunk."""
        fill, entry, rec = job.fill, job.entry, job.rec
        if job.body is None:
            first = job.index * entry.block_size
            with on_behalf_of(entry.tenant_id):  # a peer that serves the block charges this tenant
                job.body = self.cache.source.open_range(entry.bucket, entry.key, entry.etag, first, first + job.length - 1)
        # A body that reads into a buffer (a peer's) fills one reused buffer: no new bytes object
        # per chunk. Others (botocore's, which counts and checks what it hands out) are read.
        readinto = getattr(job.body, "readinto", None)
        buffer = memoryview(bytearray(READINTO_CHUNK)) if readinto is not None else None
        step = READINTO_CHUNK if buffer is not None else FETCH_CHUNK
        while True:
            want = min(step, job.length - fill.file.written) or step
            # The first bytes are forwarded as soon as they arrive (time to first byte).
            try:
                if readinto is not None and buffer is not None and fill.file.written:
                    chunk: bytes | memoryview = buffer[:readinto(buffer[:want])]
                else:
                    chunk = read_available(job.body, want) if not fill.file.written else job.body.read(want)
            except Exception as exc:
                metrics.remote_body_failed(body_failure(exc))
                raise
            if not chunk:
                break
            fill.file.write(chunk)
            if job.digest is not None:
                job.digest.update(chunk)
            job.loop.call_soon_threadsafe(fill.notify)
            if rec is not None and not job.single and not rec.settled.is_set():
                job.keep = self.cache.discovery.settle(rec, 0, job.loop) is not None  # first bytes are out: now the row
            if fill.file.written >= job.length:
                break

    @staticmethod
    def _fill_verify(job: FillJob) -> None:
        """Step 2: the block is whole, and (for a whole object) matches the remote's checksum."""
        written = job.fill.file.written
        if written != job.length:
            metrics.remote_body_failed("truncated")
            raise S3Error("ServiceUnavailable", f"the remote sent {written} of {job.length} bytes")
        if job.digest is not None and job.expected is not None and job.digest.b64digest() != job.expected[1]:
            metrics.cache_corrupt()
            metrics.remote_body_failed("corrupt")
            raise S3Error("InternalError", f"The remote's bytes do not match its stored {job.expected[0]} "
                          "checksum; nothing was cached.")

    def _fill_account(self, job: FillJob) -> bool:
        """Step 3: add the block's bytes to its entry's row before the block becomes visible: a
        crash in between leaves a row that over-counts (corrected when it is evicted), never a
        file no row accounts for. False: the entry was evicted, replaced or never written while
        this block was in flight."""
        entry_id = row_id(job.entry)
        job.accounted = entry_id if entry_id and self.cache.index.add_bytes(entry_id, job.length) else None
        return job.accounted is not None

    def _fill_publish_and_record(self, job: FillJob) -> None:
        """Steps 3 and 4 of a one-block object's discovery: the block is renamed into place, then
        its row is written with it, in one transaction and no read after (the fill's last byte
        waits for both, so a GET that ended has cached the object). No row can name the block
        before that transaction, so nothing can evict it in between; a write that raced the
        discovery refuses the row, and the file goes. A crash in between leaves a file no row
        accounts for, which the orphan sweep removes (it judges only files published more than
        ORPHAN_GRACE_SECONDS before it starts)."""
        assert job.rec is not None, "a one-block fill carries its discovery's recording"
        self.cache.store.publish(job.fill.file)
        job.published = True
        recorded = self.cache.discovery.settle(job.rec, job.length, job.loop)
        job.accounted = recorded.id if recorded is not None else None
        if recorded is None:
            self.cache.store.delete(job.name)
            return
        metrics.remote_fetched(job.length)

    def _fill_publish(self, job: FillJob) -> None:
        """Step 4: rename the block into place, then read the row once more: a row evicted or
        replaced between the accounting and the rename takes the file with it (nobody else
        would reclaim it)."""
        self.cache.store.publish(job.fill.file)
        job.published = True
        metrics.remote_fetched(job.length)
        now = self.cache.index.get(job.entry.bucket, job.entry.key)
        if now is None or now.id != job.accounted or now.state != CacheState.READY:
            self.cache.store.delete(job.name)

    def _fill_roll_back(self, job: FillJob, exc: BaseException) -> None:
        """After a failure: no file stays, no byte stays counted; an object that changed behind
        the cache (If-Match refused) loses its entry."""
        if job.published:
            self.cache.store.delete(job.name)
        else:
            self.cache.store.discard(job.fill.file)
            if job.accounted is not None:  # counted, never published: take the bytes back
                with contextlib.suppress(Exception):
                    self.cache.index.add_bytes(job.accounted, -job.length)
        if isinstance(exc, S3Error) and exc.code == "PreconditionFailed":
            with contextlib.suppress(Exception):
                self.cache.index.invalidate(job.entry.bucket, job.entry.key)

    def _fill_release(self, job: FillJob, error: BaseException | None) -> None:
        """Always: a discovery whose row was not written is released (the next read discovers
        again), the response is closed, the block unlocked, the readers told."""
        if job.rec is not None and not job.rec.settled.is_set():
            self.cache.discovery.release_discovery(job.rec, None, job.loop)
        if job.body is not None:
            with contextlib.suppress(Exception):
                job.body.close()
        self.cache.store.unlock(job.name)
        job.loop.call_soon_threadsafe(self._fill_done, job.fill, error, not job.published)

    def _fill_done(self, fill: Fill, error: BaseException | None, unkept: bool = False) -> None:
        """On the loop: the fill is no longer followable; check limits now and then."""
        self.cache.inflight.pop(fill.name, None)
        fill.finish(error, unkept)
        if error is None and not unkept:
            self.cache.added_since_check += fill.length
            # Check limits after each 1% of the budget, and at least every 32 MiB: quotas are smaller.
            if self.cache.added_since_check >= max(self.cache.block_size, min(self.cache.budget_bytes // 100, 32 * 1024 * 1024)):
                self.cache.eviction.schedule_eviction()
