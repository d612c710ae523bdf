"""Rendezvous (highest random weight) hashing: which live node owns a cache block.

Every node scores every (node, block) pair with the same hash and the highest score wins. All
nodes that see the same live set agree on the owner without talking, and when a node leaves only
the blocks it owned move (each to its runner-up); when one joins it takes ~1/n of each other's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable


def block_key(bucket: str, key: str, index: int) -> bytes:
    """The identity ownership is decided on: a block of a key, whatever its version (the owner
    must be known before the ETag is, at discovery)."""
    return b"\0".join((bucket.encode(), key.encode("utf-8", "surrogatepass"), str(index).encode()))


def score(node_id: str, block: bytes) -> int:
    """64-bit weight of ``node_id`` for ``block`` (blake2b: fast, stable across processes)."""
    digest = hashlib.blake2b(block, digest_size=8, key=node_id.encode()[:64]).digest()
    return int.from_bytes(digest, "big")


def owner(block: bytes, nodes: Iterable[str]) -> str | None:
    """The node with the highest weight for ``block`` (ties by id, so all agree); None if no nodes."""
    best: tuple[int, str] | None = None
    for node in nodes:
        candidate = (score(node, block), node)
        if best is None or candidate > best:
            best = candidate
    return best[1] if best is not None else None
