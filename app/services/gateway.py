"""The gateway's use cases: what an S3 operation means, independent of HTTP.

Bodies are received into the local blob store first (bounded memory, digests computed on the
way, verified before anything is committed). Then, by mode:

- ``write-back`` (with a journal): the blob is fsynced, a journal row commits, the client gets
  its answer, and the executor destages the row later. Reads of a key whose newest row is not
  yet durable are served locally; listings merge those rows with the remote's.
- ``write-through``: the verified body goes to the remote before the answer.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import functools
import hashlib
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, BinaryIO, Protocol, TypeVar

import anyio
import anyio.to_thread

from app import metrics
from app.adapters.blobstore import BlobStore, StagingFile
from app.adapters.catalog.journal import BlobRef, Journal, VersionRow
from app.adapters.catalog.repo import Catalog, ClaimLost, CompletedUpload, UploadClaim, UploadNotOpen
from app.adapters.remote import RemoteStore, read_available
from app.domain.checksums import BodyDigests, verify_expected
from app.domain.errors import S3Error
from app.domain.names import validate_bucket_name, validate_key, validate_object_size
from app.domain.objects import (
    BucketInfo,
    FileSegment,
    ListPage,
    ObjectAttributes,
    ObjectMeta,
    ObjectSummary,
    PartAttributes,
    PartInfo,
    UploadInfo,
)
from app.domain.policy import Policy
from app.domain.ranges import ByteRange
from app.domain.states import UploadState
from app.services.budget import CURRENT_TENANT, DiskReserve, Reservation, WriteBudget, slow_down
from app.services.budget import NONE as NO_RESERVATION
from app.services.destage import Destager, UploadSpec, upload
from app.services.executor import Executor
from app.services.partcopies import PartCopies
from app.services.policies import PolicyBook
from app.services.readcache import LOOKUP, ReadCache
from app.services.tenancy import Tenancy

T = TypeVar("T")
log = logging.getLogger("ferry.gateway")

WRITE_CHUNK = 4 * 1024 * 1024
READ_CHUNK = 1024 * 1024
INLINE_BODY = 256 * 1024
MAX_PUT_SIZE = 5 * 1024**3
MIN_PART_SIZE = 5 * 1024 * 1024
MAX_PART_NUMBER = 10_000
BUCKET_TRUST_SECONDS = 300.0
# How long a Complete's claim holds before another Complete may take the upload over (the
# claimer crashed). Write-through uploads the whole object under it, hence the longer lease.
COMPLETE_CLAIM_SECONDS = {True: 60.0, False: 3600.0}  # keyed by write-back
CLAIM_POLL_SECONDS = 0.05


class BodyStream(Protocol):
    """A request body as decoded payload pieces; trailers are known once it is exhausted."""

    def __aiter__(self) -> AsyncIterator[bytes]: ...

    @property
    def trailers(self) -> dict[str, str]: ...


class StreamBody:
    """An object being read (a copy source) used as the body of a write; it has no trailers."""

    def __init__(self, stream: AsyncIterator[bytes]) -> None:
        self.stream = stream
        self.trailers: dict[str, str] = {}

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self.stream


@dataclass
class ExpectedDigests:
    """What the client claimed about the body, checked before the body is accepted."""

    content_md5: str | None = None
    checksums: dict[str, str] = field(default_factory=dict)
    algorithms: set[str] = field(default_factory=set)
    declared_size: int | None = None

    def with_trailers(self, trailers: dict[str, str]) -> dict[str, str]:
        merged = dict(self.checksums)
        for name, value in trailers.items():
            if name.startswith("x-amz-checksum-"):
                merged[name[len("x-amz-checksum-"):].upper()] = value
        return merged


@dataclass
class PutResult:
    etag: str
    checksums: dict[str, str]
    version_id: str | None = None


@dataclass
class ObjectRead:
    """An open object: metadata, the range served, and its bytes as an async stream."""

    meta: ObjectMeta
    byte_range: ByteRange | None
    stream: AsyncIterator[bytes]
    close: Callable[[], None]
    files: list[FileSegment] | None = None  # the same bytes as local file ranges (cache hits)


@dataclass
class ReceivedBody:
    staging: StagingFile
    digests: BodyDigests
    checksums: dict[str, str]


def multipart_etag(part_md5s: list[str]) -> str:
    joined = b"".join(bytes.fromhex(m) for m in part_md5s)
    return f"{hashlib.md5(joined).hexdigest()}-{len(part_md5s)}"


class Gateway:
    """Service layer over the catalog, the local blob store and the remote."""

    def __init__(self, catalog: Catalog, blobs: BlobStore, remote: RemoteStore, *,
                 region: str = "us-east-1", thread_limit: int = 64,
                 part_concurrency: int = 8, journal: Journal | None = None,
                 executor: Executor | None = None, mode: str = "write-through",
                 buffer_bytes: int = 64 * 1024**3, destager: Destager | None = None,
                 cache: ReadCache | None = None, policies: PolicyBook | None = None,
                 inline_lookups: bool = False, eager_parts: bool = True,
                 part_copies: PartCopies | None = None, tenancy: Tenancy | None = None,
                 budget: WriteBudget | None = None, disk: DiskReserve | None = None) -> None:
        self.catalog = catalog
        self.tenancy = tenancy  # bucket ownership; None: every tenant reaches every bucket
        self.blobs = blobs
        self.remote = remote
        self.region = region
        self.limiter = anyio.CapacityLimiter(thread_limit)
        self.part_concurrency = part_concurrency
        self.journal = journal
        self.executor = executor
        self.mode = mode
        self.buffer_bytes = buffer_bytes
        self.destager = destager
        self.cache = cache
        self.policies = policies
        # SQLite point lookups (tens of µs, never blocked by writers in WAL mode) run on the event
        # loop: a thread hop costs more than the query. A networked catalog keeps them in threads.
        self.inline_lookups = inline_lookups
        self.eager_parts = eager_parts
        self.part_copies = part_copies or PartCopies()
        self._ahead: set[asyncio.Future[None]] = set()
        self._ahead_limiter = anyio.CapacityLimiter(part_concurrency)
        self.budget = budget or WriteBudget(buffer_bytes)  # bodies being received by this process
        self.disk = disk  # the data directory's free space, when budgeted against it
        self._dirty_cached = 0  # the journal's dirty bytes as last read (see _dirty_bytes)
        self._dirty_read_at = -1.0
        self._known_buckets: dict[str, float] = {}  # bucket -> when the remote last confirmed it

    async def _check_bucket(self, bucket: str) -> None:
        """NoSuchBucket before accepting a write, without asking the remote on every request:
        a bucket confirmed in the last minutes is trusted, so writes go on during an outage."""
        confirmed = self._known_buckets.get(bucket)
        if confirmed is not None and time.monotonic() - confirmed < BUCKET_TRUST_SECONDS:
            return
        try:
            await self._run(self.remote.head_bucket, bucket)
        except S3Error as err:
            # Remote unreachable (e.g. just after a restart during an outage): a bucket the
            # journal has written to before is known to exist, so writes go on.
            if err.status < 500 or self.journal is None or not await self._run(self.journal.has_bucket, bucket):
                raise
        self._known_buckets[bucket] = time.monotonic()

    @property
    def write_back(self) -> bool:
        """Whether the node-wide default mode buffers writes (policies may differ per key)."""
        return self.mode == "write-back" and self.journal is not None and self.executor is not None

    def policy(self, bucket: str, key: str = "") -> Policy:
        if self.policies is None:
            return Policy(mode=self.mode)
        return self.policies.for_key(bucket, key)

    def _write_back_for(self, bucket: str, key: str) -> bool:
        """The mode of a write to ``bucket/key``: True to buffer it, False to write through;
        a read-only mapping refuses it."""
        policy = self.policy(bucket, key)
        policy.refuse_write(bucket)
        return policy.mode == "write-back" and self.journal is not None and self.executor is not None

    async def _written(self, bucket: str, key: str) -> None:
        """After a write is accepted: no cached copy of the old version is served again."""
        if self.cache is not None:
            await self.cache.invalidate(bucket, key)

    def _submit(self, row: VersionRow) -> None:
        assert self.executor is not None
        self.executor.submit(row.seq)

    async def _behind_backlog(self, bucket: str, key: str) -> bool:
        """Whether a write in write-through (or bypass) mode must be journaled instead: the key
        still has rows not on the remote, and a write sent around them would be overwritten (or
        undone) by their destage, and reads would serve the older row meanwhile."""
        if self.journal is None or self.executor is None:
            return False
        return await self._run(self.journal.has_dirty, bucket, key)

    async def _destage_now(self, row: VersionRow) -> None:
        """A write-through write journaled behind a backlog: destage it before answering when it
        can go now. The older rows are superseded by it; if one is still being uploaded, or the
        remote fails, the row stays buffered (acknowledged) and the executor sends it later."""
        if self.destager is not None:
            try:
                if await self._run(self.destager.destage, row.seq) == "durable":
                    return
            except Exception:  # the row is committed: the write stands, the executor retries it
                log.warning("inline destage of seq %s failed", row.seq, exc_info=True)
        self._submit(row)

    async def _reserve(self, size: int | None, write_back: bool = True) -> Reservation:
        """Backpressure: refuse a write the disk, the buffer or the tenant's share of it cannot
        hold, before reading its bytes. Release the answer with ``_release`` when the body ends."""
        want = size or 0
        if self.disk is not None and self.disk.spare() < self.budget.reserved + want:
            raise slow_down("The data directory's disk is nearly full; retry later.")
        if not write_back or self.journal is None:
            return NO_RESERVATION
        dirty = await self._dirty_bytes()
        return self.budget.admit(want, dirty, CURRENT_TENANT.get())

    def _release(self, reservation: Reservation) -> None:
        self.budget.release(reservation)

    async def _dirty_bytes(self) -> int:
        """The buffer's fill, re-read at most every 0.2 s: an aggregate over the journal costs
        more than a small write itself, and this process's own bodies in flight are counted
        exactly in ``budget.reserved``."""
        now = time.monotonic()
        if now - self._dirty_read_at > 0.2:
            assert self.journal is not None
            self._dirty_cached = await self._run(self.journal.dirty_bytes)
            self._dirty_read_at = now
        return self._dirty_cached

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Blocking work (boto3, disk, SQL) runs in threads, bounded by one limiter."""
        if kwargs:
            fn = functools.partial(fn, **kwargs)
        return await anyio.to_thread.run_sync(fn, *args, limiter=self.limiter)

    # ---- buckets -----------------------------------------------------------------------------
    async def list_buckets(self, tenant_id: int | None = None) -> list[BucketInfo]:
        """The remote's buckets that this tenant owns (all of them without tenancy)."""
        buckets = await self._run(self.remote.list_buckets)
        if self.tenancy is None:
            return buckets
        visible = await self.tenancy.visible(tenant_id, [b.name for b in buckets])
        return [b for b in buckets if b.name in visible]

    async def create_bucket(self, bucket: str, location: str | None, tenant_id: int | None = None) -> None:
        validate_bucket_name(bucket)
        fresh = True
        try:
            await self._run(self.remote.create_bucket, bucket, location)
        except S3Error as err:
            # us-east-1 semantics: re-creating a bucket you own succeeds.
            if err.code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists") or (
                location not in (None, "us-east-1")
            ):
                raise
            await self._run(self.remote.head_bucket, bucket)
            fresh = False
        if self.tenancy is not None:
            await self.tenancy.created(tenant_id, bucket, fresh=fresh)
        self._known_buckets[bucket] = time.monotonic()

    async def head_bucket(self, bucket: str) -> None:
        await self._run(self.remote.head_bucket, bucket)
        self._known_buckets[bucket] = time.monotonic()

    async def delete_bucket(self, bucket: str) -> None:
        self._known_buckets.pop(bucket, None)
        if await self._run(self.catalog.list_uploads, bucket, "", None, 1):
            raise S3Error("BucketNotEmpty", BucketName=bucket)
        if self.journal is not None:
            await self._settle_pending_deletes(bucket)
        await self._run(self.remote.delete_bucket, bucket)
        if self.tenancy is not None:
            await self.tenancy.deleted(bucket)

    async def _settle_pending_deletes(self, bucket: str) -> None:
        """Before DeleteBucket: a bucket whose only buffered rows are deletes is empty once they
        reach the remote, so destage them now; a buffered put means BucketNotEmpty."""
        assert self.journal is not None
        deadline = time.monotonic() + 30
        while True:
            rows = await self._run(self.journal.dirty_under, bucket, "", None, 1000)
            if not rows:
                return
            if any(not r.is_delete for r in rows) or time.monotonic() > deadline:
                raise S3Error("BucketNotEmpty", BucketName=bucket)
            if self.destager is not None:
                for row in rows:
                    await self._run(self.destager.destage, row.seq)
            await asyncio.sleep(0.1)

    async def bucket_location(self, bucket: str) -> str | None:
        return await self._run(self.remote.bucket_location, bucket)

    # ---- listing -----------------------------------------------------------------------------
    async def list_objects(self, bucket: str, prefix: str, delimiter: str | None, marker: str | None,
                           max_keys: int) -> ListPage:
        if max_keys <= 0:
            await self.head_bucket(bucket)
            return ListPage([], [], False, None)
        start_after = listing_start(marker, prefix, delimiter)
        for _ in range(1000):
            page = await self._list_merged(bucket, prefix, delimiter, marker, start_after, max_keys)
            if page.contents or page.common_prefixes or not page.is_truncated:
                return page
            # Only deleted local rows in this stretch: read on from the position reached. It is
            # not a name the client saw, so it must not travel as a marker (see listing_start).
            start_after = page.next_marker
        return page

    async def _list_merged(self, bucket: str, prefix: str, delimiter: str | None, marker: str | None,
                           start_after: str | None, max_keys: int) -> ListPage:
        # Local rows first, then the remote: a row that turns durable in between is then seen on
        # one side or both (merged), never on neither.
        fetch = max_keys + 1
        local = await self._run(self.journal.dirty_under, bucket, prefix, start_after, fetch) if self.journal else []
        page = await self._run(self.remote.list_objects, bucket, prefix, delimiter, start_after, max_keys)
        if marker:
            page.common_prefixes = [p for p in page.common_prefixes if p > marker]
            page.contents = [c for c in page.contents if c.key > marker]
        if not local:
            return page
        return merge_listing(page, local, prefix, delimiter, max_keys, local_complete=len(local) < fetch)

    async def list_versions(self, bucket: str, prefix: str, delimiter: str | None, key_marker: str | None,
                            max_keys: int) -> ListPage:
        """Unversioned buckets: every object is its one ``null`` version."""
        page = await self.list_objects(bucket, prefix, delimiter, key_marker, max_keys)
        for item in page.contents:
            item.version_id = "null"
        return page

    # ---- reading -----------------------------------------------------------------------------
    async def head_object(self, bucket: str, key: str, tenant_id: int | None = None) -> ObjectMeta:
        validate_key(key)
        policy = self.policy(bucket, key)
        row, entry = await self._lookup(bucket, key, policy)
        if row is not None:
            return _local_meta(row)
        if self.cache is not None and policy.caches:
            return await self.cache.head(bucket, key, policy, tenant_id, entry)  # entry None: known absent
        return await self._run(self.remote.head_object, bucket, key)

    async def object_attributes(self, bucket: str, key: str, tenant_id: int | None = None) -> ObjectAttributes:
        """GetObjectAttributes: a buffered version answers from its journal row (its blobs are its
        parts); otherwise the metadata is HEAD's (cache or remote) and the parts are the remote's,
        kept only when they describe the same ETag."""
        validate_key(key)
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
        if self.inline_lookups:
            return self._local_state(bucket, key, policy)
        return await self._run(self._local_state, bucket, key, policy)

    def _local_state(self, bucket: str, key: str, policy: Policy) -> tuple[VersionRow | None, Any]:
        """The key's newest buffered version and its cache entry, in one thread hop: both are
        point lookups, and on a hit the hop costs more than the queries."""
        row = self.journal.latest_dirty(bucket, key) if self.journal is not None else None
        if row is not None or self.cache is None or not policy.caches:
            return row, None
        return None, self.cache.index.get(bucket, key)

    async def get_object(self, bucket: str, key: str, range_header: str | None,
                         byte_range: Callable[[int], ByteRange | None], tenant_id: int | None = None, *,
                         file_ranges: bool = False) -> ObjectRead:
        """Open the object; ``byte_range(size)`` turns the Range header into what to serve. With
        ``file_ranges`` a cached read's stream may yield ``FileRange`` items instead of bytes."""
        validate_key(key)
        policy = self.policy(bucket, key)
        row, entry = await self._lookup(bucket, key, policy)
        if row is not None:
            local = await self._open_local(row, range_header, byte_range)
            if local is not None:
                return local
            entry = None  # destaged meanwhile: look the cache up again
        if self.cache is not None and policy.caches:
            cached = await self.cache.read(bucket, key, range_header, byte_range, policy, tenant_id,
                                           entry if row is None else LOOKUP, file_ranges=file_ranges)
            if cached is not None:
                return ObjectRead(cached.meta, cached.byte_range, cached.stream, cached.close, cached.files)
        elif self.cache is not None:
            metrics.cache_outcome("bypass", bucket, tenant_id)
        return await self._get_remote(bucket, key, range_header, byte_range)

    async def warm_object(self, bucket: str, key: str, tenant_id: int | None = None) -> int:
        """Staging: cache every block of the object now; returns the bytes fetched (0 if fresh)."""
        validate_key(key)
        policy = self.policy(bucket, key)
        if self.cache is None or not policy.caches:
            return 0
        return await self.cache.warm(bucket, key, policy, tenant_id)

    async def _get_remote(self, bucket: str, key: str, range_header: str | None,
                          byte_range: Callable[[int], ByteRange | None]) -> ObjectRead:
        try:
            meta, body = await self._run(self.remote.get_object, bucket, key, range_header)
        except S3Error as err:
            suffix = (range_header or "").startswith("bytes=-") and range_header != "bytes=-0"
            if err.code != "InvalidRange" or not suffix:
                raise
            # A suffix range of an empty object is the (empty) object in S3; some remotes say 416.
            meta, body = await self._run(self.remote.get_object, bucket, key, None)
        rng = byte_range(meta.size) if range_header else None
        if rng is None and range_header and meta.size:
            # The remote served a range we consider invalid syntax: re-open whole.
            body.close()
            meta, body = await self._run(self.remote.get_object, bucket, key, None)
        return ObjectRead(meta, rng, self._stream_remote(body), body.close)

    async def _open_local(self, row: VersionRow, range_header: str | None,
                          byte_range: Callable[[int], ByteRange | None]) -> ObjectRead | None:
        """Serve a not-yet-durable version from its blobs (read-your-writes)."""
        meta = _local_meta(row)
        rng = byte_range(meta.size) if range_header else None
        first, last = (rng.first, rng.last) if rng else (0, meta.size - 1)
        handles: list[tuple[Any, int, int]] = []  # (file, offset in blob, length)
        offset = 0
        try:
            for piece in row.blobs:
                start, end = max(first, offset), min(last, offset + piece.size - 1)
                if start <= end:
                    fh = await self._run(open, self.blobs.path(piece.blob), "rb")
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
        except S3Error:
            raise
        except Exception as exc:  # a remote that drops mid-body must end the response, not hang
            raise S3Error("ServiceUnavailable", f"The remote stream failed: {exc}") from exc
        finally:
            body.close()

    # ---- receiving bodies --------------------------------------------------------------------
    async def receive(self, body: BodyStream, expected: ExpectedDigests, max_size: int) -> ReceivedBody:
        """Stream the body to ``tmp/`` while hashing it; verify sizes and digests."""
        small = expected.declared_size is not None and expected.declared_size <= INLINE_BODY
        # A small body is staged without thread hops: each costs more than its few syscalls.
        staging = self.blobs.open_staging() if small else await self._run(self.blobs.open_staging)
        digests = BodyDigests(sorted(expected.algorithms | set(expected.checksums)))
        pending: asyncio.Future[None] | None = None
        buf = bytearray()

        def write(chunk: bytearray) -> None:
            digests.update(chunk)
            staging.write(chunk, sync_every=8 * WRITE_CHUNK if self.blobs.fsync else 0)

        try:
            async for piece in body:
                buf += piece
                if staging.size + len(buf) > max_size:
                    raise S3Error("EntityTooLarge", MaxSizeAllowed=str(max_size))
                if len(buf) >= WRITE_CHUNK:
                    if pending is not None:
                        await pending
                    chunk, buf = buf, bytearray()
                    pending = asyncio.ensure_future(self._run(write, chunk))
            if pending is not None:
                await pending
                pending = None
            if buf:
                if len(buf) <= INLINE_BODY:
                    write(buf)
                else:
                    await self._run(write, buf)
            if expected.declared_size is not None and staging.size != expected.declared_size:
                raise S3Error("IncompleteBody")
            checksums = expected.with_trailers(body.trailers)
            missing = set(checksums) - set(digests.algorithms)
            if missing:
                raise S3Error("InvalidRequest", f"Checksum algorithm {sorted(missing)[0]} was not computed")
            verify_expected(digests, expected.content_md5, checksums)
        except BaseException as exc:
            if pending is not None:
                pending.cancel()
                with anyio.CancelScope(shield=True), contextlib.suppress(BaseException):
                    await pending  # the original error is the one to report
            await self._run(self.blobs.discard, staging)
            if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
                # A body larger than announced, or a disk filled by something else: retryable.
                raise slow_down("The data directory's disk is full; retry later.") from exc
            raise
        computed = digests.checksums()
        return ReceivedBody(staging, digests, {alg: computed[alg] for alg in checksums} or {
            alg: computed[alg] for alg in expected.algorithms if alg in computed})

    # ---- writing -----------------------------------------------------------------------------
    async def put_object(self, bucket: str, key: str, body: BodyStream, content_headers: dict[str, str],
                         metadata: dict[str, str], expected: ExpectedDigests) -> PutResult:
        validate_key(key)
        if self._write_back_for(bucket, key):
            await self._check_bucket(bucket)
            reserved = await self._reserve(expected.declared_size)
            try:
                received = await self.receive(body, expected, MAX_PUT_SIZE)
            finally:
                self._release(reserved)
            try:
                validate_object_size(key, received.staging.size)
            except S3Error:
                await self._run(self.blobs.discard, received.staging)
                raise
            await self._journal_put(bucket, key, received, content_headers, metadata)
            return PutResult(received.digests.md5_hex(), received.checksums)
        received = await self.receive(body, expected, MAX_PUT_SIZE)
        try:
            validate_object_size(key, received.staging.size)
            # Checked once the body is here, right before it is written: a row buffered while
            # it arrived (the mode turned write-back meanwhile) is older than this write.
            if await self._behind_backlog(bucket, key):
                row = await self._journal_put(bucket, key, received, content_headers, metadata, submit=False)
                await self._destage_now(row)
                return PutResult(row.etag, received.checksums)
            etag = await self._run(self._upload_file, bucket, key, received, content_headers, metadata)
        finally:
            await self._run(self.blobs.discard, received.staging)
        await self._written(bucket, key)
        return PutResult(etag, received.checksums)

    async def _journal_put(self, bucket: str, key: str, received: ReceivedBody, content_headers: dict[str, str],
                           metadata: dict[str, str], tenant_id: int | None = None, submit: bool = True) -> VersionRow:
        """fsync the body into the store, commit its journal row, hand it to the executor
        (unless ``submit`` is False: the caller destages it itself)."""
        journal = self.journal
        assert journal is not None

        def commit() -> VersionRow:  # one thread hop for both fsyncs (body, then journal)
            blob = self.blobs.commit(received.staging)
            piece = BlobRef(blob, received.staging.size, received.digests.md5_hex(), received.checksums)
            try:
                row = journal.append_put(
                    bucket, key, piece.size, piece.etag, [piece], multipart=False, content_headers=content_headers,
                    metadata=metadata, checksums=received.checksums, checksum_algorithm=None, tenant_id=tenant_id,
                    invalidate_cache=self.cache is not None)
            except BaseException:
                self.blobs.delete(blob)
                raise
            self.blobs.settle(blob)  # a committed row holds it: no longer crash garbage
            return row

        row = await self._run(commit)
        self._dirty_cached += row.size  # until the next re-read, count what this process added
        if submit:
            self._submit(row)
        return row

    def _upload_file(self, bucket: str, key: str, received: ReceivedBody, content_headers: dict[str, str],
                     metadata: dict[str, str]) -> str:
        with open(received.staging.path, "rb") as fh:
            etag = self.remote.put_object(bucket, key, fh, received.staging.size, received.digests.md5_b64(),
                                          content_headers, metadata, received.checksums)
        return etag or received.digests.md5_hex()

    async def copy_object(self, bucket: str, key: str, src_bucket: str, src_key: str, replace: bool,
                          content_headers: dict[str, str], metadata: dict[str, str],
                          check: Callable[[ObjectMeta], None]) -> tuple[str, datetime]:
        validate_key(key)
        validate_key(src_key)
        source = await self.head_object(src_bucket, src_key)
        check(source)
        validate_object_size(key, source.size)
        if src_bucket == bucket and src_key == key and not replace:
            raise S3Error("InvalidRequest", "This copy request is illegal because it is trying to copy an "
                          "object to itself without changing the object's metadata, storage class, "
                          "website redirect location or encryption attributes.")
        if source.size > MAX_PUT_SIZE:
            raise S3Error("InvalidRequest", "The specified copy source is larger than the maximum "
                          "allowable size for a copy source: 5368709120")
        if not replace:
            content_headers, metadata = dict(source.content_headers), dict(source.metadata)
        if self._write_back_for(bucket, key):
            row = await self._copy_local(bucket, key, src_bucket, src_key, source, content_headers, metadata)
            self._submit(row)
            return row.etag, row.created_at
        if await self._behind_backlog(bucket, key):
            row = await self._copy_local(bucket, key, src_bucket, src_key, source, content_headers, metadata)
            await self._destage_now(row)
            return row.etag, row.created_at
        result = await self._run(self.remote.copy_object, bucket, key, src_bucket, src_key, replace,
                                 content_headers, metadata)
        await self._written(bucket, key)
        return result

    async def _copy_local(self, bucket: str, key: str, src_bucket: str, src_key: str, source: ObjectMeta,
                          content_headers: dict[str, str], metadata: dict[str, str]) -> VersionRow:
        """A copy whose bytes go through the journal like any write, keeping key order (the
        caller hands the row on).

        A server-side copy on the remote could land before an older buffered write of the same
        key is destaged, which would then overwrite it; so the copy is staged locally instead.
        """
        reserved = await self._reserve(source.size)
        try:
            read = await self.get_object(src_bucket, src_key, None, lambda size: None)
            received = await self.receive(StreamBody(read.stream), ExpectedDigests(declared_size=source.size), MAX_PUT_SIZE)
        finally:
            self._release(reserved)
        if "-" not in source.etag and received.digests.md5_hex() != source.etag:
            await self._run(self.blobs.discard, received.staging)
            raise S3Error("InternalError", "the copy source changed while it was read")
        return await self._journal_put(bucket, key, received, content_headers, metadata, submit=False)

    async def _journal_delete(self, bucket: str, key: str) -> VersionRow:
        assert self.journal is not None
        return await self._run(functools.partial(self.journal.append_delete, bucket, key, None,
                                                 invalidate_cache=self.cache is not None))

    async def delete_object(self, bucket: str, key: str) -> None:
        validate_key(key)
        if self._write_back_for(bucket, key):
            await self._check_bucket(bucket)
            self._submit(await self._journal_delete(bucket, key))
            return
        if await self._behind_backlog(bucket, key):
            await self._destage_now(await self._journal_delete(bucket, key))
            return
        await self._run(self.remote.delete_object, bucket, key)
        await self._written(bucket, key)

    async def delete_objects(self, bucket: str, keys: list[str]) -> dict[str, tuple[str, str]]:
        failures: dict[str, tuple[str, str]] = {}
        valid: list[str] = []
        for key in keys:
            try:
                validate_key(key)
                valid.append(key)
            except S3Error as err:
                failures[key] = (err.code, err.message)
        buffered: list[str] = []
        direct: list[str] = []
        for key in valid:
            try:
                (buffered if self._write_back_for(bucket, key) else direct).append(key)
            except S3Error as err:
                failures[key] = (err.code, err.message)
        if buffered:
            await self._check_bucket(bucket)
            for key in buffered:
                self._submit(await self._journal_delete(bucket, key))
        for key in list(direct):
            if await self._behind_backlog(bucket, key):
                direct.remove(key)
                await self._destage_now(await self._journal_delete(bucket, key))
        if direct:
            failures.update(await self._run(self.remote.delete_objects, bucket, direct))
        for key in direct:
            if key not in failures:
                await self._written(bucket, key)
        return failures

    # ---- multipart ---------------------------------------------------------------------------
    async def create_upload(self, bucket: str, key: str, tenant_id: int | None,
                            content_headers: dict[str, str], metadata: dict[str, str],
                            checksum_algorithm: str | None) -> UploadInfo:
        validate_key(key)
        self._write_back_for(bucket, key)  # a read-only mapping refuses the upload up front
        await self._check_bucket(bucket)
        upload_id = base64.urlsafe_b64encode(secrets.token_bytes(24)).decode().rstrip("=")
        headers = {"content": content_headers, "metadata": metadata}
        return await self._run(self.catalog.create_upload, upload_id, bucket, key, tenant_id, headers,
                               checksum_algorithm)

    async def _upload(self, bucket: str, key: str, upload_id: str) -> tuple[UploadInfo, dict[str, Any]]:
        found = await self._run(self.catalog.get_upload, upload_id)
        if found is None:
            raise _not_open(await self._run(self.catalog.upload_state, upload_id), upload_id)
        if found[0].bucket != bucket or found[0].key != key:
            raise S3Error("NoSuchUpload", UploadId=upload_id)
        return found

    @staticmethod
    def _check_part_number(number: int) -> None:
        if not 1 <= number <= MAX_PART_NUMBER:
            raise S3Error("InvalidArgument", "Part number must be an integer between 1 and 10000, inclusive")

    async def upload_part(self, bucket: str, key: str, upload_id: str, number: int, body: BodyStream,
                          expected: ExpectedDigests) -> PutResult:
        self._check_part_number(number)
        info, _ = await self._upload(bucket, key, upload_id)
        if info.checksum_algorithm:
            expected.algorithms.add(info.checksum_algorithm)
        reserved = await self._reserve(expected.declared_size, self._write_back_for(bucket, key))
        try:
            received = await self.receive(body, expected, MAX_PUT_SIZE)
        finally:
            self._release(reserved)
        return await self._store_part(upload_id, number, received, bucket, key)

    async def _store_part(self, upload_id: str, number: int, received: ReceivedBody, bucket: str,
                          key: str) -> PutResult:
        blob = await self._run(self.blobs.commit, received.staging)
        part = PartInfo(number, received.staging.size, received.digests.md5_hex(), datetime.now(UTC),
                        received.checksums)
        try:
            old = await self._run(self.catalog.put_part, upload_id, part, blob)
        except UploadNotOpen as exc:
            await self._run(self.blobs.delete, blob)
            raise _not_open(exc.state, upload_id) from None
        except BaseException:
            await self._run(self.blobs.delete, blob)
            raise
        self.blobs.settle(blob)  # a committed part row holds it: no longer crash garbage
        self._dirty_cached += part.size
        if old:
            await self._run(self.blobs.delete, old)
        self._copy_part_ahead(bucket, key, upload_id, part, blob)
        return PutResult(part.etag, part.checksums)

    def _copy_part_ahead(self, bucket: str, key: str, upload_id: str, part: PartInfo, blob: str) -> None:
        """Copy a part to a remote multipart upload now, in the background, so the remote holds
        most of the object when the client completes it (the destage then only sends what is
        missing). Best effort: any failure just leaves the part to the destage."""
        if not self.eager_parts:
            return
        self.part_copies.started(bucket, key)
        task = asyncio.ensure_future(self._copy_part(bucket, key, upload_id, part, blob))
        self._ahead.add(task)
        task.add_done_callback(self._ahead.discard)

    async def _copy_part(self, bucket: str, key: str, upload_id: str, part: PartInfo, blob: str) -> None:
        try:
            await anyio.to_thread.run_sync(self._copy_part_sync, bucket, key, upload_id, part, blob,
                                           limiter=self._ahead_limiter)
        except Exception as exc:  # the destage sends this part instead
            log.info("copying part %s of %s/%s ahead failed: %s", part.part_number, bucket, key, exc)
        finally:
            self.part_copies.finished(bucket, key)

    def _copy_part_sync(self, bucket: str, key: str, upload_id: str, part: PartInfo, blob: str) -> None:
        remote_id = self.catalog.remote_upload(upload_id)
        if remote_id is None:
            found = self.catalog.get_upload(upload_id)
            if found is None:
                return  # completed or aborted meanwhile
            info, headers = found
            created = self.remote.create_multipart(bucket, key, dict(headers.get("content", {})),
                                                   dict(headers.get("metadata", {})), info.checksum_algorithm)
            remote_id = self.catalog.claim_remote_upload(upload_id, created)
            if remote_id != created:  # another worker created one first, or the upload ended
                self.remote.abort_multipart(bucket, key, created)
            if remote_id is None:
                return
        md5_b64 = base64.b64encode(bytes.fromhex(part.etag)).decode()
        try:
            fh = open(self.blobs.path(blob), "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            return  # replaced by a newer upload of the same part, or completed and destaged
        with fh:
            self.remote.upload_part(bucket, key, remote_id, part.part_number, fh, part.size, md5_b64, part.checksums)

    async def upload_part_copy(self, bucket: str, key: str, upload_id: str, number: int, src_bucket: str,
                               src_key: str, src_range: str | None,
                               check: Callable[[ObjectMeta], None]) -> tuple[str, datetime]:
        self._check_part_number(number)
        await self._upload(bucket, key, upload_id)
        source = await self.head_object(src_bucket, src_key)
        check(source)
        rng = _parse_copy_range(src_range, source.size)
        header = f"bytes={rng[0]}-{rng[1]}" if rng else None
        read = await self.get_object(src_bucket, src_key, header,
                                     lambda size: ByteRange(rng[0], rng[1], size) if rng else None)
        expected = ExpectedDigests(declared_size=(rng[1] - rng[0] + 1) if rng else source.size)
        received = await self.receive(StreamBody(read.stream), expected, MAX_PUT_SIZE)
        result = await self._store_part(upload_id, number, received, bucket, key)
        return result.etag, datetime.now(UTC)

    async def list_parts(self, bucket: str, key: str, upload_id: str, marker: int, max_parts: int
                         ) -> tuple[UploadInfo, list[PartInfo], bool]:
        info, _ = await self._upload(bucket, key, upload_id)
        rows = await self._run(self.catalog.parts, upload_id, marker, max_parts + 1)
        parts = [p for p, _ in rows]
        return info, parts[:max_parts], len(parts) > max_parts

    async def list_uploads(self, bucket: str, prefix: str, key_marker: str | None, max_uploads: int
                           ) -> tuple[list[UploadInfo], bool]:
        await self.head_bucket(bucket)
        rows = await self._run(self.catalog.list_uploads, bucket, prefix, key_marker, max_uploads + 1)
        return rows[:max_uploads], len(rows) > max_uploads

    async def abort_upload(self, bucket: str, key: str, upload_id: str) -> None:
        await self._upload(bucket, key, upload_id)
        try:
            blobs, remote_id = await self._run(self.catalog.abort_upload, upload_id)
        except UploadNotOpen as exc:  # a Complete claimed it meanwhile
            raise _not_open(exc.state, upload_id) from None
        for blob in blobs:
            await self._run(self.blobs.delete, blob)
        if remote_id is not None:
            await self._run(self.remote.abort_multipart, bucket, key, remote_id)

    async def complete_upload(self, bucket: str, key: str, upload_id: str,
                              requested: list[tuple[int, str, dict[str, str]]]) -> str:
        """One atomic claim of the upload: exactly one Complete commits the object from the parts
        it re-reads under the claim; a duplicate waits and answers the committed result."""
        write_back = self._write_back_for(bucket, key)
        token = secrets.token_hex(16)
        wait = CLAIM_POLL_SECONDS
        while True:
            outcome, found = await self._run(self.catalog.claim_complete, upload_id, bucket, key, token,
                                             COMPLETE_CLAIM_SECONDS[write_back])
            if outcome == "completed":
                assert isinstance(found, CompletedUpload)
                return _repeated(found, bucket, key, upload_id, requested)
            if outcome == "gone":
                raise S3Error("NoSuchUpload", UploadId=upload_id)
            if outcome == "busy":  # another Complete holds the claim: wait for its result
                await asyncio.sleep(wait)
                wait = min(1.0, wait * 2)
                continue
            assert isinstance(found, tuple)
            try:
                return await self._complete_claimed(bucket, key, upload_id, requested, found, token, write_back)
            except ClaimLost:
                continue  # our lease ran out and another Complete took over: answer its result
            except BaseException:
                await self._run(self.catalog.release_claim, upload_id, token)
                raise

    async def _complete_claimed(self, bucket: str, key: str, upload_id: str,
                                requested: list[tuple[int, str, dict[str, str]]],
                                found: tuple[UploadInfo, dict[str, Any]], token: str, write_back: bool) -> str:
        """Validate the part list against the parts as they are now, then commit the object
        (write-back: its journal row; write-through: the remote upload) under the claim."""
        info, headers = found
        stored = {p.part_number: (p, blob) for p, blob in await self._run(self.catalog.parts, upload_id)}
        chosen = _choose_parts(key, requested, stored)
        await self._check_parts_here(upload_id, chosen)
        etag = multipart_etag([p.etag for p, _ in chosen])
        claim = UploadClaim(upload_id, token, CompletedUpload(bucket, key, etag,
                                                              [(p.part_number, p.etag) for p, _ in chosen]))
        content = dict(headers.get("content", {}))
        metadata = dict(headers.get("metadata", {}))
        pieces = [BlobRef(blob, p.size, p.etag, p.checksums, p.part_number) for p, blob in chosen]
        size = sum(p.size for p in pieces)
        remote_id = await self._run(self.catalog.remote_upload, upload_id)
        if write_back or await self._behind_backlog(bucket, key):
            assert self.journal is not None
            # The parts become the object's blobs: no byte is copied again.
            row = await self._run(functools.partial(
                self.journal.append_put, bucket, key, size, etag, pieces, multipart=True,
                content_headers=content, metadata=metadata,
                checksums=composite_checksum(info.checksum_algorithm, pieces),
                checksum_algorithm=info.checksum_algorithm, tenant_id=None, complete_upload=claim,
                remote_upload_id=remote_id, invalidate_cache=self.cache is not None))
            unused = {b for _, b in stored.values()} - {p.blob for p in pieces}
            for blob in unused:
                await self._run(self.blobs.delete, blob)
            if write_back:
                self._submit(row)
            else:
                await self._destage_now(row)
            return etag
        spec = UploadSpec(bucket, key, size, etag, pieces, True, content, metadata, {}, info.checksum_algorithm,
                          remote_id)
        await self._run(upload, self.remote, self.blobs, spec, self.part_concurrency)
        for blob in await self._run(self.catalog.finish_upload, claim):
            await self._run(self.blobs.delete, blob)
        await self._written(bucket, key)
        return etag

    async def _check_parts_here(self, upload_id: str, chosen: list[tuple[PartInfo, str]]) -> None:
        """Parts live in the data directory of the node that received them; until nodes fetch
        each other's parts, a Complete elsewhere is refused (it could only commit a row whose
        blobs this disk does not hold)."""
        nodes = await self._run(self.catalog.part_nodes, upload_id)
        here = self.catalog.node_id
        for part, _ in chosen:
            owner = nodes.get(part.part_number)
            if owner is not None and here is not None and owner != here:
                raise S3Error("InvalidRequest", f"Part {part.part_number} of this upload is held by node "
                              f"{owner!r}; send CompleteMultipartUpload to that node")


def _not_open(state: str | None, upload_id: str) -> S3Error:
    """S3's answers for an upload that is no longer open: a Complete in progress conflicts
    (409 OperationAborted, retryable); a completed, aborted or unknown upload is NoSuchUpload."""
    if state == UploadState.COMPLETING:
        return S3Error("OperationAborted", "A CompleteMultipartUpload of this upload is in progress.")
    return S3Error("NoSuchUpload", UploadId=upload_id)


def _repeated(done: CompletedUpload, bucket: str, key: str, upload_id: str,
              requested: list[tuple[int, str, dict[str, str]]]) -> str:
    """A repeated Complete of a completed upload gets the committed answer (a retried request
    never turns a success into a failure); a different part list or target is NoSuchUpload."""
    if (done.bucket, done.key) != (bucket, key) or [(n, e) for n, e, _ in requested] != done.parts:
        raise S3Error("NoSuchUpload", UploadId=upload_id)
    return done.etag


def _choose_parts(key: str, requested: list[tuple[int, str, dict[str, str]]],
                  stored: dict[int, tuple[PartInfo, str]]) -> list[tuple[PartInfo, str]]:
    """The stored parts a Complete lists, checked as S3 checks them (order, ETags, sizes)."""
    chosen: list[tuple[PartInfo, str]] = []
    previous = 0
    for number, etag, _checksums in requested:
        if number <= previous:
            raise S3Error("InvalidPartOrder")
        previous = number
        found = stored.get(number)
        if found is None or found[0].etag != etag:
            raise S3Error("InvalidPart", PartNumber=str(number), ETag=etag)
        chosen.append(found)
    for part, _ in chosen[:-1]:
        if part.size < MIN_PART_SIZE:
            raise S3Error("EntityTooSmall", ProposedSize=str(part.size), MinSizeAllowed=str(MIN_PART_SIZE),
                          PartNumber=str(part.part_number), ETag=part.etag)
    validate_object_size(key, sum(p.size for p, _ in chosen))
    return chosen


def _parse_copy_range(header: str | None, size: int) -> tuple[int, int] | None:
    """x-amz-copy-source-range: ``bytes=first-last``, both required, inside the source."""
    if not header:
        return None
    value = header.strip()
    if not value.startswith("bytes="):
        raise S3Error("InvalidArgument", "The x-amz-copy-source-range value must be of the form "
                      "bytes=first-last where first and last are the zero-based offsets")
    try:
        first_s, last_s = value[6:].split("-", 1)
        first, last = int(first_s), int(last_s)
    except ValueError as exc:
        raise S3Error("InvalidArgument", "The x-amz-copy-source-range value must be of the form "
                      "bytes=first-last") from exc
    if first < 0 or last < first or last >= size:
        raise S3Error("InvalidRange", ActualObjectSize=str(size), RangeRequested=value)
    return first, last



def _local_meta(row: VersionRow) -> ObjectMeta:
    if row.is_delete:
        raise S3Error("NoSuchKey", Key=row.key)
    return ObjectMeta(key=row.key, size=row.size, etag=row.etag, last_modified=row.created_at,
                      content_headers=dict(row.content_headers), metadata=dict(row.metadata),
                      checksums=dict(row.checksums), parts_count=len(row.blobs) if row.multipart else None)


def listing_start(marker: str | None, prefix: str, delimiter: str | None) -> str | None:
    """Where the next page starts: after the marker, and past everything rolled up under it when
    the marker is a common prefix (its first delimiter after the prefix is its end). A key that
    merely ends with the delimiter (a merged page's limit) is not one: what follows it may still
    roll up into a shorter prefix not listed yet."""
    if not marker or not delimiter or not marker.startswith(prefix):
        return marker
    rest = marker[len(prefix):]
    if rest.endswith(delimiter) and rest.find(delimiter) == len(rest) - len(delimiter):
        return marker + "\U0010ffff"
    return marker


def merge_listing(page: ListPage, local: list[VersionRow], prefix: str, delimiter: str | None,
                  max_keys: int, *, local_complete: bool = True) -> ListPage:
    """Merge the remote's page with not-yet-durable local rows (puts added, deletes hidden).

    When the remote page is truncated, only names up to its last one are complete, so the merge
    stops there and the next page continues from the last name returned.
    """
    entries: dict[str, ObjectSummary | None] = {c.key: c for c in page.contents}
    prefixes = set(page.common_prefixes)
    limit = page.next_marker if page.is_truncated else None
    if not local_complete:
        # More local rows exist past the last one fetched: names beyond it are not complete.
        limit = min(limit, local[-1].key) if limit is not None else local[-1].key
    for row in local:
        if limit is not None and row.key > limit:
            break
        rest = row.key[len(prefix):]
        if delimiter and delimiter in rest:
            if not row.is_delete:
                prefixes.add(prefix + rest[: rest.index(delimiter) + len(delimiter)])
            continue
        if row.is_delete:
            entries.pop(row.key, None)
        else:
            entries[row.key] = ObjectSummary(row.key, row.size, row.etag, row.created_at)
    names = sorted([(k, False) for k in entries] + [(p, True) for p in prefixes])
    if limit is not None:
        names = [n for n in names if n[0] <= limit]
    chosen = names[:max_keys]
    truncated = len(names) > max_keys or page.is_truncated or not local_complete
    contents = [e for name, is_prefix in chosen if not is_prefix and (e := entries[name]) is not None]
    common = [name for name, is_prefix in chosen if is_prefix]
    next_marker = (chosen[-1][0] if chosen else limit) if truncated else None
    return ListPage(contents, common, truncated, next_marker)


def composite_checksum(algorithm: str | None, pieces: list[BlobRef]) -> dict[str, str]:
    """S3's checksum of a multipart object: the checksum of the parts' checksums, then ``-N``."""
    if not algorithm or not pieces or any(algorithm not in p.checksums for p in pieces):
        return {}
    from app.domain.checksums import new_checksum

    combined = new_checksum(algorithm)
    for piece in pieces:
        combined.update(base64.b64decode(piece.checksums[algorithm]))
    return {algorithm: f"{combined.b64digest()}-{len(pieces)}"}
