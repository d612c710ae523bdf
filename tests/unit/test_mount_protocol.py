"""The FUSE wire format the mount writes (app/mount/protocol.py) against linux/fuse.h's layouts.

The kernel refuses a reply whose length differs from what it expects (EINVAL, and the caller
then waits forever), so each struct's size is checked against the header's, and the INIT reply
against what the kernel offers: only flags it offered, FUSE_INIT_EXT's second word included.
"""

from __future__ import annotations

import errno
import stat
import struct

import pytest

from app.mount import protocol as p


def test_struct_sizes_are_the_kernels() -> None:
    # linux/fuse.h: fuse_in_header 40, fuse_out_header 16, fuse_attr 88, fuse_entry_out 128,
    # fuse_attr_out 104, fuse_open_out 16, fuse_init_out 64, fuse_kstatfs 80, fuse_read_in 40,
    # fuse_setattr_in 88, fuse_release_in 24, fuse_dirent 24 (+ name).
    assert p.IN_HEADER.size == 40 and p.OUT_HEADER.size == 16
    assert p.ATTR.size == 88
    assert len(p.entry(p.EntryAttributes())) == 128
    assert len(p.attr_out(p.EntryAttributes())) == 104
    assert len(p.open_out(p.FileInfo())) == 16
    assert p.INIT_OUT.size == 64
    assert len(p.statfs_out(p.StatvfsData())) == 80
    assert p.READ_IN.size == p.WRITE_IN.size == 40
    assert p.SETATTR_IN.size == 88 and p.RELEASE_IN.size == 24 and p.DIRENT.size == 24


def _init_in(flags: int, flags2: int = 0, minor: int = 44) -> bytes:
    return struct.pack("<IIIII44x", 7, minor, 128 * 1024, flags, flags2)


def test_init_takes_only_what_the_kernel_offers() -> None:
    offered = p.ASYNC_READ | p.INIT_EXT | p.MAX_PAGES | (1 << 1)  # POSIX_LOCKS offered, not wanted
    agreed = p.negotiate(_init_in(offered, flags2=(p.DIRECT_IO_ALLOW_MMAP >> 32) | (1 << 5)))
    (major, minor, readahead, flags, _bg, _cong, max_write, gran, pages, _align, flags2,
     _depth) = p.INIT_OUT.unpack(agreed.reply)
    assert (major, minor, readahead) == (7, p.MINOR, 128 * 1024)
    assert flags == p.ASYNC_READ | p.INIT_EXT | p.MAX_PAGES  # locks stay the kernel's
    assert flags2 == p.DIRECT_IO_ALLOW_MMAP >> 32  # not passthrough (1 << 5), which was offered
    assert (max_write, gran, pages) == (1024 * 1024, 1, 256)
    assert agreed.direct_io_mmap


def test_an_older_kernel_gets_no_direct_reads() -> None:
    agreed = p.negotiate(_init_in(p.ASYNC_READ | p.MAX_PAGES, minor=31))  # no FUSE_INIT_EXT
    assert not agreed.direct_io_mmap
    assert p.INIT_OUT.unpack(agreed.reply)[1] == 31
    with pytest.raises(p.FUSEError) as refused:
        p.negotiate(struct.pack("<IIII", 8, 0, 0, 0))
    assert refused.value.errno == errno.EPROTO


def test_directory_entries_are_padded_and_stop_at_the_buffer() -> None:
    token = p.DirectoryReply(limit=2 * 160)
    attrs = p.EntryAttributes(st_ino=5, st_mode=stat.S_IFREG | 0o644, st_size=3)
    assert p.readdir_reply(token, b"00001", attrs, 1)
    assert p.readdir_reply(token, b"00002", attrs, 2)
    assert not p.readdir_reply(token, b"00003", attrs, 3)  # the kernel asks again from 2
    assert [len(part) for part in token.parts] == [160, 160]  # 128 + 24 + 5, padded to 8
    ino, off, namelen, kind = p.DIRENT.unpack_from(token.parts[1], 128)
    assert (ino, off, namelen, kind) == (5, 2, 5, stat.S_IFREG >> 12)
    plain = p.DirectoryReply(limit=4096, plus=False)
    assert p.readdir_reply(plain, b"d", p.EntryAttributes(st_ino=9, st_mode=stat.S_IFDIR), 1)
    assert len(plain.parts[0]) == 32


def test_setattr_reads_what_the_caller_set() -> None:
    body = p.SETATTR_IN.pack(p.FATTR_SIZE | p.FATTR_MTIME | 64, 0, 7, 4096, 0, 0, 1_700_000_000, 0, 0, 5, 0,
                             0o644, 0, 0, 0, 0)
    new, fields, fh = p.setattr_in(body)
    assert fields.update_size and fields.update_mtime and not fields.update_mode
    assert new.st_size == 4096 and new.st_mtime_ns == 1_700_000_000_000_000_005 and fh == 7


def test_timeouts_split_into_seconds_and_nanoseconds() -> None:
    entry = p.entry(p.EntryAttributes(st_ino=3, entry_timeout=1.5, attr_timeout=0.25))
    nodeid, _gen, entry_s, attr_s, entry_ns, attr_ns = p.ENTRY.unpack_from(entry)
    assert (nodeid, entry_s, entry_ns, attr_s, attr_ns) == (3, 1, 500_000_000, 0, 250_000_000)
