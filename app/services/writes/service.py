"""Writes: put, copy and delete, into the journal (write-back) or to the remote (write-through)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from app.domain.conditions import NO_WRITE_CONDITIONS, WriteConditions
from app.domain.errors import S3Error
from app.domain.objects import (
    ObjectMeta,
)
from app.domain.states import VersionState
from app.domain.versions import INLINE_BLOB, BlobRef, Replica, SourceChanged, VersionDraft, VersionRow
from app.services.bodies import (
    MAX_PUT_SIZE,
    BodyStream,
    ExpectedDigests,
    PutResult,
    ReceivedBody,
    StreamBody,
)
from app.services.core import GatewayCore
from app.services.reads.service import ReadsService
from app.services.writes.key_holds import KeyHolds
from app.services.writes.modes import WriteMode

PENDING_STATES = frozenset({VersionState.BUFFERED, VersionState.DESTAGING, VersionState.FAILED})


class WritesService:
    """PutObject, CopyObject, DeleteObject(s)."""

    def __init__(self, core: GatewayCore, reads: ReadsService, holds: KeyHolds) -> None:
        self.acks = core.acks
        self.admission = core.admission
        self.blobs = core.blobs
        self.inline_max = core.inline_max
        self.journal = core.journal
        self.peers = core.peers
        self.remote = core.remote
        self._check_content = core.check_content
        self._check_key = core.check_key
        self._check_size = core.check_size
        self._mode_for = core.mode_for
        self._replicate = core.replicate
        self._run = core.run
        self._written = core.written
        self.policy = core.policy
        self.receive = core.receive
        self.reads = reads
        self.holds = holds

    async def put_object(self, bucket: str, key: str, body: BodyStream, content_headers: dict[str, str],
                         metadata: dict[str, str], expected: ExpectedDigests,
                         conditions: WriteConditions = NO_WRITE_CONDITIONS, tenant_id: int | None = None) -> PutResult:
        """``tenant_id``: whose write it is (the authenticated key's tenant), kept on its journal row."""
        self._check_key(bucket, key)
        self._check_content(bucket, content_headers)
        await self._check_folder_marker(bucket, key)
        with self.acks.held():
            return await self._put(bucket, key, body, content_headers, metadata, expected, conditions, tenant_id)

    async def _check_folder_marker(self, bucket: str, key: str) -> None:
        """A folder marker ``a/`` over a file ``a``: SeaweedFS refuses it (409 ExistingObjectIsFile,
        measured), so it is refused here before a write-back write is acknowledged. The file is a
        pending row of the journal or, without one, the remote's object; a remote that does not
        answer cannot say, and the write goes on."""
        if not key.endswith("/") or len(key) < 2 or not self.remote.profile(bucket).empty_folders:
            return
        parent = key[:-1]
        newest = await self._run(self.journal.newest, bucket, parent)
        if newest is not None and newest.state in PENDING_STATES:
            exists = not newest.is_delete
        else:
            try:
                exists = await self._run(self.remote.current_etag, bucket, parent) is not None
            except S3Error as err:
                if err.status < 500:
                    raise
                return
        if exists:
            raise S3Error("ExistingObjectIsFile", Key=key, BucketName=bucket)

    async def _put(self, bucket: str, key: str, body: BodyStream, content_headers: dict[str, str],
                   metadata: dict[str, str], expected: ExpectedDigests, conditions: WriteConditions,
                   tenant_id: int | None) -> PutResult:
        mode = self._mode_for(bucket, key)
        await mode.admit(bucket)
        reserved = await mode.reserve(expected.declared_size)
        try:
            received = await self.receive(body, expected, MAX_PUT_SIZE)
        finally:
            self.admission.release(reserved)
        try:
            self._check_size(bucket, key, received.staging.size)
            async with self.holds.hold(bucket, key, conditions, mode.claim_seconds,
                                       received.digests.md5_hex()) as hold:
                if hold.repeat is not None:  # the retry of the write that made this version
                    await self._run(self.blobs.discard, received.staging)
                    return PutResult(hold.repeat, received.checksums)
                result = await self._put_received(bucket, key, received, content_headers, metadata, mode,
                                                  hold.fence() if conditions.any else {}, tenant_id)
                hold.result = result.etag
                return result
        except BaseException:
            await self._run(self.blobs.discard, received.staging)
            raise

    async def _put_received(self, bucket: str, key: str, received: ReceivedBody, content_headers: dict[str, str],
                            metadata: dict[str, str], mode: WriteMode, fence: dict[str, str],
                            tenant_id: int | None = None) -> PutResult:
        """Write a received body: its journal row, or (write-through) the remote object."""
        # Asked once the body is here, right before it is written: a row buffered while it
        # arrived (the mode turned write-back meanwhile) is older than this write.
        if await mode.journals(bucket, key):
            row = await self._journal_put(bucket, key, received, content_headers, metadata, tenant_id)
            await mode.hand_on(row)
            return PutResult(row.etag, received.checksums)
        if fence and not await self._run(self.remote.conditional_writes, bucket):
            fence = {}
        try:
            etag = await self._run(self._upload_file, bucket, key, received, content_headers, metadata, fence)
        finally:
            await self._run(self.blobs.discard, received.staging)
        await self._written(bucket, key)
        return PutResult(etag, received.checksums)

    async def _journal_put(self, bucket: str, key: str, received: ReceivedBody, content_headers: dict[str, str],
                           metadata: dict[str, str], tenant_id: int | None = None) -> VersionRow:
        """fsync the body into the store and commit its journal row; the caller hands the row on
        to the destage (its write mode's ``hand_on``)."""
        size, md5 = received.staging.size, received.digests.md5_hex()

        def commit(piece: BlobRef | None, replica: Replica | None) -> VersionRow:
            """One thread hop for both fsyncs (body, then journal) when nothing is replicated."""
            piece = piece or BlobRef(self.blobs.commit(received.staging), size, md5, received.checksums)
            try:
                row = self._commit_put(VersionDraft(
                    bucket, key, piece.size, piece.etag, [piece], content_headers, metadata, received.checksums,
                    tenant_id), replica)
            except BaseException:
                self.blobs.delete(piece.blob)
                raise
            self.blobs.settle(piece.blob)  # a committed row holds it: no longer crash garbage
            return row

        if self._inlines(bucket, key, received):
            row = await self._run(self._journal_inline, bucket, key, received, content_headers, metadata, tenant_id)
        elif self.peers is not None and self.policy(bucket, key).write_replicas > 1:
            piece = BlobRef(await self._run(self.blobs.commit, received.staging), size, md5, received.checksums)
            try:
                replica = await self._replicate(bucket, key, [piece])
            except BaseException:
                await self._run(self.blobs.delete, piece.blob)
                raise
            row = await self._run(commit, piece, replica)
        else:
            row = await self._run(commit, None, None)
        self.admission.added(row.size)  # until the next re-read, count what this process added
        return row

    def _commit_put(self, draft: VersionDraft, replica: Replica | None = None) -> VersionRow:
        """The write's one commit: the key's cached copies invalidated, its row, and the record
        of its replica (a replicated write never exists without its copy)."""
        with self.journal.units.begin() as work:
            work.cache.invalidate(draft.bucket, draft.key)
            row = work.journal.put(draft)
            if replica is not None:
                work.replicas.add(row, replica)
            return row

    def _inlines(self, bucket: str, key: str, received: ReceivedBody) -> bool:
        """Whether the body goes into its journal row: small, held in memory, and no other
        node needs a file of it (a replicated write sends its blob to a peer)."""
        return (self.inline_max > 0 and received.data is not None and len(received.data) <= self.inline_max
                and (self.peers is None or self.policy(bucket, key).write_replicas <= 1))

    def _journal_inline(self, bucket: str, key: str, received: ReceivedBody, content_headers: dict[str, str],
                        metadata: dict[str, str], tenant_id: int | None) -> VersionRow:
        """Commit the row with the body in it: that commit (synchronous=FULL) is the write's one
        fsync; the staging file was never synced and is dropped either way."""
        assert received.data is not None
        piece = BlobRef(INLINE_BLOB, len(received.data), received.digests.md5_hex(), received.checksums)
        try:
            return self._commit_put(VersionDraft(
                bucket, key, piece.size, piece.etag, [piece], content_headers, metadata, received.checksums,
                tenant_id, inline=received.data))
        finally:
            self.blobs.discard(received.staging)

    def _upload_file(self, bucket: str, key: str, received: ReceivedBody, content_headers: dict[str, str],
                     metadata: dict[str, str], fence: dict[str, str]) -> str:
        with open(received.staging.path, "rb") as fh:
            etag = self.remote.put_object(bucket, key, fh, received.staging.size, received.digests.md5_b64(),
                                          content_headers, metadata, received.checksums, **fence)
        return etag or received.digests.md5_hex()

    async def copy_object(self, bucket: str, key: str, src_bucket: str, src_key: str, replace: bool,
                          content_headers: dict[str, str], metadata: dict[str, str],
                          check: Callable[[ObjectMeta], None],
                          conditions: WriteConditions = NO_WRITE_CONDITIONS,
                          tenant_id: int | None = None) -> tuple[str, datetime]:
        self._check_key(bucket, key)
        self._check_key(src_bucket, src_key)
        source = await self.reads.head_object(src_bucket, src_key)
        check(source)
        self._check_size(bucket, key, source.size)
        if src_bucket == bucket and src_key == key and not replace:
            raise S3Error("InvalidRequest", "This copy request is illegal because it is trying to copy an "
                          "object to itself without changing the object's metadata, storage class, "
                          "website redirect location or encryption attributes.")
        if source.size > MAX_PUT_SIZE:
            raise S3Error("InvalidRequest", "The specified copy source is larger than the maximum "
                          "allowable size for a copy source: 5368709120")
        if replace:
            self._check_content(bucket, content_headers)
        else:
            content_headers, metadata = dict(source.content_headers), dict(source.metadata)
        mode = self._mode_for(bucket, key)
        async with self.holds.hold(bucket, key, conditions, mode.claim_seconds) as hold:
            if await mode.journals(bucket, key):
                row = await self._copy_local(bucket, key, src_bucket, src_key, source, content_headers, metadata,
                                             tenant_id)
                await mode.hand_on(row)
                hold.result = row.etag
                return row.etag, row.created_at
            result = await self._run(self.remote.copy_object, bucket, key, src_bucket, src_key, replace,
                                     content_headers, metadata)
            hold.result = result[0]
        await self._written(bucket, key)
        return result

    async def _copy_local(self, bucket: str, key: str, src_bucket: str, src_key: str, source: ObjectMeta,
                          content_headers: dict[str, str], metadata: dict[str, str],
                          tenant_id: int | None) -> VersionRow:
        """A copy whose bytes go through the journal like any write, keeping key order (the
        caller hands the row on).

        A server-side copy on the remote could land before an older buffered write of the same
        key is destaged, which would then overwrite it; so the copy is staged locally instead.
        """
        received = await self._stage_copy(src_bucket, src_key, source)
        return await self._journal_put(bucket, key, received, content_headers, metadata, tenant_id)

    async def rename_object(self, bucket: str, key: str, src_key: str, check: Callable[[ObjectMeta], None],
                            conditions: WriteConditions = NO_WRITE_CONDITIONS,
                            tenant_id: int | None = None) -> None:
        """RenameObject within a bucket, as one journal commit (``_commit_renamed``): the
        new name and the old one's delete become visible together, to every reader of every
        node. Only where writes are journalled (write-back): a rename on the remote alone is a
        copy and a delete that readers would see apart, so write-through answers NotImplemented."""
        self._check_key(bucket, key)
        self._check_key(bucket, src_key)
        mode, src_mode = self._mode_for(bucket, key), self._mode_for(bucket, src_key)
        if not (await mode.journals(bucket, key) and await src_mode.journals(bucket, src_key)):
            raise S3Error("NotImplemented", "RenameObject needs write-back (journalled) writes on both keys.")
        if src_key == key:
            await self.reads.head_object(bucket, src_key)  # S3: a rename onto itself changes nothing
            return
        source_seq = await self._run(self.journal.newest_seq, bucket, src_key)
        try:
            source = await self.reads.head_object(bucket, src_key)
        except S3Error as err:
            if err.code == "NoSuchKey" and await self._run(self._was_renamed, bucket, key, src_key):
                return  # a retry of a rename that committed: its answer was lost
            raise
        check(source)
        async with self.holds.hold(bucket, key, conditions, mode.claim_seconds) as hold:
            received = await self._stage_copy(bucket, src_key, source)
            draft = self._draft(bucket, key, received, dict(source.content_headers), dict(source.metadata),
                                tenant_id)
            try:
                put, gone = await self._run(self._commit_rename, received, draft, src_key, source_seq)
            except SourceChanged as exc:
                raise S3Error("OperationAborted", str(exc)) from exc
            hold.result = put.etag
        self.admission.added(put.size)
        await mode.hand_on(put)
        await src_mode.hand_on(gone)

    def _was_renamed(self, bucket: str, key: str, src_key: str) -> bool:
        newest = self.journal.newest(bucket, key)
        return newest is not None and newest.renamed_from == src_key

    def _draft(self, bucket: str, key: str, received: ReceivedBody, content_headers: dict[str, str],
               metadata: dict[str, str], tenant_id: int | None) -> VersionDraft:
        piece = BlobRef("", received.staging.size, received.digests.md5_hex(), received.checksums)
        return VersionDraft(bucket, key, piece.size, piece.etag, [piece], content_headers, metadata,
                            received.checksums, tenant_id)

    def _commit_rename(self, received: ReceivedBody, draft: VersionDraft, src_key: str,
                       source_seq: int | None) -> tuple[VersionRow, VersionRow]:
        """fsync the staged bytes into the store, then the one commit of both rows."""
        piece = BlobRef(self.blobs.commit(received.staging), draft.size, draft.etag, draft.checksums)
        try:
            rows = self._commit_renamed(replace(draft, blobs=[piece], renamed_from=src_key), src_key, source_seq)
        except BaseException:
            self.blobs.delete(piece.blob)
            raise
        self.blobs.settle(piece.blob)
        return rows

    def _commit_renamed(self, draft: VersionDraft, src_key: str,
                        source_seq: int | None) -> tuple[VersionRow, VersionRow]:
        """One commit of both rows: the draft (the source's bytes, staged anew) under its new
        key and a delete of ``src_key``, both keys' cached copies invalidated, so every reader
        sees the old name or the new one, never neither. The delete names the put
        (``after_seq``): its destage waits for the put's, so the remote never lacks both.
        ``source_seq``: the source's newest row when it was read; a newer one means the source
        changed meanwhile, and nothing commits (SourceChanged)."""
        with self.journal.units.begin() as work:
            work.cache.invalidate(draft.bucket, src_key)  # the source's entries locked first
            if work.journal.newest_seq(draft.bucket, src_key) != source_seq:
                raise SourceChanged(f"{draft.bucket}/{src_key} changed while it was renamed")
            work.cache.invalidate(draft.bucket, draft.key)
            put = work.journal.put(draft)
            return put, work.journal.delete(draft.bucket, src_key, draft.tenant_id, after_seq=put.seq)

    async def _stage_copy(self, src_bucket: str, src_key: str, source: ObjectMeta) -> ReceivedBody:
        """The source's bytes, read through the gateway (cache, journal, fleet or remote) into a
        staging file; refused if they are not the version ``source`` describes."""
        reserved = await self.admission.reserve(source.size)
        try:
            read = await self.reads.get_object(src_bucket, src_key)
            received = await self.receive(StreamBody(read.stream), ExpectedDigests(declared_size=source.size), MAX_PUT_SIZE)
        finally:
            self.admission.release(reserved)
        if "-" not in source.etag and received.digests.md5_hex() != source.etag:
            await self._run(self.blobs.discard, received.staging)
            raise S3Error("InternalError", "the copy source changed while it was read")
        return received

    async def _journal_delete(self, bucket: str, key: str, tenant_id: int | None) -> VersionRow:
        return await self._run(self._commit_delete, bucket, key, tenant_id)

    def _commit_delete(self, bucket: str, key: str, tenant_id: int | None) -> VersionRow:
        """A delete's one commit: the key's cached copies invalidated and its row."""
        with self.journal.units.begin() as work:
            work.cache.invalidate(bucket, key)
            return work.journal.delete(bucket, key, tenant_id)

    async def delete_object(self, bucket: str, key: str, tenant_id: int | None = None) -> None:
        self._check_key(bucket, key)
        mode = self._mode_for(bucket, key)
        await mode.admit(bucket)
        if await mode.journals(bucket, key):
            await mode.hand_on(await self._journal_delete(bucket, key, tenant_id))
            return
        await self._run(self.remote.delete_object, bucket, key)
        await self._written(bucket, key)

    async def delete_objects(self, bucket: str, keys: list[str],
                             tenant_id: int | None = None) -> dict[str, tuple[str, str]]:
        failures: dict[str, tuple[str, str]] = {}
        valid: list[str] = []
        for key in keys:
            try:
                self._check_key(bucket, key)
                valid.append(key)
            except S3Error as err:
                failures[key] = (err.code, err.message)
        routed: list[tuple[str, WriteMode]] = []
        for key in valid:
            try:
                routed.append((key, self._mode_for(bucket, key)))
            except S3Error as err:
                failures[key] = (err.code, err.message)
        for mode in {id(m): m for _, m in routed}.values():  # each mode admits the bucket once
            await mode.admit(bucket)
        direct: list[str] = []
        for key, mode in routed:
            if await mode.journals(bucket, key):
                await mode.hand_on(await self._journal_delete(bucket, key, tenant_id))
            else:
                direct.append(key)
        if direct:
            failures.update(await self._run(self.remote.delete_objects, bucket, direct))
        for key in direct:
            if key not in failures:
                await self._written(bucket, key)
        return failures
