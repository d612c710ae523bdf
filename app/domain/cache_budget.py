"""The default cache budget: a share of what the data directory's filesystem can give Ferry.

A fixed default (it was 256 GiB) is larger than many disks, and a budget the disk cannot hold
makes ``ferry doctor`` warn on every run. The room counts the bytes Ferry already holds in its
data directory as its own, so a restart with a full cache computes the same budget instead of a
smaller one (which would evict what the first run cached)."""

from __future__ import annotations

DEFAULT_SHARE = 0.8  # of the room: the rest is slack for whatever else grows on that disk
MIN_BUDGET = 64 * 1024**2  # never 0, which means "no budget"


def room_bytes(total: int, free: int, held: int, reserve_bytes: int, reserve_ratio: float) -> int:
    """What Ferry may use on the filesystem: free space plus what it holds, less the reserve."""
    return free + held - max(reserve_bytes, int(total * reserve_ratio))


def default_cache_bytes(total: int, free: int, held: int, reserve_bytes: int, reserve_ratio: float) -> int:
    """``DEFAULT_SHARE`` of the room, at least ``MIN_BUDGET``."""
    return max(MIN_BUDGET, int(DEFAULT_SHARE * room_bytes(total, free, held, reserve_bytes, reserve_ratio)))
