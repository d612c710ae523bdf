"""The gateway's use cases: what an S3 operation means, independent of HTTP.

Bodies are received into the local blob store first (bounded memory, digests computed on the
way, verified before anything is committed). In this module the remote is written
synchronously (write-through); the write-back journal builds on the same staging step.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import hashlib
import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, BinaryIO, Protocol, TypeVar

import anyio
import anyio.to_thread

from app.adapters.blobstore import BlobStore, StagingFile
from app.adapters.catalog.repo import Catalog
from app.adapters.remote import RemoteStore
from app.domain.checksums import BodyDigests, verify_expected
from app.domain.errors import S3Error
from app.domain.names import validate_bucket_name, validate_key, validate_object_size
from app.domain.objects import BucketInfo, ListPage, ObjectMeta, PartInfo, UploadInfo
from app.domain.ranges import ByteRange

T = TypeVar("T")

WRITE_CHUNK = 4 * 1024 * 1024
READ_CHUNK = 1024 * 1024
MAX_PUT_SIZE = 5 * 1024**3
MIN_PART_SIZE = 5 * 1024 * 1024
MAX_PART_NUMBER = 10_000


class BodyStream(Protocol):
    """A request body as decoded payload pieces; trailers are known once it is exhausted."""

    def __aiter__(self) -> AsyncIterator[bytes]: ...

    @property
    def trailers(self) -> dict[str, str]: ...


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
                 part_concurrency: int = 8) -> None:
        self.catalog = catalog
        self.blobs = blobs
        self.remote = remote
        self.region = region
        self.limiter = anyio.CapacityLimiter(thread_limit)
        self.part_concurrency = part_concurrency

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Blocking work (boto3, disk, SQL) runs in threads, bounded by one limiter."""
        if kwargs:
            fn = functools.partial(fn, **kwargs)
        return await anyio.to_thread.run_sync(fn, *args, limiter=self.limiter)

    # ---- buckets -----------------------------------------------------------------------------
    async def list_buckets(self) -> list[BucketInfo]:
        return await self._run(self.remote.list_buckets)

    async def create_bucket(self, bucket: str, location: str | None) -> None:
        validate_bucket_name(bucket)
        try:
            await self._run(self.remote.create_bucket, bucket, location)
        except S3Error as err:
            # us-east-1 semantics: re-creating a bucket you own succeeds.
            if err.code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists") or (
                location not in (None, "us-east-1")
            ):
                raise
            await self._run(self.remote.head_bucket, bucket)

    async def head_bucket(self, bucket: str) -> None:
        await self._run(self.remote.head_bucket, bucket)

    async def delete_bucket(self, bucket: str) -> None:
        if await self._run(self.catalog.list_uploads, bucket, "", None, 1):
            raise S3Error("BucketNotEmpty", BucketName=bucket)
        await self._run(self.remote.delete_bucket, bucket)

    async def bucket_location(self, bucket: str) -> str | None:
        return await self._run(self.remote.bucket_location, bucket)

    # ---- listing -----------------------------------------------------------------------------
    async def list_objects(self, bucket: str, prefix: str, delimiter: str | None, marker: str | None,
                           max_keys: int) -> ListPage:
        if max_keys <= 0:
            await self.head_bucket(bucket)
            return ListPage([], [], False, None)
        start_after = marker
        if marker and delimiter and marker.endswith(delimiter) and marker.startswith(prefix):
            # The marker is a common prefix: skip everything rolled up under it.
            start_after = marker + "\U0010ffff"
        page = await self._run(self.remote.list_objects, bucket, prefix, delimiter, start_after, max_keys)
        if marker:
            page.common_prefixes = [p for p in page.common_prefixes if p > marker]
            page.contents = [c for c in page.contents if c.key > marker]
        return page

    async def list_versions(self, bucket: str, prefix: str, delimiter: str | None, key_marker: str | None,
                            max_keys: int) -> ListPage:
        """Unversioned buckets: every object is its one ``null`` version."""
        page = await self.list_objects(bucket, prefix, delimiter, key_marker, max_keys)
        for item in page.contents:
            item.version_id = "null"
        return page

    # ---- reading -----------------------------------------------------------------------------
    async def head_object(self, bucket: str, key: str) -> ObjectMeta:
        validate_key(key)
        return await self._run(self.remote.head_object, bucket, key)

    async def get_object(self, bucket: str, key: str, range_header: str | None,
                         byte_range: Callable[[int], ByteRange | None]) -> ObjectRead:
        """Open the object; ``byte_range(size)`` turns the Range header into what to serve."""
        validate_key(key)
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

    async def _stream_remote(self, body: BinaryIO) -> AsyncIterator[bytes]:
        try:
            while True:
                chunk = await self._run(body.read, READ_CHUNK)
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
        staging = await self._run(self.blobs.open_staging)
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
                await self._run(write, buf)
            if expected.declared_size is not None and staging.size != expected.declared_size:
                raise S3Error("IncompleteBody")
            checksums = expected.with_trailers(body.trailers)
            for alg in checksums:
                if alg not in digests.checksums():
                    raise S3Error("InvalidRequest", f"Checksum algorithm {alg} was not computed")
            verify_expected(digests, expected.content_md5, checksums)
        except BaseException:
            if pending is not None:
                pending.cancel()
                with anyio.CancelScope(shield=True), contextlib.suppress(BaseException):
                    await pending  # the original error is the one to report
            await self._run(self.blobs.discard, staging)
            raise
        computed = digests.checksums()
        return ReceivedBody(staging, digests, {alg: computed[alg] for alg in checksums} or {
            alg: computed[alg] for alg in expected.algorithms if alg in computed})

    # ---- writing -----------------------------------------------------------------------------
    async def put_object(self, bucket: str, key: str, body: BodyStream, content_headers: dict[str, str],
                         metadata: dict[str, str], expected: ExpectedDigests) -> PutResult:
        validate_key(key)
        received = await self.receive(body, expected, MAX_PUT_SIZE)
        try:
            validate_object_size(key, received.staging.size)
            etag = await self._run(self._upload_file, bucket, key, received, content_headers, metadata)
        finally:
            await self._run(self.blobs.discard, received.staging)
        return PutResult(etag, received.checksums)

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
        return await self._run(self.remote.copy_object, bucket, key, src_bucket, src_key, replace,
                               content_headers, metadata)

    async def delete_object(self, bucket: str, key: str) -> None:
        validate_key(key)
        await self._run(self.remote.delete_object, bucket, key)

    async def delete_objects(self, bucket: str, keys: list[str]) -> dict[str, tuple[str, str]]:
        failures: dict[str, tuple[str, str]] = {}
        valid: list[str] = []
        for key in keys:
            try:
                validate_key(key)
                valid.append(key)
            except S3Error as err:
                failures[key] = (err.code, err.message)
        if valid:
            failures.update(await self._run(self.remote.delete_objects, bucket, valid))
        return failures

    # ---- multipart ---------------------------------------------------------------------------
    async def create_upload(self, bucket: str, key: str, tenant_id: int | None,
                            content_headers: dict[str, str], metadata: dict[str, str],
                            checksum_algorithm: str | None) -> UploadInfo:
        validate_key(key)
        await self.head_bucket(bucket)
        upload_id = base64.urlsafe_b64encode(secrets.token_bytes(24)).decode().rstrip("=")
        headers = {"content": content_headers, "metadata": metadata}
        return await self._run(self.catalog.create_upload, upload_id, bucket, key, tenant_id, headers,
                               checksum_algorithm)

    async def _upload(self, bucket: str, key: str, upload_id: str) -> tuple[UploadInfo, dict[str, Any]]:
        found = await self._run(self.catalog.get_upload, upload_id)
        if found is None or found[0].bucket != bucket or found[0].key != key:
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
        received = await self.receive(body, expected, MAX_PUT_SIZE)
        return await self._store_part(upload_id, number, received)

    async def _store_part(self, upload_id: str, number: int, received: ReceivedBody) -> PutResult:
        blob = await self._run(self.blobs.commit, received.staging)
        part = PartInfo(number, received.staging.size, received.digests.md5_hex(), datetime.now(UTC),
                        received.checksums)
        try:
            old = await self._run(self.catalog.put_part, upload_id, part, blob)
        except BaseException:
            await self._run(self.blobs.delete, blob)
            raise
        if old:
            await self._run(self.blobs.delete, old)
        return PutResult(part.etag, part.checksums)

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

        class _Body:
            trailers: dict[str, str] = {}

            def __aiter__(self) -> AsyncIterator[bytes]:
                return read.stream

        expected = ExpectedDigests(declared_size=(rng[1] - rng[0] + 1) if rng else source.size)
        received = await self.receive(_Body(), expected, MAX_PUT_SIZE)
        result = await self._store_part(upload_id, number, received)
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
        for blob in await self._run(self.catalog.delete_upload, upload_id):
            await self._run(self.blobs.delete, blob)

    async def complete_upload(self, bucket: str, key: str, upload_id: str,
                              requested: list[tuple[int, str, dict[str, str]]]) -> str:
        info, headers = await self._upload(bucket, key, upload_id)
        stored = {p.part_number: (p, blob) for p, blob in await self._run(self.catalog.parts, upload_id)}
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
        etag = multipart_etag([p.etag for p, _ in chosen])
        content = dict(headers.get("content", {}))
        metadata = dict(headers.get("metadata", {}))
        remote_etag = await self._destage_multipart(info, content, metadata, chosen)
        if remote_etag and remote_etag != etag:
            raise S3Error("InternalError", f"The remote reported ETag {remote_etag}, expected {etag}")
        for blob in await self._run(self.catalog.delete_upload, upload_id):
            await self._run(self.blobs.delete, blob)
        return etag

    async def _destage_multipart(self, info: UploadInfo, content: dict[str, str], metadata: dict[str, str],
                                 parts: list[tuple[PartInfo, str]]) -> str:
        """Upload parts with the same boundaries so the remote ends with the client's ETag."""
        remote_id = await self._run(self.remote.create_multipart, info.bucket, info.key, content, metadata,
                                    info.checksum_algorithm)
        semaphore = asyncio.Semaphore(self.part_concurrency)

        async def send(part: PartInfo, blob: str) -> None:
            async with semaphore:
                await self._run(self._send_part, info, remote_id, part, blob)

        try:
            async with anyio.create_task_group() as tg:
                for part, blob in parts:
                    tg.start_soon(send, part, blob)
            listing = [(p.part_number, p.etag, p.checksums) for p, _ in parts]
            return await self._run(self.remote.complete_multipart, info.bucket, info.key, remote_id, listing)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await self._run(self.remote.abort_multipart, info.bucket, info.key, remote_id)
            raise

    def _send_part(self, info: UploadInfo, remote_id: str, part: PartInfo, blob: str) -> None:
        md5_b64 = base64.b64encode(bytes.fromhex(part.etag)).decode()
        with open(self.blobs.path(blob), "rb") as fh:
            remote_etag = self.remote.upload_part(info.bucket, info.key, remote_id, part.part_number, fh,
                                                  part.size, md5_b64, part.checksums)
        if remote_etag and remote_etag != part.etag:
            raise S3Error("InternalError", f"Remote part {part.part_number} ETag mismatch")


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

