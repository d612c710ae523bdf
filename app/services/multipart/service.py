"""Multipart uploads: parts (copied ahead to the remote by ``PartsAhead``), the one claimed Complete."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import logging
import secrets
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

from app.domain.conditions import NO_WRITE_CONDITIONS, WriteConditions
from app.domain.crc_combine import FULL_OBJECT, full_object
from app.domain.errors import S3Error
from app.domain.names import validate_object_size
from app.domain.objects import (
    ObjectMeta,
    PartInfo,
    UploadInfo,
)
from app.domain.profiles import RemoteProfile
from app.domain.ranges import WHOLE, RangeRequest
from app.domain.states import UploadState
from app.domain.uploads import ClaimLost, CompletedUpload, PartSource, UploadClaim, UploadNotOpen
from app.domain.versions import BlobRef, Replica, VersionDraft, VersionRow
from app.services.bodies import (
    CLAIM_POLL_SECONDS,
    MAX_PART_NUMBER,
    MAX_PUT_SIZE,
    MIN_PART_SIZE,
    BodyStream,
    ExpectedDigests,
    PutResult,
    ReceivedBody,
    StreamBody,
    multipart_etag,
)
from app.services.buckets import BucketsService
from app.services.core import GatewayCore
from app.services.destage.destager import UploadSpec, upload
from app.services.multipart import part_gather
from app.services.multipart.eager_open import BUFFERED_COMPLETE_WAIT, settled_remote_upload
from app.services.reads.service import ReadsService
from app.services.writes.key_holds import KeyHolds
from app.services.writes.modes import WriteMode

log = logging.getLogger("ferry.gateway")


class MultipartService:
    """The multipart upload operations."""

    def __init__(self, core: GatewayCore, reads: ReadsService, buckets: BucketsService, holds: KeyHolds) -> None:
        self.ahead = core.parts_ahead
        self.acks = core.acks
        self.admission = core.admission
        self.blobs = core.blobs
        self.catalog = core.catalog
        self.journal = core.journal
        self.known_buckets = core.known_buckets
        self.part_concurrency = core.part_concurrency
        self.part_copies = core.part_copies
        self.remote = core.remote
        self._check_content = core.check_content
        self._check_key = core.check_key
        self._mode_for = core.mode_for
        self._replicate = core.replicate
        self._run = core.run
        self._written = core.written
        self.receive = core.receive
        self.core = core  # the part gathering takes it whole (app/services/multipart/part_gather.py)
        self.reads = reads
        self.buckets = buckets
        self.holds = holds

    async def create_upload(self, bucket: str, key: str, tenant_id: int | None,
                            content_headers: dict[str, str], metadata: dict[str, str],
                            checksum_algorithm: str | None, checksum_type: str | None = None) -> UploadInfo:
        self._check_key(bucket, key)
        self._check_content(bucket, content_headers)
        self._mode_for(bucket, key)  # a read-only mapping refuses the upload up front
        await self.known_buckets.check(bucket)
        upload_id = base64.urlsafe_b64encode(secrets.token_bytes(24)).decode().rstrip("=")
        headers: dict[str, object] = {"content": content_headers, "metadata": metadata}
        if checksum_type:
            headers["checksum_type"] = checksum_type
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
        with self.acks.held():
            return await self._upload_part(bucket, key, upload_id, number, body, expected)

    async def _upload_part(self, bucket: str, key: str, upload_id: str, number: int, body: BodyStream,
                           expected: ExpectedDigests) -> PutResult:
        info, _ = await self._upload(bucket, key, upload_id)
        if info.checksum_algorithm:
            expected.algorithms.add(info.checksum_algorithm)
        reserved = await self.admission.reserve(expected.declared_size, self._mode_for(bucket, key).buffers)
        try:
            received = await self.receive(body, expected, MAX_PUT_SIZE)
        finally:
            self.admission.release(reserved)
        return await self._store_part(upload_id, number, received, bucket, key)

    async def _store_part(self, upload_id: str, number: int, received: ReceivedBody, bucket: str,
                          key: str) -> PutResult:
        blob = await self._run(self.blobs.commit, received.staging)
        part = PartInfo(number, received.staging.size, received.digests.md5_hex(), datetime.now(UTC),
                        received.checksums)
        try:
            replica = await self._replicate_part(bucket, key, part, blob)
            old = await self._run(self.catalog.put_part, upload_id, part, blob, replica, self.blobs.intend_drop)
        except UploadNotOpen as exc:
            await self._run(self.blobs.delete, blob)
            raise _not_open(exc.state, upload_id) from None
        except BaseException:
            await self._run(self.blobs.delete, blob)
            raise
        self.blobs.settle(blob)  # a committed part row holds it: no longer crash garbage
        self.admission.added(part.size)
        if old:
            await self._run(self.blobs.delete, old)
        self.ahead.start(bucket, key, upload_id, part, blob)
        return PutResult(part.etag, part.checksums)

    async def _replicate_part(self, bucket: str, key: str, part: PartInfo, blob: str) -> PartSource | None:
        """``write_replicas: 2``: an acknowledged part is held by a second node, like a PUT, so a
        Complete elsewhere can gather it from there when the node that took it is lost."""
        replica = await self._replicate(bucket, key, [BlobRef(blob, part.size, part.etag, part.checksums,
                                                              part.part_number)])
        return PartSource(replica.node_id, replica.blobs[0].blob) if replica is not None else None

    async def upload_part_copy(self, bucket: str, key: str, upload_id: str, number: int, src_bucket: str,
                               src_key: str, src_range: str | None,
                               check: Callable[[ObjectMeta], None]) -> tuple[str, datetime]:
        self._check_part_number(number)
        await self._upload(bucket, key, upload_id)
        source = await self.reads.head_object(src_bucket, src_key)
        check(source)
        rng = _parse_copy_range(src_range, source.size)
        read = await self.reads.get_object(src_bucket, src_key, RangeRequest.span(*rng) if rng else WHOLE)
        expected = ExpectedDigests(declared_size=(rng[1] - rng[0] + 1) if rng else source.size)
        received = await self.receive(StreamBody(read.stream), expected, MAX_PUT_SIZE)
        result = await self._store_part(upload_id, number, received, bucket, key)
        return result.etag, datetime.now(UTC)

    async def list_parts(self, bucket: str, key: str, upload_id: str, marker: int, max_parts: int
                         ) -> tuple[UploadInfo, list[PartInfo], bool]:
        info, headers = await self._upload(bucket, key, upload_id)
        if headers.get("checksum_type"):
            info = dataclasses.replace(info, checksum_type=str(headers["checksum_type"]))
        rows = await self._run(self.catalog.parts, upload_id, marker, max_parts + 1)
        parts = [p for p, _ in rows]
        return info, parts[:max_parts], len(parts) > max_parts

    async def list_uploads(self, bucket: str, prefix: str, key_marker: str | None, max_uploads: int
                           ) -> tuple[list[UploadInfo], bool]:
        await self.buckets.head_bucket(bucket)
        rows = await self._run(self.catalog.list_uploads, bucket, prefix, key_marker, max_uploads + 1)
        return rows[:max_uploads], len(rows) > max_uploads

    async def abort_upload(self, bucket: str, key: str, upload_id: str) -> None:
        await self._upload(bucket, key, upload_id)
        await settled_remote_upload(self.catalog, self._run, upload_id)  # its opener's id, to abort here
        held = await part_gather.holders(self.core, upload_id)
        try:
            blobs, remote_id = await self._run(self.catalog.abort_upload, upload_id, self.blobs.intend_drop)
        except UploadNotOpen as exc:  # a Complete claimed it meanwhile
            raise _not_open(exc.state, upload_id) from None

        for blob in blobs:  # an id of another node's disk is not found here: harmless
            await self._run(self.blobs.delete, blob)
        part_gather.drop_elsewhere(self.core, held)  # parts other nodes took
        if remote_id is not None:
            await self._run(self.part_copies.settle_before_abort, remote_id)
            await self._run(self.remote.abort_multipart, bucket, key, remote_id)

    async def complete_upload(self, bucket: str, key: str, upload_id: str,
                              requested: list[tuple[int, str, dict[str, str]]],
                              conditions: WriteConditions = NO_WRITE_CONDITIONS) -> str:
        """Complete, answering the ETag (``complete_upload_result`` also gives the checksum)."""
        return (await self.complete_upload_result(bucket, key, upload_id, requested, conditions))[0]

    async def complete_upload_result(self, bucket: str, key: str, upload_id: str,
                                     requested: list[tuple[int, str, dict[str, str]]],
                                     conditions: WriteConditions = NO_WRITE_CONDITIONS
                                     ) -> tuple[str, dict[str, str]]:
        """One atomic claim of the upload: exactly one Complete commits the object from the parts
        it re-reads under the claim; a duplicate waits and answers the committed result."""
        with self.acks.held():
            return await self._complete_result(bucket, key, upload_id, requested, conditions)

    async def _complete_result(self, bucket: str, key: str, upload_id: str,
                               requested: list[tuple[int, str, dict[str, str]]],
                               conditions: WriteConditions) -> tuple[str, dict[str, str]]:
        mode = self._mode_for(bucket, key)
        token = secrets.token_hex(16)
        wait = CLAIM_POLL_SECONDS
        while True:
            outcome, found = await self._run(self.catalog.claim_complete, upload_id, bucket, key, token,
                                             mode.claim_seconds)
            if outcome == "completed":
                assert isinstance(found, CompletedUpload)
                return _repeated(found, bucket, key, upload_id, requested), dict(found.checksums or {})
            if outcome == "gone":
                raise S3Error("NoSuchUpload", UploadId=upload_id)
            if outcome == "busy":  # another Complete holds the claim: wait for its result
                await asyncio.sleep(wait)
                wait = min(1.0, wait * 2)
                continue
            assert isinstance(found, tuple)
            try:
                async with self.holds.hold(bucket, key, conditions, mode.claim_seconds) as hold:
                    done = await self._complete_claimed(bucket, key, upload_id, requested, found, token, mode)
                    hold.result = done[0]
                    return done
            except ClaimLost:
                continue  # our lease ran out and another Complete took over: answer its result
            except BaseException:
                await self._run(self.catalog.release_claim, upload_id, token)
                raise

    async def _complete_claimed(self, bucket: str, key: str, upload_id: str,
                                requested: list[tuple[int, str, dict[str, str]]],
                                found: tuple[UploadInfo, dict[str, Any]], token: str, mode: WriteMode
                                ) -> tuple[str, dict[str, str]]:
        """Validate the part list against the parts as they are now, gather those held by other
        nodes onto this disk, then commit the object (write-back: its journal row; write-through:
        the remote upload) under the claim."""
        info, headers = found
        stored = {p.part_number: (p, blob) for p, blob in await self._run(self.catalog.parts, upload_id)}
        chosen = _choose_parts(key, requested, stored, self.remote.profile(bucket))
        gathered = await part_gather.gather(self.core, upload_id, chosen)
        try:
            done = await self._commit_gathered(bucket, key, upload_id, info, headers, gathered, token, mode)
        except BaseException:
            await part_gather.drop_pulled(self.core, gathered)
            raise
        part_gather.drop_elsewhere(self.core, gathered)
        return done

    async def _commit_gathered(self, bucket: str, key: str, upload_id: str, info: UploadInfo,
                               headers: dict[str, Any], gathered: part_gather.Gathered, token: str,
                               mode: WriteMode) -> tuple[str, dict[str, str]]:
        chosen = gathered.parts
        etag = multipart_etag([p.etag for p, _ in chosen])
        content = dict(headers.get("content", {}))
        metadata = dict(headers.get("metadata", {}))
        pieces = [BlobRef(blob, p.size, p.etag, p.checksums, p.part_number) for p, blob in chosen]
        size = sum(p.size for p in pieces)
        checksums = multipart_checksum(info.checksum_algorithm, str(headers.get("checksum_type") or ""), pieces)
        claim = UploadClaim(upload_id, token, CompletedUpload(
            bucket, key, etag, [(p.part_number, p.etag) for p, _ in chosen], dict(checksums)))
        if await mode.journals(bucket, key):
            # Not waiting on the remote: an eager copy still opening the remote upload after a
            # moment is struck off (its late id is aborted) and the destage opens one itself.
            remote_id = await settled_remote_upload(self.catalog, self._run, upload_id, BUFFERED_COMPLETE_WAIT)
            # The parts become the object's blobs: no byte is copied again (here; a replica is a copy).
            replica = await self._replicate(bucket, key, pieces)
            unused = sorted(gathered.here - {p.blob for p in pieces})  # parts uploaded, not completed
            self.blobs.intend_drop(unused)
            draft = VersionDraft(bucket, key, size, etag, pieces, content, metadata, checksums, info.tenant_id,
                                 multipart=True, checksum_algorithm=info.checksum_algorithm, remote_upload_id=remote_id)
            row = await self._run(self._commit_completed, draft, claim, replica)
            part_gather.settle_pulled(self.core, gathered)
            for blob in unused:
                await self._run(self.blobs.delete, blob)
            await mode.hand_on(row)
            return etag, checksums
        remote_id = await settled_remote_upload(self.catalog, self._run, upload_id)
        spec = UploadSpec(bucket, key, size, etag, pieces, True, content, metadata, checksums,
                          info.checksum_algorithm, remote_id)
        await self._run(upload, self.remote, self.blobs, spec, self.part_concurrency)
        self.blobs.intend_drop(sorted(gathered.here))
        await self._run(self.catalog.finish_upload, claim)
        for blob in gathered.here | set(gathered.pulled):
            await self._run(self.blobs.delete, blob)
        gathered.pulled.clear()
        await self._written(bucket, key)
        return etag, checksums

    def _commit_completed(self, draft: VersionDraft, claim: UploadClaim, replica: Replica | None) -> VersionRow:
        """A buffered Complete's one commit: the claimed upload becomes its result (or nothing
        commits: ClaimLost), the key's cached copies are invalidated, the object's row added
        with its parts as blobs, and the record of its replica."""
        with self.journal.units.begin() as work:
            work.uploads.finish(claim)
            work.cache.invalidate(draft.bucket, draft.key)
            row = work.journal.put(draft)
            if replica is not None:
                work.replicas.add(row, replica)
            return row

    async def open_held_part(self, upload_id: str, number: int, blob: str
                             ) -> tuple[int, AsyncIterator[bytes]] | None:
        """The internal endpoint: a part this node holds, for a Complete on another node."""
        return await part_gather.open_held_part(self.core, upload_id, number, blob)

    async def drop_held_parts(self, blobs: list[str]) -> int:
        """The internal endpoint: part blobs of an upload another node completed or aborted."""
        return await part_gather.drop_held_parts(self.core, blobs)


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
                  stored: dict[int, tuple[PartInfo, str]], profile: RemoteProfile) -> list[tuple[PartInfo, str]]:
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
    validate_object_size(key, sum(p.size for p, _ in chosen), profile)
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




def multipart_checksum(algorithm: str | None, checksum_type: str, pieces: list[BlobRef]) -> dict[str, str]:
    """The object's checksum as its upload's ChecksumType asks: FULL_OBJECT combines the part
    CRCs into the CRC of the whole object (no byte read again); COMPOSITE is ``<b64>-N``."""
    if checksum_type != FULL_OBJECT:
        return composite_checksum(algorithm, pieces)
    if not algorithm or not pieces or any(algorithm not in p.checksums for p in pieces):
        return {}
    return {algorithm: full_object(algorithm, [(p.checksums[algorithm], p.size) for p in pieces])}


def composite_checksum(algorithm: str | None, pieces: list[BlobRef]) -> dict[str, str]:
    """S3's checksum of a multipart object: the checksum of the parts' checksums, then ``-N``."""
    if not algorithm or not pieces or any(algorithm not in p.checksums for p in pieces):
        return {}
    from app.domain.checksums import new_checksum

    combined = new_checksum(algorithm)
    for piece in pieces:
        combined.update(base64.b64decode(piece.checksums[algorithm]))
    return {algorithm: f"{combined.b64digest()}-{len(pieces)}"}
