"""Multiprocess mode's sample files, allocated before they are written (see the class)."""

from __future__ import annotations

import os

from prometheus_client import mmap_dict, values


class _AllocatedMmapedDict(mmap_dict.MmapedDict):
    """prometheus_client's sample file (multiprocess mode), with its disk blocks allocated before
    the mmap writes to them. The library grows a sparse file with ``truncate``; a write through
    the mmap into a hole that a full disk cannot back kills the worker with SIGBUS. Allocating
    with ``posix_fallocate`` first turns that into an OSError (ENOSPC) at worst."""

    def __init__(self, filename: str, read_mode: bool = False) -> None:
        if not read_mode:
            fd = os.open(filename, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                os.posix_fallocate(fd, 0, max(os.fstat(fd).st_size, mmap_dict._INITIAL_MMAP_SIZE))
            finally:
                os.close(fd)
        super().__init__(filename, read_mode)

    def _init_value(self, key: str) -> None:
        encoded = len(key.encode("utf-8"))
        needed = self._used + 4 + encoded + (8 - (encoded + 4) % 8) + 16  # the library's record size
        capacity = self._capacity
        while needed > capacity:
            capacity *= 2
        if capacity != self._capacity:
            os.posix_fallocate(self._f.fileno(), 0, capacity)
        super()._init_value(key)


# Where MultiProcessValue opens its files: a class replaced in a library, which no type allows.
values.MmapedDict = _AllocatedMmapedDict  # type: ignore[misc]
