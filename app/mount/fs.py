"""``ferry mount``'s filesystem: FUSE operations (``session.py`` calls them) over the gateway's S3 view.

What each call means (docs/posix.md has the table):
- a file is an object; a directory is a key prefix (``mkdir`` writes a folder marker);
- a file being written lives in a local staging file and becomes the object, whole, when it is
  fsynced or closed (one PUT, acknowledged once durable on the gateway): S3 readers never see a
  part of it;
- ``rename`` of a file is RenameObject: one journal transaction on the gateway, so every reader
  sees the old name or the new one; a directory's rename answers EXDEV (``mv`` then copies);
- attributes and listings are cached for ``cache_seconds`` (a change made through S3 shows within
  it); what this mount changes it sees at once.
"""

from __future__ import annotations

import errno
import itertools
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import trio

from app.mount import protocol as fuse
from app.mount.attributes import Attributes, statfs
from app.mount.errors import answer, fail, guard
from app.mount.handles import CHUNK, ReadHandle, WriteHandle
from app.mount.inodes import ROOT, Inodes, Where, child, is_dir, parent_of
from app.mount.metadata import Metadata
from app.mount.objects import PARALLEL_PARTS, FileStat, GatewayObjects
from app.mount.writers import Writers

T = TypeVar("T")
RENAME_NOREPLACE, RENAME_EXCHANGE = 1, 2
DIRECT_READS_FROM = CHUNK  # bytes: smaller files are read through the kernel's page cache

OPERATIONS = ("lookup", "getattr", "setattr", "opendir", "readdir", "releasedir", "mkdir", "rmdir", "open",
              "create", "read", "write", "flush", "fsync", "release", "unlink", "rename", "statfs")


class FerryFS:
    direct_reads = False  # files opened for reading answer with direct I/O (set at INIT: session.py)

    def __init__(self, objects: GatewayObjects, staging: Path, *, bucket: str | None = None,
                 read_only: bool = False, cache_seconds: float = 1.0) -> None:
        self.objects = objects
        self.staging = staging
        self.read_only = read_only
        self.cache_seconds = cache_seconds
        self.inodes = Inodes()
        self.limiter = trio.CapacityLimiter(32)
        self.part_pool = ThreadPoolExecutor(PARALLEL_PARTS, thread_name_prefix="ferry-mount-part")
        self.spawn: Callable[..., None] = lambda fn, *args: None  # set by run.py: the mount's nursery
        self.meta = Metadata(objects, self._call, cache_seconds, bucket)
        self.writers = Writers(objects, staging, self.part_pool, self._call, self.meta)
        self._open: dict[int, ReadHandle | WriteHandle] = {}
        self._dirs: dict[int, list[tuple[str, Where]]] = {}
        self._handles = itertools.count(1)
        self._versions: dict[int, str | None] = {}  # inode -> the version its page cache holds
        self.attributes = Attributes(cache_seconds, read_only)

    # ---- the gateway, in threads ---------------------------------------------------------------
    async def _call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        try:
            return await trio.to_thread.run_sync(lambda: fn(*args, **kwargs), limiter=self.limiter)
        except Exception as exc:
            raise answer(exc, getattr(fn, "__name__", repr(fn))) from exc

    # ---- attributes ----------------------------------------------------------------------------
    def _attrs(self, where: Where, found: FileStat | None, size: int | None = None) -> fuse.EntryAttributes:
        return self.attributes.of(self.inodes.number(where), found, size)

    async def _resolve(self, where: Where) -> fuse.EntryAttributes:
        """Attributes of a file ``where`` names, or of the directory of the same name."""
        if (size := self.writers.size(where)) is not None:
            return self._attrs(where, self.meta.known(where), size=size)
        bucket, key = where
        cached = self.meta.fresh_listing(parent_of(where)) or await self.meta.relisted(parent_of(where))
        if cached is not None:
            name = key.rsplit("/", 1)[-1]
            if name in cached.dirs:
                return self._attrs(child(parent_of(where), name, directory=True), None)
            if name in cached.files:
                return self._attrs(where, cached.files[name])
            raise fail(errno.ENOENT)
        try:
            is_prefix = await self.meta.shared(self.objects.has_under, bucket, f"{key}/")
        except fuse.FUSEError as exc:
            # A listing is the remote's: while it is out, a file the gateway knows (buffered on any
            # node) still resolves by its HEAD.
            if exc.errno != errno.EAGAIN or await self.meta.file_stat(where) is None:
                raise
            is_prefix = False
        if is_prefix:
            return self._attrs((bucket, f"{key}/"), None)
        found = await self.meta.file_stat(where)
        if found is None:
            raise fail(errno.ENOENT)
        return self._attrs(where, found)

    def _where(self, inode: int) -> Where:
        where = self.inodes.where(inode)
        if where is None:
            raise fail(errno.ENOENT)
        return where

    @staticmethod
    def _name(name: bytes) -> str:
        text = os.fsdecode(name)
        if text in ("", ".", "..") or "/" in text:
            raise fail(errno.ENOENT)
        return text

    async def lookup(self, parent_inode: int, name: bytes, ctx: Any = None) -> fuse.EntryAttributes:
        parent = self._where(parent_inode)
        text = self._name(name)
        if parent == ROOT:
            if text not in await self.meta.buckets():
                self.meta.forget(ROOT)  # a bucket made a moment ago: ask again
                if text not in await self.meta.buckets():
                    raise fail(errno.ENOENT)
            return self._attrs((text, ""), None)
        return await self._resolve(child(parent, text, directory=False))

    async def getattr(self, inode: int, ctx: Any = None) -> fuse.EntryAttributes:
        where = self._where(inode)
        if is_dir(where):
            return self._attrs(where, None)
        if (size := self.writers.size(where)) is not None:
            return self._attrs(where, self.meta.known(where), size=size)
        found = await self.meta.file_stat(where)
        if found is None:
            raise fail(errno.ENOENT)
        return self._attrs(where, found)

    async def setattr(self, inode: int, attr: Any, fields: Any, fh: int | None, ctx: Any) -> fuse.EntryAttributes:
        """Size: a file being written is truncated; a closed one only to 0 (rewritten empty).
        Mode, owner and times are accepted and not kept (objects have none): ``cp -p``,
        ``rsync -a`` and ``tar`` work."""
        where = self._where(inode)
        if fields.update_size:
            if self.read_only:
                raise fail(errno.EROFS)
            writer = self.writers.get(where)
            if writer is not None:
                async with writer.lock:
                    writer.truncate(attr.st_size)
            elif attr.st_size == 0 and not is_dir(where):
                handle = WriteHandle.create(self.staging, *where)
                try:
                    await self.writers.publish(where, handle)
                finally:
                    handle.close()
            else:
                raise fail(errno.EOPNOTSUPP)
        return await self.getattr(inode, ctx)

    # ---- directories ---------------------------------------------------------------------------
    async def opendir(self, inode: int, ctx: Any) -> int:
        where = self._where(inode)
        if where == ROOT:
            entries = [(name, (name, "")) for name in await self.meta.buckets()]
        else:
            listing = await self.meta.listing(where)
            dirs = set(listing.dirs)
            entries = [(name, child(where, name, directory=True)) for name in listing.dirs]
            entries += [(name, child(where, name, directory=False)) for name in listing.files if name not in dirs]
            entries += [(name, child(where, name, directory=False)) for name in self.writers.names_in(where)
                        if name not in listing.files and name not in dirs]
        handle = next(self._handles)
        self._dirs[handle] = sorted(e for e in entries if e[0] and "/" not in e[0])
        return handle

    async def readdir(self, fh: int, start_id: int, token: Any) -> None:
        entries = self._dirs.get(fh, [])
        for index in range(start_id, len(entries)):
            name, where = entries[index]
            if is_dir(where):
                attrs = self._attrs(where, None)
            else:
                attrs = self._attrs(where, self.meta.known(where), size=self.writers.size(where))
            if not fuse.readdir_reply(token, os.fsencode(name), attrs, index + 1):
                return

    async def releasedir(self, fh: int) -> None:
        self._dirs.pop(fh, None)

    async def mkdir(self, parent_inode: int, name: bytes, mode: int, ctx: Any) -> fuse.EntryAttributes:
        parent = self._where(parent_inode)
        if self.read_only:
            raise fail(errno.EROFS)
        if parent == ROOT:
            raise fail(errno.EPERM)  # buckets are made through S3 or the admin API
        where = child(parent, self._name(name), directory=True)
        await self._call(self.objects.make_dir, *where)
        self.meta.changed(where)
        return self._attrs(where, None)

    async def rmdir(self, parent_inode: int, name: bytes, ctx: Any) -> None:
        parent = self._where(parent_inode)
        if self.read_only:
            raise fail(errno.EROFS)
        if parent == ROOT:
            raise fail(errno.EPERM)
        bucket, prefix = child(parent, self._name(name), directory=True)
        if await self._call(self.objects.has_under, bucket, prefix, prefix):
            raise fail(errno.ENOTEMPTY)
        await self._call(self.objects.delete, bucket, prefix)
        self.meta.changed((bucket, prefix))
        self.inodes.drop((bucket, prefix))

    # ---- files ---------------------------------------------------------------------------------
    async def open(self, inode: int, flags: int, ctx: Any) -> fuse.FileInfo:
        where = self._where(inode)
        if is_dir(where):
            raise fail(errno.EISDIR)
        handle: ReadHandle | WriteHandle
        if flags & os.O_ACCMODE in (os.O_WRONLY, os.O_RDWR):
            handle = await self._open_writer(where, flags)
            self._versions[inode] = None
        elif self.writers.get(where) is not None:
            handle = self.writers.share(where)
        else:
            found = await self.meta.file_stat(where)
            if found is None:
                raise fail(errno.ENOENT)
            handle = ReadHandle(self.objects, where[0], where[1], found, self.spawn, self.limiter)
        fh = next(self._handles)
        self._open[fh] = handle
        # The kernel's page cache of the file is kept across opens only while it holds the same
        # version: an overwrite of the same size within the same second would otherwise be stale.
        version = handle.stat.etag if isinstance(handle, ReadHandle) else None
        keep = version is not None and self._versions.get(inode) == version
        self._versions[inode] = version
        # Direct I/O for a large file: a read is answered straight into the reader's buffer (one
        # copy, no page-cache pages to fill and free); mmap still works, through the page cache
        # (FUSE_DIRECT_IO_ALLOW_MMAP). A small file keeps the page cache: its cost is the request,
        # not the copy, and a re-read (grep -r twice) is then answered by the kernel alone.
        direct = self.direct_reads and isinstance(handle, ReadHandle) and handle.stat.size >= DIRECT_READS_FROM
        return fuse.FileInfo(fh=fh, keep_cache=keep, direct_io=direct)

    async def _open_writer(self, where: Where, flags: int) -> WriteHandle:
        if self.read_only:
            raise fail(errno.EROFS)
        return await self.writers.open(where, flags)

    async def create(self, parent_inode: int, name: bytes, mode: int, flags: int,
                     ctx: Any) -> tuple[fuse.FileInfo, fuse.EntryAttributes]:
        parent = self._where(parent_inode)
        if self.read_only:
            raise fail(errno.EROFS)
        if parent == ROOT:
            raise fail(errno.EPERM)
        where = child(parent, self._name(name), directory=False)
        handle = await self._open_writer(where, flags | os.O_TRUNC)
        self._versions.pop(self.inodes.number(where), None)
        fh = next(self._handles)
        self._open[fh] = handle
        self.meta.forget(parent)
        return fuse.FileInfo(fh=fh), self._attrs(where, None, size=handle.size)

    def _handle(self, fh: int) -> ReadHandle | WriteHandle:
        handle = self._open.get(fh)
        if handle is None:
            raise fail(errno.EBADF)
        return handle

    async def read(self, fh: int, off: int, size: int) -> bytes | memoryview:
        handle = self._handle(fh)
        if isinstance(handle, WriteHandle):
            return handle.read(off, size)
        try:
            return await handle.read(off, size)
        except Exception as exc:
            failed = answer(exc, "read")
            if failed.errno != errno.ESTALE or handle.served:
                raise failed from exc
        # Replaced before its first byte was read (the open saw a listing up to cache_seconds
        # old): open it again at the new version, as an open a moment later would have. Once a
        # byte is served, ESTALE stands: never a mix of two versions.
        where = (handle.bucket, handle.key)
        self.meta.changed(where)
        found = await self.meta.file_stat(where)
        if found is None:
            raise fail(errno.ENOENT)
        fresh = ReadHandle(self.objects, *where, found, self.spawn, self.limiter)
        self._open[fh] = fresh
        return await fresh.read(off, size)

    async def write(self, fh: int, off: int, buf: bytes) -> int:
        handle = self._handle(fh)
        if not isinstance(handle, WriteHandle):
            raise fail(errno.EBADF)
        async with handle.lock:
            return handle.write(off, buf)

    async def flush(self, fh: int) -> None:
        handle = self._handle(fh)
        if isinstance(handle, WriteHandle):
            await self.writers.publish((handle.bucket, handle.key), handle)

    async def fsync(self, fh: int, datasync: bool) -> None:
        await self.flush(fh)

    async def release(self, fh: int) -> None:
        handle = self._open.pop(fh, None)
        if isinstance(handle, WriteHandle):
            await self.writers.release(handle)

    async def unlink(self, parent_inode: int, name: bytes, ctx: Any) -> None:
        parent = self._where(parent_inode)
        if self.read_only:
            raise fail(errno.EROFS)
        where = child(parent, self._name(name), directory=False)
        self.writers.unlinked(where)
        await self._call(self.objects.delete, *where)
        self.meta.changed(where)
        self.inodes.drop(where)

    async def rename(self, parent_inode_old: int, name_old: bytes, parent_inode_new: int, name_new: bytes,
                     flags: int, ctx: Any) -> None:
        if self.read_only:
            raise fail(errno.EROFS)
        if flags & RENAME_EXCHANGE:
            raise fail(errno.EINVAL)
        old = child(self._where(parent_inode_old), self._name(name_old), directory=False)
        new = child(self._where(parent_inode_new), self._name(name_new), directory=False)
        if not old[0] or not new[0] or old[1] == "" or new[1] == "":
            raise fail(errno.EPERM)
        if is_dir(await self._resolve_where(old)):
            raise fail(errno.EXDEV)  # a directory is many objects: mv copies them one by one
        if old[0] != new[0]:
            raise fail(errno.EXDEV)
        await self.writers.publish_before_rename(old)
        await self._call(self.objects.rename, old[0], old[1], new[1], no_replace=bool(flags & RENAME_NOREPLACE))
        self.writers.renamed(old, new)
        self.meta.changed(old)
        self.meta.changed(new)
        self.inodes.move(old, new)

    async def _resolve_where(self, where: Where) -> Where:
        attrs = await self._resolve(where)
        found = self.inodes.where(attrs.st_ino)
        return found if found is not None else where

    async def link(self, inode: int, new_parent_inode: int, new_name: bytes, ctx: Any) -> fuse.EntryAttributes:
        raise fail(errno.EPERM)  # an object has one name

    async def symlink(self, parent_inode: int, name: bytes, target: bytes, ctx: Any) -> fuse.EntryAttributes:
        raise fail(errno.EPERM)  # S3 has no links

    async def statfs(self, ctx: Any) -> fuse.StatvfsData:
        return statfs()


for _name in OPERATIONS:
    setattr(FerryFS, _name, guard(getattr(FerryFS, _name)))
