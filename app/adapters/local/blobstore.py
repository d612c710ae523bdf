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
DROP = ".drop"  # ``tmp/<id>.drop``: a blob a commit is releasing (``pending``), not one being written
# A drop intent older than this names a blob its releasing commit has had time to release: once no
# row references it, nothing will (a worker killed between the commit and the unlink left it).
DROP_AFTER = 10.0
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
        the process dies in between, ``recover`` (at a restart) or ``collect`` (while running,
        after ``DROP_AFTER``) drops the blob unless a row still holds it. Named apart from a
        commit's intent, whose blob no row references *yet*, so it can be judged sooner."""
        with contextlib.suppress(FileExistsError, FileNotFoundError):
            os.link(self.path(blob_id), self.tmp / f"{blob_id}{DROP}")

    def settle(self, blob_id: str) -> None:
        """A catalog row now references the blob (or still does): drop its intent records."""
        self.path(blob_id)  # validates the id
        self._forget_intents(blob_id)

    def _forget_intents(self, blob_id: str) -> None:
        for name in (blob_id, f"{blob_id}{DROP}"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.tmp / name)

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
        self._forget_intents(blob_id)

    @staticmethod
    def _intent(name: str) -> tuple[str, bool] | None:
        """(blob id, whether it is a drop intent) of a ``tmp/`` name that is an intent record."""
        drop = name.endswith(DROP)
        blob_id = name[: -len(DROP)] if drop else name
        return (blob_id, drop) if len(blob_id) == 32 and set(blob_id) <= _ID_ALPHABET else None

    def size(self, blob_id: str) -> int:
        return self.path(blob_id).stat().st_size

    def recover(self, referenced: Callable[[list[str]], set[str]]) -> int:
        """After a crash: drop committed blobs that no catalog row references (see ``commit``),
        then every body that never completed. ``referenced(ids)`` says which ids rows hold."""
        intents = [self._intent(e.name) for e in os.scandir(self.tmp)]
        pending = sorted({i[0] for i in intents if i is not None and self.path(i[0]).exists()})
        if pending:
            keep = referenced(pending)
            for blob_id in pending:
                if blob_id not in keep:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self.path(blob_id))
        return self.clear_tmp()

    def collect(self, referenced: Callable[[list[str]], set[str]], older_than: float, now: float | None = None,
                drop_after: float = DROP_AFTER) -> int:
        """While running: drop committed blobs whose intent record (see ``commit``) is older than
        ``older_than`` seconds and that no catalog row references. These are copies accepted for
        another node's write that never committed (its node died between the copy and its row),
        and writes of this node that failed after their commit. A drop intent (``pending``) is
        judged after ``drop_after``: a destage worker killed between its row's final commit and
        the unlink. Without this, only a restart (``recover``) would drop them. A drop intent
        whose blob a row still holds after ``older_than`` (its commit failed) is forgotten: the
        row's own release records a new one. Returns how many blobs were dropped."""
        now = time.time() if now is None else now
        old: dict[str, bool] = {}
        for entry in os.scandir(self.tmp):
            intent = self._intent(entry.name)
            if intent is None:
                continue
            blob_id, drop = intent
            with contextlib.suppress(FileNotFoundError):
                # An intent is a hard link of the blob: its ctime is when the last link was made.
                age = now - entry.stat().st_ctime
                if age >= (drop_after if drop else older_than) and self.path(blob_id).exists():
                    old[blob_id] = old.get(blob_id, False) or (drop and age >= older_than)
        if not old:
            return 0
        keep = referenced(sorted(old))
        dropped = [blob_id for blob_id in old if blob_id not in keep]
        for blob_id in dropped:
            self.delete(blob_id)
        for blob_id in keep:
            if old.get(blob_id):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.tmp / f"{blob_id}{DROP}")
        return len(dropped)

    def clear_tmp(self) -> int:
        """Remove bodies of requests that never completed (after a crash); returns the count."""
        count = 0
        for entry in os.scandir(self.tmp):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
                count += 1
        return count
