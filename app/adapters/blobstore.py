"""Local blob store on the data directory (NVMe).

Layout: ``tmp/`` for bodies being received, ``blobs/ab/<id>`` for committed blobs. Names are
random ids generated here: no request input ever becomes part of a path, so no key can escape
the data directory. A body is durable once ``commit`` returns (file and directory fsynced).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

_ID_ALPHABET = set("0123456789abcdef")
_IOV_MAX = 1024  # buffers per writev (Linux's IOV_MAX)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class StagingFile:
    """A body being received into ``tmp/``; written sequentially, then committed or discarded."""

    path: Path
    fd: int
    size: int = 0
    _since_sync: int = field(default=0, repr=False)

    def write(self, data: bytes | memoryview, *, sync_every: int = 0) -> None:
        view = memoryview(data)
        while view:
            written = os.write(self.fd, view)
            view = view[written:]
        self._written(len(data), sync_every)

    def write_many(self, pieces: Sequence[bytes | memoryview], *, sync_every: int = 0) -> None:
        """Several buffers in one ``writev``: a batch of received pieces, never joined (a copy)."""
        views = [memoryview(piece).cast("B") for piece in pieces if len(piece)]
        total = sum(view.nbytes for view in views)
        first = 0
        while first < len(views):
            written = os.writev(self.fd, views[first : first + _IOV_MAX])
            while first < len(views) and written >= views[first].nbytes:
                written -= views[first].nbytes
                first += 1
            if written:  # a short write: the rest of this buffer goes first next time
                views[first] = views[first][written:]
        self._written(total, sync_every)

    def _written(self, count: int, sync_every: int) -> None:
        self.size += count
        if sync_every:
            self._since_sync += count
            if self._since_sync >= sync_every:
                # Flushing as we go keeps the final fsync short and the page cache tame.
                os.fdatasync(self.fd)
                self._since_sync = 0

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class BlobStore:
    """Files named by generated ids; the only place that touches the data directory's files."""

    def __init__(self, data_dir: Path, *, fsync: bool = True) -> None:
        self.root = data_dir.resolve()
        self.tmp = self.root / "tmp"
        self.blobs = self.root / "blobs"
        self.fsync = fsync
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.blobs.mkdir(parents=True, exist_ok=True)

    @staticmethod
    def new_id() -> str:
        return secrets.token_hex(16)

    def path(self, blob_id: str) -> Path:
        """Path of a committed blob; refuses anything that is not one of our ids."""
        if len(blob_id) != 32 or not set(blob_id) <= _ID_ALPHABET:
            raise ValueError("not a blob id")
        return self.blobs / blob_id[:2] / blob_id

    def open_staging(self) -> StagingFile:
        path = self.tmp / self.new_id()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        return StagingFile(path, fd)

    def commit(self, staging: StagingFile) -> str:
        """fsync the body, link it into the store, fsync the directory; returns the blob id.

        The ``tmp/`` name stays as an intent record until ``settle`` (call it once a committed
        catalog row references the blob): after a crash, ``recover`` deletes the blobs whose
        intent is left and that no row references. It looks at in-flight writes only, never
        at the whole store.
        """
        if self.fsync:
            os.fsync(staging.fd)
        staging.close()
        blob_id = staging.path.name
        target = self.path(blob_id)
        target.parent.mkdir(exist_ok=True)
        os.link(staging.path, target)
        if self.fsync:
            _fsync_dir(target.parent)
        return blob_id

    def pending(self, blob_id: str) -> None:
        """Record the intent to drop a blob (``delete`` completes it, ``settle`` undoes it): if
        the process dies in between, ``recover`` drops the blob unless a row still holds it."""
        with contextlib.suppress(FileExistsError, FileNotFoundError):
            os.link(self.path(blob_id), self.tmp / blob_id)

    def settle(self, blob_id: str) -> None:
        """A catalog row now references the blob: drop its intent record."""
        self.path(blob_id)  # validates the id
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.tmp / blob_id)

    def intend_drop(self, blob_ids: list[str]) -> None:
        """``pending`` for each blob a catalog commit is about to release (ids of another node's
        disk are not here and are skipped): a crash between that commit and the unlinks then
        leaves intents that ``recover`` acts on, never files nothing names. If the commit fails
        instead, the intents name blobs rows still hold, which ``recover`` and ``collect`` keep."""
        for blob_id in blob_ids:
            self.pending(blob_id)

    def discard(self, staging: StagingFile) -> None:
        staging.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staging.path)

    def delete(self, blob_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path(blob_id))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.tmp / blob_id)

    def size(self, blob_id: str) -> int:
        return self.path(blob_id).stat().st_size

    def recover(self, referenced: Callable[[list[str]], set[str]]) -> int:
        """After a crash: drop committed blobs that no catalog row references (see ``commit``),
        then every body that never completed. ``referenced(ids)`` says which ids rows hold."""
        pending = [e.name for e in os.scandir(self.tmp)
                   if len(e.name) == 32 and set(e.name) <= _ID_ALPHABET and self.path(e.name).exists()]
        if pending:
            keep = referenced(pending)
            for blob_id in pending:
                if blob_id not in keep:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self.path(blob_id))
        return self.clear_tmp()

    def collect(self, referenced: Callable[[list[str]], set[str]], older_than: float, now: float | None = None) -> int:
        """While running: drop committed blobs whose intent record (see ``commit``) is older than
        ``older_than`` seconds and that no catalog row references. These are copies accepted for
        another node's write that never committed (its node died between the copy and its row),
        and writes of this node that failed after their commit: without this, only a restart
        (``recover``) would drop them. Returns how many were dropped."""
        now = time.time() if now is None else now
        old = []
        for entry in os.scandir(self.tmp):
            if len(entry.name) != 32 or not set(entry.name) <= _ID_ALPHABET:
                continue
            with contextlib.suppress(FileNotFoundError):
                # The intent is a hard link made at commit: its ctime is when the blob was committed.
                if now - entry.stat().st_ctime >= older_than and self.path(entry.name).exists():
                    old.append(entry.name)
        if not old:
            return 0
        keep = referenced(old)
        dropped = [blob_id for blob_id in old if blob_id not in keep]
        for blob_id in dropped:
            self.delete(blob_id)
        return len(dropped)

    def clear_tmp(self) -> int:
        """Remove bodies of requests that never completed (after a crash); returns the count."""
        count = 0
        for entry in os.scandir(self.tmp):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
                count += 1
        return count
