"""A block being fetched from the remote, readable while it fills (the tee of a miss).

The fetch runs in a worker thread and appends to a file in ``cache/tmp``; readers in the same
process follow it with their own descriptor (``pread``, or ranges of it the server sends with
``sendfile``), so the first byte of a miss reaches the client as soon as it arrives, and every
reader of the block shares one remote request.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from app.adapters.blockformat import DATA_OFFSET
from app.adapters.cachestore import FillFile
from app.domain.errors import S3Error
from app.domain.objects import FileRange

INLINE_READ = 256 * 1024
SEND_CHUNK = 4 * 1024 * 1024


@dataclass
class Fill:
    name: str
    length: int
    file: FillFile
    loop: asyncio.AbstractEventLoop
    read_fd: int = -1
    holds_last: bool = False  # the last byte waits for the fill's verdict (a checksum to check)
    done: bool = False
    error: BaseException | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)
    _finished: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.read_fd = os.open(self.file.path, os.O_RDONLY)

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

    def finish(self, error: BaseException | None) -> None:
        self.error = error
        self.done = error is None
        self.notify()
        self._finished.set()
        if self.read_fd >= 0:
            os.close(self.read_fd)
            self.read_fd = -1

    def reader_fd(self) -> int | None:
        """A private descriptor of the filling file, or None once it finished (read the block)."""
        return os.dup(self.read_fd) if self.read_fd >= 0 else None

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
                        yield FileRange(fd, DATA_OFFSET + pos, n)
                        pos += n
                        continue
                    if n <= INLINE_READ:
                        chunk = os.pread(fd, n, DATA_OFFSET + pos)
                    else:
                        chunk = await asyncio.to_thread(os.pread, fd, n, DATA_OFFSET + pos)
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
                os.close(fd)
