"""Ownership of a data directory: one gateway (``ferry serve``) at a time.

The owner holds an exclusive ``flock`` on ``<data dir>/ferry.lock`` for its whole life and
writes its pid there. The kernel drops the lock when the process dies (kill -9 included), so a
crashed owner never blocks its successor, and no stale pid file has to be guessed about.
The owner's uvicorn worker processes are its members: they die with it (``die_with_parent``).
The node's Celery workers are members too and take no lock: they read and unlink blobs of
journal rows they hold a lease on (and of this node's expired uploads), run the node's cache
chores under the cache's own byte-range locks (``cache/locks``, shared with the gateway's
processes), and never touch ``tmp/``, ``metrics/`` or run recovery.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import signal
import socket
import uuid
from pathlib import Path

LOCK_NAME = "ferry.lock"
DIR_ID_NAME = "ferry.dirid"
_PR_SET_PDEATHSIG = 1


class DataDirBusy(Exception):
    """Another live process owns the data directory."""

    def __init__(self, data_dir: Path, holder: str) -> None:
        self.data_dir = data_dir
        self.holder = holder
        super().__init__(f"data directory {data_dir} is in use by another ferry process ({holder}); "
                         "stop it first, or use its admin API")


class DataDirLock:
    """An exclusive flock on ``<data dir>/ferry.lock``; held until ``release`` or process exit."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.path = data_dir / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> DataDirLock:
        """Take the lock without waiting, or raise ``DataDirBusy`` naming the holder's pid."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_holder(fd)
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise DataDirBusy(self.data_dir, holder) from None
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} host {socket.gethostname()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor drops the flock
            self._fd = None

    def __enter__(self) -> DataDirLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def data_dir_id(data_dir: Path) -> str:
    """A random id of this data directory, made once (the owner calls it, under the lock)."""
    path = data_dir / DIR_ID_NAME
    with contextlib.suppress(FileNotFoundError):
        text = path.read_text().strip()
        if text:
            return text
    value = uuid.uuid4().hex
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as fh:
        fh.write(value + "\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return value


def _read_holder(fd: int) -> str:
    with contextlib.suppress(OSError):
        text = os.pread(fd, 200, 0).decode(errors="replace").strip()
        if text:
            return text
    return "pid unknown"


def die_with_parent() -> None:
    """In a worker process of the owner: be killed when the owner dies (Linux PR_SET_PDEATHSIG).

    Without it, a kill -9 of ``ferry serve`` would leave its uvicorn workers serving (writing
    into ``tmp/``) after the lock is gone, and a successor's recovery would delete their uploads.

    The owner is the process that started this one (``multiprocessing.parent_process``), not
    whatever ``getppid`` says now: an owner killed while this worker was still starting has
    already handed it to init, and a check against the current parent would pass.
    """
    import multiprocessing

    started_by = multiprocessing.parent_process()
    owner = started_by.pid if started_by is not None and started_by.pid else os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != owner:  # the owner died before the request took effect
        os.kill(os.getpid(), signal.SIGKILL)
