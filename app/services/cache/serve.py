"""Serving a cached object: block-file segments for a full hit, the streamed walk over blocks
with read-ahead, and ``acquire`` (a block's file, the fill of this process that is fetching it,
or a new fill once its cross-process lock is ours).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from app import metrics
from app.domain.cache import Entry
from app.domain.errors import S3Error
from app.domain.objects import FileRange, FileSegment
from app.services.cache.base import LOCK_POLL, LOCK_POLL_MAX, CacheBase
from app.services.cache.fill import INLINE_READ, SEND_CHUNK, Fill

SMALL_HIT = 64 * 1024  # blocks read whole for a hit; larger ones go out as file ranges or slices


class Serving:
    """Reading blocks out: segments, the stream, and where each block's bytes are. Starts
    fills through ``cache.filling``."""

    def __init__(self, cache: CacheBase) -> None:
        self.cache = cache

    def segments(self, entry: Entry, first: int, last: int) -> list[FileSegment] | None:
        """The range as block-file segments when every block is local (a full hit), else None."""
        if last < first:
            return []
        size = entry.block_size
        segments = []
        opener = self.cache.store.open_file  # a block deleted later is still found (retired)
        for idx in range(first // size, last // size + 1):
            name = self.cache.block_file(entry, idx)
            length = entry.block_length(idx)
            if self.cache.store.size_of(name) != length:
                return None
            start = max(first, idx * size) - idx * size
            end = min(last, idx * size + length - 1) - idx * size
            segments.append(self.cache.store.reader.segment(self.cache.store.file_of(name), start, end - start + 1, opener))
        return segments

    def small_hit(self, entry: Entry, first: int, last: int) -> tuple[bytes, list[FileSegment]] | None:
        """A range within one present block of at most ``SMALL_HIT`` bytes: its bytes, read
        now in one ``pread`` with the block's header (which ``size_of`` would read anyway), and
        its segment. None for anything else (the general walk serves it). The bytes are read
        before the answer starts, so an eviction after this cannot cut the body short."""
        size = entry.block_size
        idx = first // size
        if last < first or last // size != idx or entry.block_length(idx) > SMALL_HIT:
            return None
        name = self.cache.block_file(entry, idx)
        data = self.cache.store.read_small(name, SMALL_HIT)
        if data is None or len(data) != entry.block_length(idx):
            return None
        start = first - idx * size
        body = data[start:last - idx * size + 1] if start or last - idx * size + 1 != len(data) else data
        store = self.cache.store
        return body, [store.reader.segment(store.file_of(name), start, len(body), store.open_file)]

    async def stream(self, entry: Entry, first: int, last: int, outcome: str, *,
                     record: bool = True, file_ranges: bool = False) -> AsyncIterator[bytes | FileRange]:
        if last < first:
            return
        size = entry.block_size
        b0, b1 = first // size, last // size
        pending: dict[int, asyncio.Task[tuple[Any, bool]]] = {}
        served = 0

        # A block retired since this read began is still this version's: it is served from there,
        # not fetched again (If-Match of a replaced version would fail). One retired before it
        # began was left by an earlier entry of the same version (evicted: its bytes no longer
        # count) and is fetched again: served from there, an evicted object would keep hitting,
        # uncounted, for the retired grace.
        began = time.time() - 0.05  # a rename's ctime comes from the kernel's coarse clock (jiffies)

        def fetch_ahead(lo: int, hi: int) -> None:
            for ahead in range(lo, min(b1, hi) + 1):
                if ahead not in pending and not self.cache.store.servable(
                        self.cache.block_file(entry, ahead), entry.block_length(ahead), since=began):
                    pending[ahead] = asyncio.ensure_future(self.acquire(entry, ahead))

        # Readahead starts once the first chunk is on its way: started earlier, its requests
        # compete with the first block for the GIL and the link (time to first byte).
        reading_ahead = False
        try:
            for idx in range(b0, b1 + 1):
                # Keep up to fetch_concurrency blocks in flight ahead of the reader.
                fetch_ahead(idx, idx + self.cache.fetch_concurrency - 1 if reading_ahead else idx)
                task = pending.pop(idx, None)
                source = (await task)[0] if task is not None else None
                start = max(first, idx * size) - idx * size
                end = min(last, idx * size + entry.block_length(idx) - 1) - idx * size
                if not isinstance(source, Fill):
                    # Opened, not checked then opened: a block deleted meanwhile (a new version,
                    # a drop, an eviction, in any process) is found retired; one gone from both
                    # is fetched again.
                    try:
                        source = self.cache.store.open_block(self.cache.block_file(entry, idx))
                    except FileNotFoundError:
                        source, _ = await self.acquire(entry, idx)
                chunks = (self._serve(source, start, end, file_ranges) if isinstance(source, Fill)
                          else self.serve_open(source, start, end, file_ranges))
                async for chunk in chunks:
                    served += len(chunk)
                    yield chunk
                    if not reading_ahead:
                        reading_ahead = True
                        fetch_ahead(idx + 1, idx + self.cache.fetch_concurrency - 1)
        finally:
            for task in pending.values():
                task.cancel()
            if record:
                metrics.served_bytes(outcome, entry.bucket, served)

    async def _serve(self, source: Any, start: int, end: int,
                     file_ranges: bool = False) -> AsyncIterator[bytes | FileRange]:
        """Bytes of a block from its Fill (following it while it fills), its file path or an
        open descriptor of it (``serve_open`` takes it over)."""
        if isinstance(source, Fill):
            fd = source.reader_fd()
            if fd is not None:
                async for chunk in source.follow(fd, start, end, file_ranges):
                    yield chunk
                return
            source = source.name
        if not isinstance(source, int):
            try:
                source = self.cache.store.open_block(source if isinstance(source, str) and len(source) == 64
                                                     else Path(source).name)
            except FileNotFoundError as exc:  # deleted and swept (past the retired grace): the client retries
                raise S3Error("ServiceUnavailable", "A cached block disappeared while being served.") from exc
        async for chunk in self.serve_open(source, start, end, file_ranges):
            yield chunk

    async def serve_open(self, fd: int, start: int, end: int,
                          file_ranges: bool = False) -> AsyncIterator[bytes | FileRange]:
        """Bytes ``start..end`` of an open block file; closes ``fd`` when done."""
        reader = self.cache.store.reader
        length = end - start + 1
        try:
            if length <= INLINE_READ:
                yield reader.read(fd, start, length)
                return
            if file_ranges:
                yield reader.file_range(fd, start, length)
                return
            for piece in reader.slices(fd, start, end, SEND_CHUNK):  # to the socket without a copy
                yield piece
        finally:
            reader.close(fd)

    async def acquire(self, entry: Entry, index: int) -> tuple[Any, bool]:
        """A source for block ``index``: its file path, or the Fill that is fetching it. The flag
        tells whether this call started the fetch."""
        name = self.cache.block_file(entry, index)
        length = entry.block_length(index)
        waited_since: float | None = None
        delay = LOCK_POLL
        while True:
            if self.cache.store.has(name, length):
                if waited_since is not None:
                    metrics.singleflight_waited(time.monotonic() - waited_since)
                return self.cache.store.path(name), False
            fill = self.cache.inflight.get(name)
            if fill is not None:
                metrics.singleflight_waited(0.0)
                return fill, False
            if self.cache.store.try_lock(name):
                if self.cache.store.has(name, length):
                    self.cache.store.unlock(name)
                    continue
                return self.cache.filling.start_fill(entry, index, name, length, None), True
            # Another process is fetching this block: wait for it to publish.
            if waited_since is None:
                waited_since = time.monotonic()
            await asyncio.sleep(delay)
            delay = min(delay * 2, LOCK_POLL_MAX)
