"""Reading the bytes of cache block files: the read side of ``cachestore``.

A block file is a header then the block's bytes at ``DATA_OFFSET``; only this module and
``cachestore`` know that layout. The read cache hands it open descriptors (from
``CacheStore.open_block`` or a fill's private one) and gets back bytes, ``FileRange``s for the
zero-copy ``sendfile`` path, or slices of a read-only map — never offsets into the file.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Iterator

from app.adapters.local.blockformat import DATA_OFFSET
from app.domain.objects import FileRange, FileSegment


class BlockReader:
    """Reads of block data by its own offsets (0 is the block's first byte)."""

    @staticmethod
    def read(fd: int, start: int, length: int) -> bytes:
        """``length`` bytes from ``start`` in one ``pread`` (fewer at the file's end)."""
        return os.pread(fd, length, DATA_OFFSET + start)

    @staticmethod
    def file_range(fd: int, start: int, length: int) -> FileRange:
        """The range as a descriptor range the HTTP layer may ``sendfile`` (it owns no descriptor)."""
        return FileRange(fd, DATA_OFFSET + start, length)

    @staticmethod
    def segment(path: str, start: int, length: int, opener: Callable[[str], int]) -> FileSegment:
        """The range of the block file at ``path``, opened later by ``opener`` (a full hit's plan)."""
        return FileSegment(path, DATA_OFFSET + start, length, opener)

    @staticmethod
    def slices(fd: int, start: int, end: int, chunk: int) -> Iterator[memoryview]:
        """Bytes ``start..end`` as slices of at most ``chunk`` bytes of a read-only map: they reach the
        socket without a copy into Python bytes, and the map is freed with the last slice (block files
        are never truncated, only retired and unlinked)."""
        view = memoryview(mmap.mmap(fd, 0, access=mmap.ACCESS_READ))
        pos, stop = DATA_OFFSET + start, DATA_OFFSET + end
        while pos <= stop:
            n = min(chunk, stop + 1 - pos)
            yield view[pos:pos + n]
            pos += n

    @staticmethod
    def open(path: str) -> int:
        """A read-only descriptor of a file being filled (its bytes grow behind the header)."""
        return os.open(path, os.O_RDONLY)

    @staticmethod
    def dup(fd: int) -> int:
        return os.dup(fd)

    @staticmethod
    def close(fd: int) -> None:
        os.close(fd)
