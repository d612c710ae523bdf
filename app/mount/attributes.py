"""What ``stat`` shows for an object or a prefix: objects have a size and a time, nothing else."""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass, field

from app.mount import protocol as fuse
from app.mount.objects import FileStat

BLOCK = 1024 * 1024


@dataclass
class Attributes:
    """Builds entry attributes with one owner (the mount's user) and one timeout for all."""

    cache_seconds: float
    read_only: bool
    uid: int = field(default_factory=os.getuid)
    gid: int = field(default_factory=os.getgid)
    started_ns: int = field(default_factory=time.time_ns)

    def of(self, inode: int, found: FileStat | None, size: int | None = None) -> fuse.EntryAttributes:
        """A file's (``found`` or a size given) or, with neither, a directory's attributes."""
        a = fuse.EntryAttributes()
        a.st_ino = inode
        a.entry_timeout = a.attr_timeout = self.cache_seconds
        a.st_uid, a.st_gid = self.uid, self.gid
        write_bits = 0 if self.read_only else 0o200
        if found is None and size is None:
            a.st_mode = stat.S_IFDIR | 0o555 | write_bits
            a.st_nlink = 2
            a.st_size = 0
            # A prefix has no time of its own: the mount's start, so it never seems to change (tar checks).
            a.st_mtime_ns = a.st_ctime_ns = a.st_atime_ns = self.started_ns
        else:
            a.st_mode = stat.S_IFREG | 0o444 | write_bits
            a.st_nlink = 1
            a.st_size = size if size is not None else (found.size if found else 0)
            mtime = found.mtime_ns if found else int(time.time() * 1e9)
            a.st_mtime_ns = a.st_ctime_ns = a.st_atime_ns = mtime
        a.st_blksize = BLOCK
        a.st_blocks = (a.st_size + 511) // 512
        return a


def statfs() -> fuse.StatvfsData:
    """A bucket has no capacity to report: large, so ``df`` and space checks never refuse."""
    s = fuse.StatvfsData()
    s.f_bsize = s.f_frsize = BLOCK
    s.f_blocks = s.f_bfree = s.f_bavail = 1 << 30
    s.f_files = s.f_ffree = s.f_favail = 1 << 30
    s.f_namemax = 255
    return s
