"""Reads: lookup, read-your-writes from the journal's blobs, the read cache, then the remote."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from app import metrics
from app.adapters.remote import body_failure, read_available
from app.domain.conditions import NO_CONDITIONS, Conditions
from app.domain.errors import S3Error
from app.domain.objects import (
    ObjectAttributes,
    ObjectMeta,
    PartAttributes,
)
from app.domain.policy import Policy
from app.domain.ranges import WHOLE, RangeRequest
from app.domain.states import DIRTY
from app.domain.versions import BlobRef, VersionRow
from app.services.bodies import (
    READ_CHUNK,
    ObjectRead,
)
from app.services.cache import LOOKUP
from app.services.cache.owned import OwnedRead
from app.services.core import GatewayCore
from app.services.reads.read_ahead import ReadAhead


@dataclass(frozen=True)
class OwnedAsk:
    """What a GET's lookup needs to also read another node's block by name in its thread hop."""

    wanted: RangeRequest
    tenant_id: int | None
    conditions: Conditions


# A lookup's answer: the newest buffered version, this node's cache entry, an owner's read by name.
Local = tuple[VersionRow | None, Any, OwnedRead | None]


class ReadsService:
    """HEAD, GET and attributes of objects."""

    def __init__(self, core: GatewayCore) -> None:
        self.blobs = core.blobs
        self.cache = core.cache
        self.inline_lookups = core.inline_lookups
        self.journal = core.journal
        self.peers = core.peers
        self.remote = core.remote
        self._check_key = core.check_key
        self._run = core.run
        self.policy = core.policy
        # Reads the cache passes through keep a read-ahead window per object (read_ahead.py).
        self.read_ahead = ReadAhead(self.remote.get_object, self.cache.changed_since, core.run,
                                    max_window=self.cache.block_size)

    async def head_object(self, bucket: str, key: str, tenant_id: int | None = None) -> ObjectMeta:
        self._check_key(bucket, key)
        policy = self.policy(bucket, key)
        row, entry = await self._lookup(bucket, key, policy)
        if row is not None:
            return _local_meta(row)
        if policy.caches:
            return await self.cache.head(bucket, key, policy, tenant_id, entry)  # entry None: known absent
        return await self._run(self.remote.head_object, bucket, key)

    async def object_attributes(self, bucket: str, key: str, tenant_id: int | None = None) -> ObjectAttributes:
        """GetObjectAttributes: a buffered version answers from its journal row (its blobs are its
        parts); otherwise the metadata is HEAD's (cache or remote) and the parts are the remote's,
        kept only when they describe the same ETag."""
        self._check_key(bucket, key)
        policy = self.policy(bucket, key)
        row, _entry = await self._lookup(bucket, key, policy)
        if row is not None:
            meta = _local_meta(row)
            if not row.multipart:
                return ObjectAttributes(meta)
            return ObjectAttributes(meta, [PartAttributes(b.number if b.number is not None else i, b.size,
                                                          dict(b.checksums))
                                           for i, b in enumerate(row.blobs, 1)])
        meta = await self.head_object(bucket, key, tenant_id)
        if "-" not in meta.etag:
            return ObjectAttributes(meta)
        found = await self._run(self.remote.object_parts, bucket, key)
        if found is None or found[0] != meta.etag:
            return ObjectAttributes(meta)
        return ObjectAttributes(meta, found[1])

    async def _lookup(self, bucket: str, key: str, policy: Policy) -> tuple[VersionRow | None, Any]:
        found = await self._lookup_for(bucket, key, policy)
        return found[0], found[1]

    async def _lookup_for(self, bucket: str, key: str, policy: Policy, read: OwnedAsk | None = None) -> Local:
        if self.inline_lookups:
            return self._local_state(bucket, key, policy, read)
        return await self._run(self._local_state, bucket, key, policy, read)

    def _local_state(self, bucket: str, key: str, policy: Policy, read: OwnedAsk | None = None) -> Local:
        """The key's newest buffered version and its cache entry, in one thread hop: both are
        point lookups, and on a hit the hop costs more than the queries. With a PostgreSQL
        catalog both are one statement (one round trip, one statement of the server's CPU),
        and for a GET (``read``) in a fleet, the row of the block's owner too: when this node
        has none and the owner's can answer, its bytes by name in the same hop (cache/owned.py)."""
        both = self.cache.lookup_with_newest(bucket, key, (read.wanted.first_byte or 0) if read else None) \
            if policy.caches else None
        if both is not None:
            row = self.journal.dirty_row(both.newest)
            if row is not None:
                return row, None, None
            if both.owned is None or both.entry is not None or read is None:
                return None, both.entry, None
            return None, None, self.cache.owned.fetch_now(both.owned, read.wanted, policy, read.tenant_id,
                                                          read.conditions)
        row = self.journal.latest_dirty(bucket, key)
        if row is not None or not policy.caches:
            return row, None, None
        return None, self.cache.lookup(bucket, key), None

    async def get_object(self, bucket: str, key: str, rng: RangeRequest = WHOLE, tenant_id: int | None = None,
                         *, conditions: Conditions = NO_CONDITIONS, file_ranges: bool = False) -> ObjectRead:
        """Open the object, serving ``rng`` (parsed at the edge), with ``conditions`` judged here,
        once, on whatever answers: a buffered version or a cache entry the cache serves before
        anything is opened (no remote request), a cache miss once its discovery told the
        version, a remote read once it is open (closed again on a 304/412). With
        ``file_ranges`` a cached read's stream may yield ``FileRange`` items, not bytes."""
        self._check_key(bucket, key)
        policy = self.policy(bucket, key)
        row, entry, owned = await self._lookup_for(bucket, key, policy,
                                                   OwnedAsk(rng, tenant_id, conditions))
        buffered = row is not None
        if row is not None:
            opened = await self._open_buffered(row, rng, conditions)
            if opened is not None:
                return opened
        if policy.caches:
            cached = await self.cache.read(bucket, key, rng, policy, tenant_id,
                                           LOOKUP if buffered else entry, file_ranges=file_ranges,
                                           conditions=conditions, owned=None if buffered else owned)
            if cached is not None:
                return ObjectRead(cached.meta, cached.byte_range, cached.stream, cached.close, cached.files,
                                  cached.data)
        else:
            metrics.cache_outcome("bypass", bucket, tenant_id)
        ahead = await self.read_ahead.open(bucket, key, rng, policy) if policy.caches else None
        read = ahead if ahead is not None else await self._get_remote(bucket, key, rng)
        try:
            conditions.check(read.meta.etag, read.meta.last_modified)
        except S3Error:
            read.close()
            raise
        return read

    async def warm_object(self, bucket: str, key: str, tenant_id: int | None = None) -> int:
        """Staging: cache every block of the object now; returns the bytes fetched (0 if fresh)."""
        self._check_key(bucket, key)
        policy = self.policy(bucket, key)
        if not policy.caches:
            return 0
        return await self.cache.warm(bucket, key, policy, tenant_id)

    async def _get_remote(self, bucket: str, key: str, rng: RangeRequest) -> ObjectRead:
        range_header = rng.header
        try:
            meta, body = await self._run(self.remote.get_object, bucket, key, range_header)
        except S3Error as err:
            suffix = (range_header or "").startswith("bytes=-") and range_header != "bytes=-0"
            if err.code != "InvalidRange" or not suffix:
                raise
            # A suffix range of an empty object is the (empty) object in S3; some remotes say 416.
            meta, body = await self._run(self.remote.get_object, bucket, key, None)
        served = rng.resolve(meta.size)
        if served is None and range_header and meta.size:
            # The remote served a range we consider invalid syntax: re-open whole.
            body.close()
            meta, body = await self._run(self.remote.get_object, bucket, key, None)
        return ObjectRead(meta, served, self._stream_remote(body), body.close)

    async def _open_buffered(self, row: VersionRow, rng: RangeRequest, conditions: Conditions) -> ObjectRead | None:
        """Serve the key's newest buffered version from its blobs, here or on the node that holds
        them; None once it is durable (the remote has it now). While the version is buffered and
        its bytes cannot be had (its node is gone), the answer is 503: an older version from the
        remote or the cache would go back in time."""
        current: VersionRow | None = row
        for _ in range(5):
            if current is None:
                return None
            meta = _local_meta(current)
            conditions.check(meta.etag, meta.last_modified)
            if self.peers is None or current.node_id == self.peers.node_id:
                opened = await self._open_local(current, rng)
            else:
                opened = await self._open_peer(current, rng)
            if opened is not None:
                return opened
            # Its bytes left the place the row named: destaged and dropped, or taken over.
            assert self.journal is not None
            again = await self._run(self.journal.latest_dirty, current.bucket, current.key)
            if again is not None and again.seq == current.seq and again.generation == current.generation \
                    and again.node_id == current.node_id:
                break
            current = again
        raise S3Error("ServiceUnavailable", "The node holding this object's latest write cannot serve it now.")

    async def open_held_version(self, seq: int, rng: RangeRequest) -> ObjectRead | None:
        """The internal endpoint's side of a peer read: the bytes of buffered version ``seq`` if
        this node's data directory holds them, else None (durable and dropped, or not ours)."""
        row = await self._run(self.journal.get, seq)
        if row is None or row.state not in DIRTY or row.is_delete:
            return None
        if self.peers is not None and row.node_id != self.peers.node_id:
            return None
        return await self._open_local(row, rng)

    async def _open_peer(self, row: VersionRow, requested: RangeRequest) -> ObjectRead | None:
        """Stream a buffered version from the node whose data directory holds it (fleet)."""
        assert self.peers is not None
        meta = _local_meta(row)
        rng = requested.resolve(meta.size)
        first, last = (rng.first, rng.last) if rng else (0, meta.size - 1)
        if last < first:  # an empty object: nothing to fetch
            return ObjectRead(meta, rng, _nothing(), lambda: None)
        body = await self.peers.open(row, first, last)
        if body is None:
            return None
        want = last - first + 1

        async def stream() -> AsyncIterator[bytes]:
            got = 0
            try:
                async for chunk in body.chunks():
                    got += len(chunk)
                    yield chunk
                if got != want:  # the holder died mid-body: drop the connection, never a short body
                    raise S3Error("ServiceUnavailable", "The node holding this object stopped mid-body.")
            finally:
                body.close()

        return ObjectRead(meta, rng, stream(), body.close)

    async def _open_local(self, row: VersionRow, requested: RangeRequest) -> ObjectRead | None:
        """Serve a not-yet-durable version from its blobs (read-your-writes)."""
        meta = _local_meta(row)
        rng = requested.resolve(meta.size)
        first, last = (rng.first, rng.last) if rng else (0, meta.size - 1)
        handles: list[tuple[Any, int, int]] = []  # (file, offset in blob, length)
        offset = 0
        try:
            for piece in row.blobs:
                start, end = max(first, offset), min(last, offset + piece.size - 1)
                if start <= end:
                    fh = await self._open_piece(row, piece)
                    handles.append((fh, start - offset, end - start + 1))
                offset += piece.size
        except FileNotFoundError:
            # Destaged (and dropped) meanwhile: the remote has it now.
            for fh, _, _ in handles:
                fh.close()
            return None

        def close() -> None:
            for fh, _, _ in handles:
                fh.close()

        async def stream() -> AsyncIterator[bytes]:
            try:
                for fh, start, length in handles:
                    await self._run(fh.seek, start)
                    while length > 0:
                        chunk = await self._run(fh.read, min(READ_CHUNK, length))
                        if not chunk:
                            raise S3Error("InternalError", "a buffered object is shorter than recorded")
                        length -= len(chunk)
                        yield chunk
            finally:
                close()

        return ObjectRead(meta, rng, stream(), close)

    async def _open_piece(self, row: VersionRow, piece: BlobRef) -> BinaryIO:
        """A piece's bytes: its blob file, or the body kept in the journal row. Raises
        FileNotFoundError for either once the row was destaged and its copy dropped."""
        if not piece.inline:
            return await self._run(open, self.blobs.path(piece.blob), "rb")
        body = await self._run(self.journal.inline_body, row.seq)
        if body is None:
            raise FileNotFoundError(row.seq)
        return io.BytesIO(body)

    async def _stream_remote(self, body: BinaryIO) -> AsyncIterator[bytes]:
        try:
            first = True
            while True:
                # The first bytes go out as soon as they arrive; then full chunks (fewer hops).
                chunk = await (self._run(read_available, body, READ_CHUNK) if first else self._run(body.read, READ_CHUNK))
                first = False
                if not chunk:
                    return
                yield chunk
        except S3Error as exc:
            metrics.remote_body_failed(body_failure(exc))
            raise
        except Exception as exc:  # a remote that drops mid-body must end the response, not hang
            metrics.remote_body_failed(body_failure(exc))
            raise S3Error("ServiceUnavailable", f"The remote stream failed: {exc}") from exc
        finally:
            body.close()


async def _nothing() -> AsyncIterator[bytes]:
    return
    yield b""  # an async generator that yields nothing


def _local_meta(row: VersionRow) -> ObjectMeta:
    if row.is_delete:
        raise S3Error("NoSuchKey", Key=row.key)
    return ObjectMeta(key=row.key, size=row.size, etag=row.etag, last_modified=row.created_at,
                      content_headers=dict(row.content_headers), metadata=dict(row.metadata),
                      checksums=dict(row.checksums), parts_count=len(row.blobs) if row.multipart else None)
