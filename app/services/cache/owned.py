"""Reads of a block another fleet node holds, by the block file's name: no lookup on that node.

A fleet GET's one catalog statement also reads the row of the node that owns the block the GET
starts in (rendezvous hashing, app/fleet/membership.py). When this node has no row of its own
and the owner's is ready and fresh, the GET asks the owner for that block's bytes by name. A
block's name is a hash of (bucket, key, ETag, block size, index) and a block file appears only by
the rename of a complete file (adapters/local/cachestore.py), so the owner answers from the file
alone: no row lookup, no discovery, no fill on either node (a peer read cost both nodes' lookups
and the asking node's discovery: docs/benchmarks.md, "Reads by name"). The asking node's
snapshot (the newest journal version and the rows, one statement) is what its own hits trust,
so a write acknowledged before it is never answered with the older bytes; a write after it is
concurrent with the GET, as for a hit.

Only what one answer of at most ``SMALL_RELAY`` bytes within one block covers goes this way
(samples, a Parquet footer, a row group); anything else, and any refusal (the file gone, the
node unreachable), goes the usual way: discovery, then the owner's relay or a fill.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from app import metrics
from app.domain.cache import OwnedEntry, block_name
from app.domain.conditions import Conditions
from app.domain.errors import S3Error
from app.domain.objects import FileRange
from app.domain.policy import Policy
from app.domain.ranges import ByteRange, RangeRequest
from app.domain.states import CacheState
from app.services.cache.base import CacheBase
from app.services.cache.copies import SMALL_RELAY
from app.services.cache.serve import SMALL_HIT


@dataclass(frozen=True)
class OwnedRead:
    """The owner's answer to a read by name: the range served and its bytes (None: the read's
    conditions failed on the owner's row, so no bytes were asked for)."""

    owned: OwnedEntry
    byte_range: ByteRange | None
    data: bytes | None


class OwnedReads:
    """Both sides: the asking node's read of an owner's block, and the owner's answer."""

    def __init__(self, cache: CacheBase) -> None:
        self.cache = cache

    def owner_of(self, bucket: str, key: str, first_byte: int) -> str | None:
        """The other node that owns the block a read from ``first_byte`` starts in (None: this one)."""
        return self.cache.source.owner_of(bucket, key, first_byte // self.cache.block_size)

    # ---- the asking node -----------------------------------------------------------------------
    def usable(self, owned: OwnedEntry, policy: Policy) -> bool:
        """Whether the owner's row may answer as this node's own would: ready, fresh by this
        policy (a hit's test), cut at this node's block size."""
        entry = owned.entry
        return policy.caches and entry.state == CacheState.READY and entry.size > 0 \
            and entry.block_size == self.cache.block_size and policy.is_fresh(entry.validated_at, time.time())

    def span(self, owned: OwnedEntry, wanted: RangeRequest) -> tuple[ByteRange | None, int, int] | None:
        """(the answer's range, first, last) when one answer by name covers ``wanted``: within
        one block the owner still owns, at most ``SMALL_RELAY`` bytes; else None. ``resolve``
        raises InvalidRange as a hit's would."""
        entry = owned.entry
        rng = wanted.resolve(entry.size)
        first, last = (rng.first, rng.last) if rng else (0, entry.size - 1)
        index = first // entry.block_size
        if last < first or last // entry.block_size != index or last - first + 1 > SMALL_RELAY:
            return None
        if self.cache.source.owner_of(entry.bucket, entry.key, index) != owned.node_id:
            return None  # the fleet changed since the lookup: the owner may not hold it
        return rng, first, last

    def fetch_now(self, owned: OwnedEntry, wanted: RangeRequest, policy: Policy, tenant_id: int | None,
                  conditions: Conditions) -> OwnedRead | None:
        """Blocking, in the thread that just looked the rows up (the lookup and the owner's answer
        in one thread hop): the owner's bytes for ``wanted``, read by name over a kept-open
        connection; None to read the usual way (not usable, a copy to keep here, a range one
        answer does not cover, the owner could not answer). Conditions that fail on the owner's
        row ask for no bytes: the caller judges them again and answers 304/412."""
        entry = owned.entry
        if not self.usable(owned, policy):
            return None
        if self.cache.copies.wants_copy(entry.bucket, entry.key) and self.cache.admission.has_room(entry.size, policy):
            return None  # read often enough here to keep a copy, and there is room: the usual way keeps it
        try:
            conditions.check(entry.etag, entry.meta.last_modified)
        except S3Error:
            return OwnedRead(owned, None, None)
        try:
            span = self.span(owned, wanted)
        except S3Error:
            return None  # an unsatisfiable range: the usual way answers it
        if span is None:
            return None
        rng, first, last = span
        data = self.cache.source.read_owned(owned.node_id, entry, first, last, tenant_id)
        metrics.fleet_peer_read("owned" if data is not None else "owned-refused")
        return OwnedRead(owned, rng, data) if data is not None else None

    # ---- the owner -----------------------------------------------------------------------------
    def open(self, bucket: str, key: str, etag: str, size: int, block_size: int, first: int,
             last: int, file_ranges: bool) -> AsyncIterator[bytes | FileRange] | bytes | None:
        """Bytes ``first..last`` of the named version, within one block: the bytes themselves
        for a small block (read with its header in one ``pread``), else a stream of the open
        file (``FileRange`` items with ``file_ranges``); None when the block is not here whole."""
        index = first // block_size
        if last < first or last // block_size != index or first < 0 or last >= size:
            return None
        name = block_name(bucket, key, etag, index, block_size)
        length = min(block_size, size - index * block_size)
        start, end = first - index * block_size, last - index * block_size
        store = self.cache.store
        if length <= SMALL_HIT:
            data = store.read_small(name, SMALL_HIT)
            if data is None or len(data) != length:
                return None
            return data if start == 0 and end == length - 1 else data[start:end + 1]
        if store.size_of(name) != length:  # its header checked, as a hit's
            return None
        return self._stream(name, start, end, file_ranges)

    async def _stream(self, name: str, start: int, end: int, file_ranges: bool) -> AsyncIterator[bytes | FileRange]:
        """The block file, opened once the answer is under way (an answer never started holds no
        descriptor); one deleted since is read from its retired copy (same bytes)."""
        try:
            fd = self.cache.store.open_block(name)
        except FileNotFoundError as exc:  # gone from both since the check: the asking node reads the usual way
            raise S3Error("ServiceUnavailable", "A cached block disappeared while being served.") from exc
        async for chunk in self.cache.serving.serve_open(fd, start, end, file_ranges):
            yield chunk

    def served(self, bucket: str, key: str, etag: str, size: int, entry_id: int, tenant_id: int | None,
               from_start: bool) -> None:
        """Count an answer by name as the owner's hit: the access (eviction's recency and
        frequency), the outcome, the sizing curve and admission's sketch, as its lookup did."""
        self.cache.touch_id(entry_id)
        metrics.cache_outcome("hit", bucket, tenant_id)
        self.cache.sizing.record(bucket, key, etag, size, tenant_id, True)
        self.cache.admission.record(bucket, key, from_start=from_start)
