"""Measuring the data directory's filesystem for the default cache budget (app/domain/cache_budget.py):
its size and free space (statvfs) and the bytes the data directory already holds (a walk)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class DiskRoom:
    """The data dir's filesystem: its size, its free space, and what the data dir holds of it."""

    total: int
    free: int
    held: int


def existing_parent(path: Path) -> Path:
    path = path.absolute()
    while not path.exists():
        path = path.parent
    return path


def held_bytes(path: Path) -> int:
    """Bytes allocated to files under ``path`` on its own filesystem (0 when it does not exist)."""
    if not path.is_dir():
        return 0
    device, held = path.stat().st_dev, 0
    for root, dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:  # removed while we walk
                continue
            held += st.st_blocks * 512 if st.st_dev == device else 0
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
    return held


def measure(data_dir: Path) -> DiskRoom:
    st = os.statvfs(existing_parent(data_dir))
    return DiskRoom(st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize, held_bytes(data_dir))
