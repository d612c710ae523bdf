"""Copies of other nodes' blocks: whether a fleet node keeps what it read from a block's owner.

A node's first read of an object whose every block another node owns is relayed: the owner's
bytes stream through a fill to the client and are not kept (no row, no accounting, no rename:
``Recording.refused``), so that read costs the owner's hit plus one hop instead of also the
asking node's copy and its catalog transaction before the last byte (docs/fleet.md, "Peer
reads"). The ``copy_reads``-th read counted of the key in this process keeps a copy, and reads
after it are local hits: an object read again on a node is worth holding there, one read once
is not worth a copy beside the owner's.

An object one of whose blocks this node owns is always kept at once: those blocks come from the
remote, and the owner is where the fleet looks for them (one remote fetch per block). The counts
are the cache's frequency sketch (admission.py), one process's, so with ``FERRY_WORKERS`` above 1
a key may be relayed once per worker before it is kept.
"""

from __future__ import annotations

import io
from typing import BinaryIO

from app.domain.errors import S3Error
from app.domain.objects import ObjectMeta
from app.services.cache.base import CacheBase

OWNERS_LOOKED_AT = 64  # blocks whose owner is asked; an object of more is kept (some block is surely ours)
# A peer's answer of at most this many bytes is read whole in the GET's thread. 1 MiB covers the
# samples of most datasets (images, audio clips, tokenized shards of a few hundred KiB): their
# relays then take no file and no second thread (bench.fleet_peer_read, 256 KiB, two runs each:
# a relay 8.6 ms and 6.0-6.9 ms of CPU, against 9.5-10.0 ms and 7.4-8.6 through a file). The
# price is memory: at most this much per relay in flight (the cache's 64 threads: 64 MiB).
SMALL_RELAY = 1024 * 1024


class PeerCopies:
    """The rule a discovery asks after its first GET: keep this object's blocks on this node?"""

    def __init__(self, cache: CacheBase, copy_reads: int) -> None:
        self.cache = cache
        self.copy_reads = copy_reads  # 1: every peer read keeps its copy (the rule is off)

    def wants_copy(self, bucket: str, key: str) -> bool:
        """Whether a read of the key now would keep a copy here (it was read ``copy_reads`` - 1
        times here already, or the rule is off), were there room."""
        return self.copy_reads <= 1 or self.cache.admission.estimate(bucket, key) + 1 >= self.copy_reads

    def likely_relay(self, bucket: str, key: str) -> bool:
        """Before any GET: whether a first read of the key here would be relayed if the object
        is one block (another node owns block 0, and the key was read too few times here)."""
        return self.cache.source.from_peer(bucket, key, 0) and not self.wants_copy(bucket, key)

    def relay_only(self, bucket: str, key: str, meta: ObjectMeta, from_peer: bool) -> bool:
        """True: serve this discovery's bytes (``from_peer``: they came from the block's owner)
        and keep nothing, because the key was read fewer than ``copy_reads`` times here and
        another node owns every block of it."""
        if not from_peer or self.wants_copy(bucket, key):
            return False
        blocks = -(-meta.size // self.cache.block_size)
        if not 0 < blocks <= OWNERS_LOOKED_AT:
            return False
        return all(self.cache.source.from_peer(bucket, key, i) for i in range(blocks))


class SmallBody(io.BytesIO):
    """A small peer answer read whole (``read_small``): still says where it came from."""

    from_peer = True


def read_small(body: BinaryIO, expected: int) -> BinaryIO:
    """A peer's answer of at most ``SMALL_RELAY`` bytes, read whole in the thread that got its
    headers (one thread hop for the lookup, the request and the bytes): a relay of it is then
    served from memory, with no fill, no file and no second thread. Anything else is returned
    as it is. A short answer raises (a partial object is never served)."""
    if not getattr(body, "from_peer", False) or expected > SMALL_RELAY:
        return body
    parts, got = [], 0
    try:
        while got < expected:
            chunk = body.read(expected - got)
            if not chunk:
                raise S3Error("ServiceUnavailable", f"the owner sent {got} of {expected} bytes")
            parts.append(chunk)
            got += len(chunk)
    finally:
        body.close()
    return SmallBody(b"".join(parts))
