"""Files being written through the mount: one staging file per name, shared by every open of it,
and published (one PUT, or the streamed multipart's completion) at fsync or the last close.

Why one per name: two opens of a file for writing (a shell's ``>>`` beside an editor's save) write
one staging file, and the object is what it holds when the last of them closes. Reads of a name
being written are answered from this staging file (``fs.py``), so a process sees its own writes
before they are published. Namespace operations ask here too: a file being written is listed,
has its size, moves with a rename and is dropped, unpublished, by an unlink.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from app.mount import streaming
from app.mount.errors import fail
from app.mount.handles import WriteHandle
from app.mount.inodes import Where, parent_of
from app.mount.metadata import Metadata
from app.mount.objects import GatewayObjects

Call = Callable[..., Awaitable[Any]]  # runs a blocking call of the gateway in a thread


class Writers:
    """The open files being written, each with the number of opens that hold it."""

    def __init__(self, objects: GatewayObjects, staging: Path, pool: ThreadPoolExecutor, call: Call,
                 meta: Metadata) -> None:
        self.objects = objects
        self.staging = staging
        self.pool = pool  # uploads a large file's parts while it is still being written
        self.call = call
        self.meta = meta
        self._held: dict[Where, tuple[WriteHandle, int]] = {}

    def get(self, where: Where) -> WriteHandle | None:
        held = self._held.get(where)
        return held[0] if held is not None else None

    def size(self, where: Where) -> int | None:
        """The size of a file being written (None: it is not)."""
        handle = self.get(where)
        return handle.size if handle is not None else None

    def names_in(self, directory: Where) -> set[str]:
        """Files being written in ``directory``: listed before their first publish."""
        return {where[1].rsplit("/", 1)[-1] for where in self._held if parent_of(where) == directory}

    async def open(self, where: Where, flags: int) -> WriteHandle:
        """Another open of the name shares its staging file (``O_TRUNC`` empties it); a first open
        starts one. An existing object is only ever rewritten whole: no writes into its bytes."""
        held = self._held.get(where)
        if held is not None:
            if flags & os.O_TRUNC:
                async with held[0].lock:
                    held[0].truncate(0)
            self._held[where] = (held[0], held[1] + 1)
            return held[0]
        found = await self.meta.file_stat(where)
        if found is not None and found.size > 0 and not flags & os.O_TRUNC:
            raise fail(errno.EOPNOTSUPP)
        handle = WriteHandle.create(self.staging, *where, objects=self.objects, pool=self.pool)
        self._held[where] = (handle, 1)
        return handle

    def share(self, where: Where) -> WriteHandle:
        """An open for reading of a name being written: it holds the staging file too."""
        handle, opens = self._held[where]
        self._held[where] = (handle, opens + 1)
        return handle

    async def publish(self, where: Where, handle: WriteHandle) -> None:
        """The staging file becomes the object (once acknowledged, it survives any crash)."""
        async with handle.lock:
            if handle.unlinked and handle.stream is not None and handle.stream.upload_id is not None:
                await self.call(handle.stream.abort)  # at the close, not at the later release
            if not handle.dirty or handle.unlinked:
                return
            found = await self.call(streaming.publish, self.objects, handle.bucket, handle.key, handle.path,
                                    handle.stream)
            handle.dirty = False
        self.meta.changed((handle.bucket, handle.key), found)

    async def release(self, handle: WriteHandle) -> None:
        """One open of ``handle`` is closed: the last one publishes it and lets it go."""
        where = (handle.bucket, handle.key)
        held = self._held.get(where)
        try:
            if held is None or held[1] <= 1:
                await self.publish(where, handle)
        finally:
            if held is not None and held[0] is handle:
                if held[1] <= 1:
                    del self._held[where]
                    handle.close()
                else:
                    self._held[where] = (handle, held[1] - 1)
            elif held is None:
                handle.close()

    def unlinked(self, where: Where) -> None:
        """The name was removed while open: its bytes are never published."""
        handle = self.get(where)
        if handle is not None:
            handle.unlinked = True

    async def publish_before_rename(self, where: Where) -> None:
        """A file being written is published before it is renamed (the rename moves an object)."""
        handle = self.get(where)
        if handle is not None:
            await self.publish(where, handle)

    def renamed(self, old: Where, new: Where) -> None:
        """Later writes of the renamed open file publish under its new name."""
        held = self._held.pop(old, None)
        if held is not None:
            held[0].key = new[1]
            self._held[new] = held
