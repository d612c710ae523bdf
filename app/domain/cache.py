"""Cache records: a cached object version (``Entry``) and the names of its blocks and locks.

A block's file name is a hash of (bucket, key, ETag, block size, block index): no request input
becomes a path, and a changed object never reuses an old block. The services compute names; the
block store (``adapters/local/cachestore.py``) keeps the files under them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache

from app.domain.objects import ObjectMeta
from app.domain.states import CacheState


@dataclass
class Entry:
    """A cached object version: its remote metadata and where its blocks are."""

    id: int
    bucket: str
    key: str
    etag: str
    size: int
    block_size: int
    meta: ObjectMeta
    tenant_id: int | None
    state: CacheState
    cached_bytes: int
    validated_at: float
    last_access: float

    @property
    def blocks(self) -> int:
        return max(1, -(-self.size // self.block_size)) if self.size else 1

    def block_length(self, index: int) -> int:
        return max(0, min(self.block_size, self.size - index * self.block_size))


@dataclass(frozen=True)
class OwnedEntry:
    """Another fleet node's row of a key: the node that owns the block a GET starts in. While it
    is ready, that node's block file of it has a name anyone can compute (``block_name``)."""

    node_id: str
    entry: Entry


@dataclass(frozen=True)
class Lookup:
    """A GET's lookups in one snapshot: the key's newest journal version (seq, state), this
    node's cache row, and the owner's row where one was asked for."""

    newest: tuple[int, str] | None
    entry: Entry | None
    owned: OwnedEntry | None = None


@lru_cache(maxsize=4096)  # a hot object's blocks are named on every hit (a SHA-256 each)
def block_name(bucket: str, key: str, etag: str, index: int, block_size: int) -> str:
    """The block size is part of the name: after a change of FERRY_CACHE_BLOCK_BYTES an old
    entry's blocks can never be read at the new block boundaries."""
    material = "\0".join((bucket, key, etag, str(block_size), str(index))).encode("utf-8", "surrogatepass")
    return hashlib.sha256(material).hexdigest()


def meta_lock_name(bucket: str, key: str) -> str:
    """The lock taken while discovering an object's current version (one discovery at a time)."""
    return hashlib.sha256(("meta\0" + bucket + "\0" + key).encode("utf-8", "surrogatepass")).hexdigest()


def first_block(size: int, first_byte: int | None, block_size: int) -> tuple[int, int]:
    """(index, length) of the block a discovery reading from ``first_byte`` caches first: the
    block the byte is in, or block 0 when the byte is past the end (or no byte was asked)."""
    index = (first_byte or 0) // block_size
    if index * block_size >= size:
        index = 0
    return index, min(block_size, size - index * block_size)
