"""Clean cached blocks on the data directory, and the locks that make their fetch single-flight.

Layout under ``<data_dir>/cache``: ``blocks/ab/<sha256>`` for complete blocks, ``tmp/`` for
blocks being filled, ``retired/<sha256>`` for deleted blocks readers may still be walking to,
``locks`` for POSIX byte-range locks. A block's file name is a hash of
(bucket, key, ETag, block index): no request input becomes a path, a changed object never reuses
an old block, and finding a block needs no catalog lookup. A block appears under ``blocks/``
only by ``rename`` of a complete file, so a reader never sees a partial block.

A block is never unlinked from ``blocks/`` while a reader may still want it: ``delete`` renames
it into ``retired/`` (same filesystem, same name), and ``open_block`` falls back to that name when
the block is gone from ``blocks/``. A GET that began serving a version whose entry is then
replaced, dropped or evicted finds every block it reaches later, in any process of the node, for
``RETIRED_GRACE_SECONDS``; ``sweep_retired`` unlinks older retired files (their ctime is the
rename's). Opening every block up front is not an option (a large object has more blocks than a
process may have descriptors).

The lock of a block is one byte of ``locks`` at an offset derived from its name (``lockf``), so
any number of blocks share one file; the kernel drops a dead process's locks, so a ``kill -9``
mid-fetch never wedges the others.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from app.adapters.local.blockformat import DATA_OFFSET, BlockHeader, crc32, parse
from app.adapters.local.blockreader import BlockReader

LOCK_SPACE = 1 << 40
# A retired block stays readable this long after its delete (its ctime: the rename's). A GET that
# reaches a block more than this after its version was replaced, dropped or evicted is still cut
# (ServiceUnavailable mid-body; the connection drops, the client retries).
RETIRED_GRACE_SECONDS = 600.0


def file_crc(fd: int, length: int, chunk: int = 1 << 20) -> int:
    """CRC-32 of ``length`` block bytes of an open block file (after its header)."""
    value, pos = 0, 0
    while pos < length:
        data = os.pread(fd, min(chunk, length - pos), DATA_OFFSET + pos)
        if not data:
            break
        value = crc32(data, value)
        pos += len(data)
    return value


@dataclass
class FillFile:
    """A block being written into ``tmp/`` after room for its header; published by rename once
    complete. ``written`` counts the block's bytes (not the header)."""

    name: str
    path: Path
    fd: int
    index: int = 0
    written: int = 0
    crc: int = 0
    checksummed: bool = True  # False: a relay's conduit, never published, so no CRC pass over its bytes

    def open_reader(self) -> int:
        """A read-only descriptor of this file for readers that follow the fill (``BlockReader``)."""
        return BlockReader.open(str(self.path))

    def write(self, data: bytes | memoryview) -> None:
        view = memoryview(data)
        if self.checksummed:
            self.crc = crc32(view, self.crc)
        while view:
            n = os.write(self.fd, view)
            view = view[n:]
            self.written += n

    def seal(self) -> None:
        """Write the header; a file that is not exactly header + bytes received is never
        published. The CRC in the header is of the bytes as they arrived: reading them back here
        would read the page-cache pages just written (proving nothing of the disk) at the cost of
        a copy and a checksum pass per block; what lies on disk is checked by the scrub."""
        if not self.checksummed:
            raise OSError(f"block {self.name} was relayed without a checksum: it is never published")
        os.pwrite(self.fd, BlockHeader(self.name, self.index, self.written, self.crc).pack(), 0)
        if os.fstat(self.fd).st_size != DATA_OFFSET + self.written:
            raise OSError(f"block {self.name} is not the length written")

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


_HEX = frozenset("0123456789abcdef")


class CacheStore:
    """The only code that touches cached files; ``reader`` reads their bytes for the read cache."""

    reader = BlockReader()

    def __init__(self, data_dir: Path) -> None:
        self.root = data_dir.resolve() / "cache"
        self.blocks = self.root / "blocks"
        self._blocks = str(self.blocks)
        self.tmp = self.root / "tmp"
        self.retired = self.root / "retired"
        self._retired = str(self.retired)
        self.blocks.mkdir(parents=True, exist_ok=True)
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.retired.mkdir(parents=True, exist_ok=True)
        # One descriptor for the process's lifetime: closing any descriptor of a file drops all
        # of the process's POSIX locks on it.
        self._lock_fd = os.open(self.root / "locks", os.O_RDWR | os.O_CREAT, 0o600)

    def path(self, name: str) -> Path:
        return Path(self.file_of(name))

    def file_of(self, name: str) -> str:
        """The block's file name as a string: what ``os.open`` wants (a ``Path`` costs its
        formatting on every call; measured as the largest Python item of a 4 KiB hit)."""
        if len(name) != 64 or not _HEX.issuperset(name):
            raise ValueError("not a block name")
        return f"{self._blocks}/{name[:2]}/{name}"

    def retired_of(self, name: str) -> str:
        """Where ``delete`` moved the block (one flat directory: its files are transient)."""
        if len(name) != 64 or not _HEX.issuperset(name):
            raise ValueError("not a block name")
        return f"{self._retired}/{name}"

    def open_block(self, name: str) -> int:
        """A read-only descriptor of a complete block: the published file, or, when it was deleted
        since the caller decided to serve it, its retired copy (same bytes: a name is one version's
        block). Raises FileNotFoundError when neither is there."""
        try:
            return os.open(self.file_of(name), os.O_RDONLY)
        except FileNotFoundError:
            return os.open(self.retired_of(name), os.O_RDONLY)

    def open_file(self, path: str) -> int:
        """``open_block`` of a block's file name (what ``file_of`` gave): the opener of the
        segments a server sends itself. Any other path is opened as it is."""
        name = path[-64:]
        if len(path) > 64 and path == f"{self._blocks}/{name[:2]}/{name}":
            return self.open_block(name)
        return os.open(path, os.O_RDONLY)

    def servable(self, name: str, size: int, since: float | None = None) -> bool:
        """Whether ``open_block`` would find the block: published (header checked), or retired
        with the right size (and, with ``since``, retired at or after that time: a block retired
        before a read began belonged to an entry that was gone by then, whose bytes no longer
        count, and is not that read's to serve). For a reader already serving its entry: a fill
        decides by ``has``."""
        if self.has(name, size):
            return True
        try:
            st = os.stat(self.retired_of(name))
        except FileNotFoundError:
            return False
        return st.st_size == DATA_OFFSET + size and (since is None or st.st_ctime >= since)

    def read_small(self, name: str, limit: int) -> bytes | None:
        """The whole data of a complete block of at most ``limit`` bytes, read with its header in
        one ``pread`` (a small hit's only I/O); None when it is not cached, or larger."""
        found = self._read_checked(name, limit)
        return None if found is None else found[1]

    def size_of(self, name: str) -> int | None:
        """Length of a complete block whose header is right, or None when it is not cached."""
        found = self._read_checked(name, -1)
        return None if found is None else found[0]

    def _read_checked(self, name: str, data_limit: int) -> tuple[int, bytes | None] | None:
        """(data length, the data when at most ``data_limit`` bytes) of a complete block whose
        header is right; None when it is not cached. A block with a wrong header (another format
        version, a file of an older data directory, damage) is dropped here, so the caller
        refetches it."""
        try:
            fd = os.open(self.file_of(name), os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            size = os.fstat(fd).st_size
            whole = size - DATA_OFFSET <= data_limit
            raw = os.pread(fd, size if whole else DATA_OFFSET, 0)
        finally:
            os.close(fd)
        header = parse(raw[:DATA_OFFSET])
        if header is None or header.name != name or header.length != size - DATA_OFFSET or (whole and len(raw) != size):
            self.drop_bad(name)
            return None
        return header.length, (raw[DATA_OFFSET:] if whole else None)

    def has(self, name: str, size: int) -> bool:
        return self.size_of(name) == size

    def verify(self, name: str) -> bool | None:
        """Whether a published block's bytes match its header's checksum (None: not there).
        A block that does not match is dropped."""
        try:
            fd = os.open(self.path(name), os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            header = parse(os.pread(fd, DATA_OFFSET, 0))
            good = (header is not None and header.name == name
                    and os.fstat(fd).st_size == DATA_OFFSET + header.length
                    and file_crc(fd, header.length) == header.crc32)
        finally:
            os.close(fd)
        if not good:
            self.drop_bad(name)
        return good

    def drop_bad(self, name: str) -> None:
        """Unlink a block that must not be served (its accounting is the evictor's to correct)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path(name))

    # ---- filling -----------------------------------------------------------------------------
    def open_fill(self, name: str, index: int = 0, checksummed: bool = True) -> FillFile:
        """A fill file with room for the header; its bytes start at ``DATA_OFFSET``. Not
        ``checksummed``: a conduit its readers follow, discarded after, never published."""
        path = self.tmp / f"{name}.{secrets.token_hex(4)}"
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        os.pwrite(fd, bytes(DATA_OFFSET), 0)
        os.lseek(fd, DATA_OFFSET, os.SEEK_SET)
        return FillFile(name, path, fd, index, checksummed=checksummed)

    def publish(self, fill: FillFile) -> None:
        """Make a complete block visible (atomic rename); readers holding the tmp file keep it."""
        fill.seal()
        fill.close()
        final = self.path(fill.name)
        final.parent.mkdir(exist_ok=True)
        os.rename(fill.path, final)

    def discard(self, fill: FillFile) -> None:
        fill.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(fill.path)

    def delete(self, name: str) -> int:
        """Drop a block; returns the block bytes freed (0 if it was not there), as accounted.

        The file is retired, not unlinked: renamed into ``retired/`` (atomic, on the same
        filesystem), where a reader that decided to serve it before finds it (``open_block``)
        until ``sweep_retired``. Its bytes count as freed at once; they stay on the disk for
        the grace (``sweep_retired`` frees them early when the disk is short)."""
        path = self.file_of(name)
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            return 0
        for attempt in range(2):
            try:
                os.rename(path, self.retired_of(name))
                break
            except FileNotFoundError:
                if attempt or not os.path.exists(path):
                    return 0  # deleted by another process meanwhile
                self.retired.mkdir(parents=True, exist_ok=True)  # a wipe elsewhere just removed it
        return max(0, size - DATA_OFFSET)

    def sweep_retired(self, grace: float = RETIRED_GRACE_SECONDS, need: int = 0) -> tuple[int, int]:
        """Unlink retired blocks older than ``grace`` seconds (by ctime, which the rename set);
        returns (files, bytes). With ``need``, the oldest are unlinked as well, until ``need``
        bytes are freed (a disk short of space: those are cut for readers that still reach them).
        The caller holds the data dir's retired lock (``services/cache/orphans.RETIRED_LOCK``)."""
        cutoff = time.time() - grace
        files = freed = 0
        younger: list[tuple[float, str, int]] = []
        try:
            it = os.scandir(self.retired)
        except FileNotFoundError:  # a wipe in another process, between its rmtree and mkdir
            return 0, 0
        with it:
            for item in it:
                try:
                    st = item.stat(follow_symlinks=False)
                    if st.st_ctime >= cutoff:
                        if need:
                            younger.append((st.st_ctime, item.path, st.st_size))
                        continue
                    os.unlink(item.path)
                except FileNotFoundError:
                    continue
                files += 1
                freed += st.st_size
        for _, path, size in sorted(younger):
            if freed >= need:
                break
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
                files += 1
                freed += size
        return files, freed

    def clear_stale_tmp(self, older_than: float) -> int:
        """Partial blocks left by a crash are garbage. Only ``tmp/`` is scanned (it holds only
        fills in progress), never the blocks: start-up does not depend on the cache's size.
        Files younger than ``older_than`` seconds may belong to a live worker and stay."""
        removed = 0
        cutoff = time.time() - older_than
        with os.scandir(self.tmp) as it:
            for item in it:
                with contextlib.suppress(FileNotFoundError):
                    if item.stat().st_mtime < cutoff:
                        os.unlink(item.path)
                        removed += 1
        return removed

    def block_files(self, shard: str) -> Iterator[tuple[str, float, int]]:
        """(name, ctime, file size incl. header) of the published blocks in one shard ("00" .. "ff").
        The ctime is when the block was renamed into place (its publication)."""
        if len(shard) != 2 or not all(c in "0123456789abcdef" for c in shard):
            raise ValueError("not a shard name")
        try:
            it = os.scandir(self.blocks / shard)
        except FileNotFoundError:
            return
        with it:
            for item in it:
                if len(item.name) != 64:
                    continue
                try:
                    st = item.stat(follow_symlinks=False)
                except FileNotFoundError:
                    continue
                yield item.name, st.st_ctime, st.st_size

    def wipe(self) -> None:
        """Drop every cached block (clean data only lives here; the remote has it), retired ones too."""
        shutil.rmtree(self.blocks, ignore_errors=True)
        shutil.rmtree(self.retired, ignore_errors=True)
        self.blocks.mkdir(parents=True, exist_ok=True)
        self.retired.mkdir(parents=True, exist_ok=True)

    # ---- cross-process locks -----------------------------------------------------------------
    @staticmethod
    def _offset(name: str) -> int:
        return int(name[:16], 16) % LOCK_SPACE

    def try_lock(self, name: str) -> bool:
        try:
            fcntl.lockf(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, self._offset(name))
        except (BlockingIOError, PermissionError):
            return False
        return True

    def unlock(self, name: str) -> None:
        fcntl.lockf(self._lock_fd, fcntl.LOCK_UN, 1, self._offset(name))
