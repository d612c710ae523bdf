"""Open files of the mount: a reader's chunk window over one object version, and a writer's
local staging file that becomes the object, whole, on fsync or close.

Reads fetch CHUNK-sized ranges of the version the file was opened at (If-Match: a newer version
fails with ESTALE, never a mix) and fetch the next chunks ahead while a reader walks forward.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import trio

from app.mount.objects import FileStat, GatewayObjects
from app.mount.streaming import PartStream

CHUNK = 8 * 1024 * 1024
AHEAD = 2  # chunks fetched ahead of a sequential reader
KEPT = 4  # chunks a handle holds at most (its memory: KEPT x CHUNK)


@dataclass(eq=False)
class ReadHandle:
    objects: GatewayObjects
    bucket: str
    key: str
    stat: FileStat
    spawn: Callable[..., None]  # start a background task (the filesystem's nursery)
    limiter: trio.CapacityLimiter
    _chunks: dict[int, bytearray | memoryview] = field(default_factory=dict)
    _loading: dict[int, trio.Event] = field(default_factory=dict)
    _errors: dict[int, OSError] = field(default_factory=dict)
    _last: int = -1
    served: bool = False  # a byte of this version was read: a newer one is ESTALE from then on

    async def read(self, offset: int, size: int) -> bytes | memoryview:
        """The bytes at ``offset``; within one chunk, a view of it (the session replies from any
        buffer: no copy of each read in Python; the chunk stays alive while the view does)."""
        if offset >= self.stat.size or size <= 0:
            return b""
        end = min(offset + size, self.stat.size)
        first, last = offset // CHUNK, (end - 1) // CHUNK
        sequential = first in (self._last, self._last + 1)
        self._last = last
        if sequential:
            for ahead in range(last + 1, min(last + 1 + AHEAD, self._count())):
                self._start(ahead)
        start = offset - first * CHUNK
        data: bytes | memoryview
        if first == last:
            data = memoryview(await self._chunk(first))[start:start + (end - offset)]
        else:
            joined = b"".join([await self._chunk(i) for i in range(first, last + 1)])
            data = joined[start:start + (end - offset)]
        self._trim(first)
        self.served = True
        return data

    def _count(self) -> int:
        return (self.stat.size + CHUNK - 1) // CHUNK

    def _start(self, index: int) -> None:
        if index in self._chunks or index in self._loading:
            return
        self._loading[index] = trio.Event()
        self.spawn(self._load, index)

    async def _load(self, index: int) -> None:
        done = self._loading[index]
        length = min(CHUNK, self.stat.size - index * CHUNK)
        try:
            self._chunks[index] = await trio.to_thread.run_sync(
                self.objects.read, self.bucket, self.key, index * CHUNK, length, self.stat.etag,
                limiter=self.limiter)
        except OSError as exc:
            self._errors[index] = exc
        finally:
            del self._loading[index]
            done.set()

    async def _chunk(self, index: int) -> bytearray | memoryview:
        while index not in self._chunks:
            if (error := self._errors.pop(index, None)) is not None:
                raise error
            self._start(index)
            await self._loading[index].wait()
        return self._chunks[index]

    def _trim(self, current: int) -> None:
        """Keep the chunks nearest the reader (behind it: one, for a small step back)."""
        while len(self._chunks) > KEPT:
            far = max(self._chunks, key=lambda i: (i < current - 1, abs(i - current)))
            del self._chunks[far]


@dataclass(eq=False)
class WriteHandle:
    """A file being written: its bytes in a local staging file (outside the gateway's data
    directory) until ``publish`` makes them the object in one acknowledged PUT."""

    bucket: str
    key: str
    path: Path
    fd: int
    dirty: bool = True  # a new or truncated file is published even if nothing is written
    unlinked: bool = False
    stream: PartStream | None = None  # its parts sent while it is written (app/mount/streaming.py)
    lock: trio.Lock = field(default_factory=trio.Lock)

    @classmethod
    def create(cls, staging: Path, bucket: str, key: str, objects: GatewayObjects | None = None,
               pool: ThreadPoolExecutor | None = None) -> WriteHandle:
        fd, name = tempfile.mkstemp(dir=staging, prefix="w-")
        stream = PartStream(objects, pool, bucket, key, fd) if objects is not None and pool is not None else None
        return cls(bucket, key, Path(name), fd, stream=stream)

    def write(self, offset: int, data: bytes) -> int:
        written = os.pwrite(self.fd, data, offset)
        self.dirty = True
        if self.stream is not None:
            self.stream.wrote(offset, offset + written)
        return written

    def read(self, offset: int, size: int) -> bytes:
        return os.pread(self.fd, size, offset)

    def truncate(self, size: int) -> None:
        os.ftruncate(self.fd, size)
        self.dirty = True
        if self.stream is not None:
            self.stream.spoil("truncated")

    @property
    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def close(self) -> None:
        if self.stream is not None:
            self.stream.abort()  # not published: nothing of it may stay on the gateway
        os.close(self.fd)
        self.path.unlink(missing_ok=True)
