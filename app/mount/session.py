"""A FUSE session: the mount made by ``fusermount3``, and the loop that reads the kernel's
requests from /dev/fuse and answers each with the filesystem's operation.

``fusermount3`` mounts (as root or as a user, the same way libfuse does: it hands back the
/dev/fuse descriptor over a socket named by ``_FUSE_COMMFD``) and unmounts. Every request but
INIT runs as a task of its own, so a slow listing never holds a read; replies are written whole
with one ``writev``. A reply the kernel no longer waits for (its caller was interrupted) is
dropped; an unmount (``fusermount3 -u``, or ours on a signal) ends the loop.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import socket
import subprocess
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import trio

from app.mount import protocol as p

log = logging.getLogger("ferry.mount")

Payload = bytes | memoryview | Sequence[bytes | memoryview] | None
Handler = Callable[[int, p.RequestContext, memoryview], Awaitable[Payload]]


class Operations(Protocol):
    """What a filesystem answers (``FerryFS``); ``direct_reads`` is set once INIT settles it."""

    direct_reads: bool

    async def lookup(self, parent_inode: int, name: bytes, ctx: Any = None) -> p.EntryAttributes: ...
    async def getattr(self, inode: int, ctx: Any = None) -> p.EntryAttributes: ...
    async def setattr(self, inode: int, attr: Any, fields: Any, fh: int | None, ctx: Any) -> p.EntryAttributes: ...
    async def opendir(self, inode: int, ctx: Any) -> int: ...
    async def readdir(self, fh: int, start_id: int, token: Any) -> None: ...
    async def releasedir(self, fh: int) -> None: ...
    async def mkdir(self, parent_inode: int, name: bytes, mode: int, ctx: Any) -> p.EntryAttributes: ...
    async def rmdir(self, parent_inode: int, name: bytes, ctx: Any) -> None: ...
    async def open(self, inode: int, flags: int, ctx: Any) -> p.FileInfo: ...
    async def create(self, parent_inode: int, name: bytes, mode: int, flags: int,
                     ctx: Any) -> tuple[p.FileInfo, p.EntryAttributes]: ...
    async def read(self, fh: int, off: int, size: int) -> bytes | memoryview: ...
    async def write(self, fh: int, off: int, buf: bytes) -> int: ...
    async def flush(self, fh: int) -> None: ...
    async def fsync(self, fh: int, datasync: bool) -> None: ...
    async def release(self, fh: int) -> None: ...
    async def unlink(self, parent_inode: int, name: bytes, ctx: Any) -> None: ...
    async def rename(self, parent_inode_old: int, name_old: bytes, parent_inode_new: int, name_new: bytes,
                     flags: int, ctx: Any) -> None: ...
    async def link(self, inode: int, new_parent_inode: int, new_name: bytes, ctx: Any) -> p.EntryAttributes: ...
    async def symlink(self, parent_inode: int, name: bytes, target: bytes, ctx: Any) -> p.EntryAttributes: ...
    async def statfs(self, ctx: Any) -> p.StatvfsData: ...


def mount(mountpoint: Path, options: Sequence[str]) -> int:
    """Mount through ``fusermount3``; the /dev/fuse descriptor of the new mount (non-blocking)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    with ours, theirs:
        env = dict(os.environ, _FUSE_COMMFD=str(theirs.fileno()))
        done = subprocess.run(["fusermount3", "-o", ",".join(options), "--", str(mountpoint)], env=env,
                              pass_fds=(theirs.fileno(),), capture_output=True, text=True, check=False)
        theirs.close()
        if done.returncode != 0:
            raise OSError(errno.EIO, f"fusermount3 could not mount {mountpoint}: {done.stderr.strip()}")
        _msg, fds, _flags, _addr = socket.recv_fds(ours, 1, 1)
    if not fds:
        raise OSError(errno.EIO, "fusermount3 mounted but handed back no /dev/fuse descriptor")
    os.set_blocking(fds[0], False)
    return fds[0]


def unmount(mountpoint: Path) -> None:
    """Detach the mount (lazily: open files keep it until they close); quiet if already gone."""
    subprocess.run(["fusermount3", "-u", "-z", "-q", "--", str(mountpoint)], capture_output=True, check=False)


class Session:
    def __init__(self, ops: Operations, fd: int, *, direct_reads: bool = True) -> None:
        self.ops = ops
        self.fd = fd
        self.want_direct_reads = direct_reads
        self.initialised = False
        self._handlers: dict[int, Handler] = {
            p.LOOKUP: self._lookup, p.GETATTR: self._getattr, p.SETATTR: self._setattr, p.MKDIR: self._mkdir,
            p.UNLINK: self._unlink, p.RMDIR: self._rmdir, p.RENAME: self._rename, p.RENAME2: self._rename2,
            p.LINK: self._link, p.SYMLINK: self._symlink, p.OPEN: self._open, p.CREATE: self._create,
            p.READ: self._read, p.WRITE: self._write, p.STATFS: self._statfs, p.RELEASE: self._release,
            p.FSYNC: self._fsync, p.FLUSH: self._flush, p.OPENDIR: self._opendir, p.READDIR: self._readdir,
            p.READDIRPLUS: self._readdirplus, p.RELEASEDIR: self._releasedir, p.FSYNCDIR: self._nothing,
        }

    # ---- the loop --------------------------------------------------------------------------------
    async def serve(self) -> None:
        """Answer requests until the mount goes away."""
        async with trio.open_nursery() as nursery:
            while True:
                try:
                    await trio.lowlevel.wait_readable(self.fd)
                    data = os.read(self.fd, p.BUFFER_SIZE)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError as exc:
                    if exc.errno == errno.ENOENT:  # a request interrupted before we read it
                        continue
                    if exc.errno in (errno.ENODEV, errno.EBADF):  # unmounted
                        break
                    raise
                if not data or not self._dispatch(data, nursery):
                    break
            nursery.cancel_scope.cancel()

    def _dispatch(self, data: bytes, nursery: trio.Nursery) -> bool:
        length, opcode, unique, nodeid, uid, gid, pid, _ext, _pad = p.IN_HEADER.unpack_from(data)
        body = memoryview(data)[p.IN_HEADER.size:length]
        if opcode == p.INIT:
            self._init(unique, body)
            return True
        if opcode in (p.FORGET, p.BATCH_FORGET, p.INTERRUPT):
            return True  # no answer is expected (inode numbers are never reused; interrupts wait)
        if opcode == p.DESTROY:
            self._send(unique, 0, None)
            return False
        handler = self._handlers.get(opcode)
        if handler is None or not self.initialised:
            self._send(unique, errno.ENOSYS if self.initialised else errno.EIO, None)
            return True
        nursery.start_soon(self._run, handler, unique, nodeid, p.RequestContext(uid, gid, pid), body)
        return True

    async def _run(self, handler: Handler, unique: int, nodeid: int, ctx: p.RequestContext,
                   body: memoryview) -> None:
        try:
            payload = await handler(nodeid, ctx, body)
        except p.FUSEError as exc:
            self._send(unique, exc.errno, None)
        except Exception:  # never the end of the mount: the caller gets EIO
            log.exception("FUSE request %s failed", handler.__name__)
            self._send(unique, errno.EIO, None)
        else:
            self._send(unique, 0, payload)

    def _send(self, unique: int, error: int, payload: Payload) -> None:
        parts: list[bytes | memoryview]
        if payload is None:
            parts = []
        elif isinstance(payload, bytes | memoryview):
            parts = [payload]
        else:
            parts = list(payload)
        size = p.OUT_HEADER.size + sum(len(part) for part in parts)
        try:
            os.writev(self.fd, [p.OUT_HEADER.pack(size, -error, unique), *parts])
        except OSError as exc:
            # ENOENT: the caller was interrupted and the kernel dropped the request; ENODEV: unmounted.
            if exc.errno not in (errno.ENOENT, errno.ENODEV, errno.EBADF):
                log.warning("FUSE reply to request %d (%d bytes) failed: %s", unique, size, exc)

    def _init(self, unique: int, body: memoryview) -> None:
        try:
            agreed = p.negotiate(body)
        except p.FUSEError as exc:
            self._send(unique, exc.errno, None)
            return
        self.ops.direct_reads = self.want_direct_reads and agreed.direct_io_mmap
        self.initialised = True
        self._send(unique, 0, agreed.reply)

    # ---- requests --------------------------------------------------------------------------------
    async def _lookup(self, nodeid: int, ctx: p.RequestContext, body: memoryview) -> Payload:
        name, _ = p.name_of(body)
        return p.entry(await self.ops.lookup(nodeid, name, ctx))

    async def _getattr(self, nodeid: int, ctx: p.RequestContext, body: memoryview) -> Payload:
        return p.attr_out(await self.ops.getattr(nodeid, ctx))

    async def _setattr(self, nodeid: int, ctx: p.RequestContext, body: memoryview) -> Payload:
        new, fields, fh = p.setattr_in(body)
        return p.attr_out(await self.ops.setattr(nodeid, new, fields, fh, ctx))

    async def _mkdir(self, nodeid: int, ctx: p.RequestContext, body: memoryview) -> Payload:
        mode, umask = p.MKDIR_IN.unpack_from(body)
        name, _ = p.name_of(body, p.MKDIR_IN.size)
        ctx = p.RequestContext(ctx.uid, ctx.gid, ctx.pid, umask)
        return p.entry(await self.ops.mkdir(nodeid, name, mode, ctx))

    async def _unlink(self, nodeid: int, ctx: p.RequestContext, body: memoryview) -> Payload:
        await self.ops.unlink(nodeid, p.name_of(body)[0], ctx)
        return None

    async def _rmdir(self, nodeid: int, ctx: p.RequestContext, body: memoryview) -> Payload:
        await self.ops.rmdir(nodeid, p.name_of(body)[0], ctx)
        return None

    async def _rename(self, nodeid: int, ctx: p.RequestContext, body: memoryview) -> Payload:
        (newdir,) = p.RENAME_IN.unpack_from(body)
        return await self._renamed(nodeid, newdir, 0, body, p.RENAME_IN.size, ctx)

    async def _rename2(self, nodeid: int, ctx: p.RequestContext, body: memoryview) -> Payload:
        newdir, flags, _pad = p.RENAME2_IN.unpack_from(body)
        return await self._renamed(nodeid, newdir, flags, body, p.RENAME2_IN.size, ctx)

    async def _renamed(self, nodeid: int, newdir: int, flags: int, body: memoryview, at: int,
                       ctx: p.RequestContext) -> Payload:
        old, at = p.name_of(body, at)
        new, _ = p.name_of(body, at)
        await self.ops.rename(nodeid, old, newdir, new, flags, ctx)
        return None

    async def _link(self, nodeid: int, ctx: p.RequestContext, body: memoryview) -> Payload:
        (old,) = p.RENAME_IN.unpack_from(body)  # fuse_link_in: the linked inode
        name, _ = p.name_of(body, p.RENAME_IN.size)
        return p.entry(await self.ops.link(old, nodeid, name, ctx))

    async def _symlink(self, nodeid: int, ctx: p.RequestContext, body: memoryview) -> Payload:
        name, at = p.name_of(body)
        target, _ = p.name_of(body, at)
        return p.entry(await self.ops.symlink(nodeid, name, target, ctx))

    async def _open(self, nodeid: int, ctx: p.RequestContext, body: memoryview) -> Payload:
        flags, _open_flags = p.OPEN_IN.unpack_from(body)
        return p.open_out(await self.ops.open(nodeid, flags, ctx))

    async def _create(self, nodeid: int, ctx: p.RequestContext, body: memoryview) -> Payload:
        flags, mode, umask, _open_flags = p.CREATE_IN.unpack_from(body)
        name, _ = p.name_of(body, p.CREATE_IN.size)
        info, attrs = await self.ops.create(nodeid, name, mode, flags, p.RequestContext(ctx.uid, ctx.gid, ctx.pid,
                                                                                         umask))
        return [p.entry(attrs), p.open_out(info)]

    async def _read(self, nodeid: int, ctx: p.RequestContext, body: memoryview) -> Payload:
        fh, offset, size, *_ = p.READ_IN.unpack_from(body)
        return await self.ops.read(fh, offset, size)

    async def _write(self, nodeid: int, ctx: p.RequestContext, body: memoryview) -> Payload:
        fh, offset, size, *_ = p.WRITE_IN.unpack_from(body)
        data = body[p.WRITE_IN.size:p.WRITE_IN.size + size]
        written = await self.ops.write(fh, offset, data)  # any buffer: pwrite takes it
        return p.WRITE_OUT.pack(written, 0)

    async def _statfs(self, nodeid: int, ctx: p.RequestContext, body: memoryview) -> Payload:
        return p.statfs_out(await self.ops.statfs(ctx))

    async def _release(self, nodeid: int, ctx: p.RequestContext, body: memoryview) -> Payload:
        (fh, *_) = p.RELEASE_IN.unpack_from(body)
        await self.ops.release(fh)
        return None

    async def _fsync(self, nodeid: int, ctx: p.RequestContext, body: memoryview) -> Payload:
        fh, flags, _pad = p.FSYNC_IN.unpack_from(body)
        await self.ops.fsync(fh, bool(flags & 1))
        return None

    async def _flush(self, nodeid: int, ctx: p.RequestContext, body: memoryview) -> Payload:
        (fh, *_) = p.RELEASE_IN.unpack_from(body)  # fuse_flush_in: fh first, as fuse_release_in
        await self.ops.flush(fh)
        return None

    async def _opendir(self, nodeid: int, ctx: p.RequestContext, body: memoryview) -> Payload:
        return p.open_out(p.FileInfo(fh=await self.ops.opendir(nodeid, ctx)))

    async def _readdirplus(self, nodeid: int, ctx: p.RequestContext, body: memoryview) -> Payload:
        fh, offset, size, *_ = p.READ_IN.unpack_from(body)
        token = p.DirectoryReply(size)
        await self.ops.readdir(fh, offset, token)
        return b"".join(token.parts)  # one buffer: a writev takes at most IOV_MAX (1024)

    async def _readdir(self, nodeid: int, ctx: p.RequestContext, body: memoryview) -> Payload:
        fh, offset, size, *_ = p.READ_IN.unpack_from(body)
        token = p.DirectoryReply(size, plus=False)
        await self.ops.readdir(fh, offset, token)
        return b"".join(token.parts)  # one buffer: a writev takes at most IOV_MAX (1024)

    async def _releasedir(self, nodeid: int, ctx: p.RequestContext, body: memoryview) -> Payload:
        (fh, *_) = p.RELEASE_IN.unpack_from(body)
        await self.ops.releasedir(fh)
        return None

    async def _nothing(self, nodeid: int, ctx: p.RequestContext, body: memoryview) -> Payload:
        return None


def close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)
