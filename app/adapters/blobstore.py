"""Local blob store on the data directory (NVMe).

Layout: ``tmp/`` for bodies being received, ``blobs/ab/<id>`` for committed blobs. Names are
random ids generated here: no request input ever becomes part of a path, so no key can escape
the data directory. A body is durable once ``commit`` returns (file and directory fsynced).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path

_ID_ALPHABET = set("0123456789abcdef")


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
        self.size += len(data)
        if sync_every:
            self._since_sync += len(data)
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
        """fsync the body, move it into the store, fsync the directory; returns the blob id."""
        if self.fsync:
            os.fsync(staging.fd)
        staging.close()
        blob_id = self.new_id()
        target = self.path(blob_id)
        target.parent.mkdir(exist_ok=True)
        os.rename(staging.path, target)
        if self.fsync:
            _fsync_dir(target.parent)
        return blob_id

    def discard(self, staging: StagingFile) -> None:
        staging.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(staging.path)

    def delete(self, blob_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path(blob_id))

    def size(self, blob_id: str) -> int:
        return self.path(blob_id).stat().st_size

    def clear_tmp(self) -> int:
        """Remove bodies of requests that never completed (after a crash); returns the count."""
        count = 0
        for entry in os.scandir(self.tmp):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
                count += 1
        return count
