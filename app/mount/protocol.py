"""The FUSE kernel protocol (``linux/fuse.h``): what the kernel sends on /dev/fuse and what it
expects back, and the values the filesystem's operations return.

Why our own and not libfuse's: the read path needs two things libfuse 3.14 (Debian 12's, and
pyfuse3's only base) cannot ask the kernel for at INIT: ``FUSE_DIRECT_IO_ALLOW_MMAP`` (a file
opened for direct reads still maps, through the page cache) and, later, passthrough. A direct
read is answered straight into the reader's buffer: one copy, where the page-cache path costs a
copy into the kernel's pages, one out of them and the pages' bookkeeping (docs/benchmarks.md,
"POSIX mount"). The protocol itself is small and stable: fixed little-endian structs.

Only what ``ferry mount`` answers is here; the session (``session.py``) answers ENOSYS to the
rest, which the kernel remembers (xattrs, access, ...) or turns into its own default (locks stay
in the kernel: no ``FUSE_POSIX_LOCKS``, so flock/fcntl locks work within the node).
"""

from __future__ import annotations

import errno
import os
import stat
import struct
from dataclasses import dataclass, field

ROOT_INODE = 1

# opcodes
LOOKUP, FORGET, GETATTR, SETATTR, READLINK, SYMLINK = 1, 2, 3, 4, 5, 6
MKNOD, MKDIR, UNLINK, RMDIR, RENAME, LINK, OPEN, READ, WRITE, STATFS, RELEASE = 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18
FSYNC, FLUSH, INIT, OPENDIR, READDIR, RELEASEDIR, FSYNCDIR = 20, 25, 26, 27, 28, 29, 30
CREATE, INTERRUPT, DESTROY, BATCH_FORGET, READDIRPLUS, RENAME2 = 35, 36, 38, 42, 44, 45

# INIT flags (flags | flags2 << 32)
ASYNC_READ = 1 << 0
ATOMIC_O_TRUNC = 1 << 3
BIG_WRITES = 1 << 5
AUTO_INVAL_DATA = 1 << 12
DO_READDIRPLUS = 1 << 13
ASYNC_DIO = 1 << 15
PARALLEL_DIROPS = 1 << 18
MAX_PAGES = 1 << 22
INIT_EXT = 1 << 30
DIRECT_IO_ALLOW_MMAP = 1 << 36
WANTED = ASYNC_READ | ATOMIC_O_TRUNC | BIG_WRITES | AUTO_INVAL_DATA | DO_READDIRPLUS | ASYNC_DIO \
    | PARALLEL_DIROPS | MAX_PAGES | INIT_EXT | DIRECT_IO_ALLOW_MMAP

# open reply flags
FOPEN_DIRECT_IO, FOPEN_KEEP_CACHE = 1 << 0, 1 << 1

# setattr "valid" bits
FATTR_MODE, FATTR_UID, FATTR_GID, FATTR_SIZE, FATTR_ATIME, FATTR_MTIME = 1, 2, 4, 8, 16, 32
FATTR_ATIME_NOW, FATTR_MTIME_NOW, FATTR_CTIME = 128, 256, 1024

KERNEL_MAJOR = 7
MINOR = 39  # the newest layout used here (7.39: FUSE_DIRECT_IO_ALLOW_MMAP)
MAX_PAGES_PER_REQUEST = 256  # 1 MiB requests: the kernel's own ceiling (FUSE_MAX_MAX_PAGES)
MAX_WRITE = MAX_PAGES_PER_REQUEST * 4096
BUFFER_SIZE = MAX_WRITE + 4096  # a request's header and arguments beside its largest data

IN_HEADER = struct.Struct("<IIQQIIIHH")  # len, opcode, unique, nodeid, uid, gid, pid, extlen, pad
OUT_HEADER = struct.Struct("<IiQ")  # len, error, unique
INIT_IN = struct.Struct("<IIII")  # major, minor, max_readahead, flags
INIT_OUT = struct.Struct("<IIIIHHIIHHII24x")
ATTR = struct.Struct("<QQQQQQIIIIIIIIII")
ENTRY = struct.Struct("<QQQQII")  # nodeid, generation, entry_valid, attr_valid, and their ns
ATTR_OUT = struct.Struct("<QII")  # attr_valid, its ns, dummy
GETATTR_IN = struct.Struct("<IIQ")
SETATTR_IN = struct.Struct("<IIQQQQQQIIIIIIII")
MKDIR_IN = struct.Struct("<II")
RENAME_IN = struct.Struct("<Q")
RENAME2_IN = struct.Struct("<QII")
OPEN_IN = struct.Struct("<II")
OPEN_OUT = struct.Struct("<QIi")
CREATE_IN = struct.Struct("<IIII")
READ_IN = struct.Struct("<QQIIQII")  # fh, offset, size, read_flags, lock_owner, flags, padding
WRITE_IN = READ_IN
WRITE_OUT = struct.Struct("<II")
RELEASE_IN = struct.Struct("<QIIQ")
FSYNC_IN = struct.Struct("<QII")
STATFS_OUT = struct.Struct("<QQQQQIIII24x")
DIRENT = struct.Struct("<QQII")  # ino, off (the next entry's), namelen, type


class FUSEError(Exception):
    """An operation's answer to the kernel: this errno (never anything that ends the mount)."""

    def __init__(self, code: int) -> None:
        super().__init__(code, os.strerror(code))
        self.errno = code

    def __str__(self) -> str:
        return f"FUSEError({errno.errorcode.get(self.errno, self.errno)})"


@dataclass
class EntryAttributes:
    st_ino: int = 0
    st_mode: int = 0
    st_nlink: int = 1
    st_uid: int = 0
    st_gid: int = 0
    st_rdev: int = 0
    st_size: int = 0
    st_blksize: int = 4096
    st_blocks: int = 0
    st_atime_ns: int = 0
    st_mtime_ns: int = 0
    st_ctime_ns: int = 0
    generation: int = 0
    entry_timeout: float = 0.0
    attr_timeout: float = 0.0


@dataclass
class FileInfo:
    fh: int = 0
    keep_cache: bool = False
    direct_io: bool = False


@dataclass
class StatvfsData:
    f_bsize: int = 4096
    f_frsize: int = 4096
    f_blocks: int = 0
    f_bfree: int = 0
    f_bavail: int = 0
    f_files: int = 0
    f_ffree: int = 0
    f_favail: int = 0
    f_namemax: int = 255


@dataclass(frozen=True)
class SetattrFields:
    update_mode: bool = False
    update_uid: bool = False
    update_gid: bool = False
    update_size: bool = False
    update_atime: bool = False
    update_mtime: bool = False
    update_ctime: bool = False


@dataclass(frozen=True)
class RequestContext:
    uid: int
    gid: int
    pid: int
    umask: int = 0


@dataclass
class DirectoryReply:
    """The buffer one READDIRPLUS (or READDIR) answer fills: the token ``readdir_reply`` writes to."""

    limit: int
    plus: bool = True
    parts: list[bytes] = field(default_factory=list)
    size: int = 0


def readdir_reply(token: DirectoryReply, name: bytes, attrs: EntryAttributes, next_id: int) -> bool:
    """Add one entry; False when it does not fit (the kernel asks again from ``next_id - 1``)."""
    kind = stat.S_IFMT(attrs.st_mode) >> 12
    record = (entry(attrs) if token.plus else b"") + DIRENT.pack(attrs.st_ino, next_id, len(name), kind) + name
    record += b"\0" * (-len(record) % 8)
    if token.size + len(record) > token.limit:
        return False
    token.parts.append(record)
    token.size += len(record)
    return True


def _split(seconds: float) -> tuple[int, int]:
    seconds = max(0.0, seconds)
    whole = int(seconds)
    return whole, int((seconds - whole) * 1e9)


def attr(a: EntryAttributes) -> bytes:
    atime, mtime, ctime = (divmod(ns, 1_000_000_000) for ns in (a.st_atime_ns, a.st_mtime_ns, a.st_ctime_ns))
    return ATTR.pack(a.st_ino, a.st_size, a.st_blocks, atime[0], mtime[0], ctime[0], atime[1], mtime[1], ctime[1],
                     a.st_mode, a.st_nlink, a.st_uid, a.st_gid, a.st_rdev, a.st_blksize, 0)


def entry(a: EntryAttributes) -> bytes:
    entry_s, entry_ns = _split(a.entry_timeout)
    attr_s, attr_ns = _split(a.attr_timeout)
    return ENTRY.pack(a.st_ino, a.generation, entry_s, attr_s, entry_ns, attr_ns) + attr(a)


def attr_out(a: EntryAttributes) -> bytes:
    attr_s, attr_ns = _split(a.attr_timeout)
    return ATTR_OUT.pack(attr_s, attr_ns, 0) + attr(a)


def open_out(info: FileInfo) -> bytes:
    flags = (FOPEN_DIRECT_IO if info.direct_io else 0) | (FOPEN_KEEP_CACHE if info.keep_cache else 0)
    return OPEN_OUT.pack(info.fh, flags, 0)


def statfs_out(s: StatvfsData) -> bytes:
    return STATFS_OUT.pack(s.f_blocks, s.f_bfree, s.f_bavail, s.f_files, s.f_ffree, s.f_bsize, s.f_namemax,
                           s.f_frsize, 0)


def setattr_in(body: bytes | memoryview) -> tuple[EntryAttributes, SetattrFields, int | None]:
    """The new values, which of them to set, and the open file's handle if the caller gave one."""
    (valid, _pad, fh, size, _owner, atime, mtime, ctime, atime_ns, mtime_ns, ctime_ns, mode, _u4, uid, gid,
     _u5) = SETATTR_IN.unpack_from(body)
    a = EntryAttributes(st_mode=mode, st_uid=uid, st_gid=gid, st_size=size,
                        st_atime_ns=atime * 1_000_000_000 + atime_ns, st_mtime_ns=mtime * 1_000_000_000 + mtime_ns,
                        st_ctime_ns=ctime * 1_000_000_000 + ctime_ns)
    fields = SetattrFields(update_mode=bool(valid & FATTR_MODE), update_uid=bool(valid & FATTR_UID),
                           update_gid=bool(valid & FATTR_GID), update_size=bool(valid & FATTR_SIZE),
                           update_atime=bool(valid & (FATTR_ATIME | FATTR_ATIME_NOW)),
                           update_mtime=bool(valid & (FATTR_MTIME | FATTR_MTIME_NOW)),
                           update_ctime=bool(valid & FATTR_CTIME))
    return a, fields, fh if valid & 64 else None


@dataclass(frozen=True)
class Negotiated:
    """What INIT settled: the reply to send, and whether direct reads may still be mapped."""

    reply: bytes
    direct_io_mmap: bool


def negotiate(body: bytes | memoryview) -> Negotiated:
    """Answer the kernel's INIT with what it offers of ``WANTED`` (FUSE_INIT_EXT: flags2 too)."""
    major, minor, max_readahead, flags = INIT_IN.unpack_from(body)
    if major != KERNEL_MAJOR:
        raise FUSEError(errno.EPROTO)
    offered = flags
    if flags & INIT_EXT and len(body) >= INIT_IN.size + 4:
        offered |= struct.unpack_from("<I", body, INIT_IN.size)[0] << 32
    chosen = offered & WANTED
    reply = INIT_OUT.pack(KERNEL_MAJOR, min(minor, MINOR), max_readahead, chosen & 0xFFFFFFFF,
                          16, 12, MAX_WRITE, 1, MAX_PAGES_PER_REQUEST, 0, chosen >> 32, 0)
    return Negotiated(reply, bool(chosen & DIRECT_IO_ALLOW_MMAP))


def name_of(body: bytes | memoryview, offset: int = 0) -> tuple[bytes, int]:
    """A NUL-terminated name in ``body`` at ``offset``, and the offset after it."""
    data = bytes(body)
    end = data.index(b"\0", offset)
    return data[offset:end], end + 1
