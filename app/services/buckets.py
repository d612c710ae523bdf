"""Buckets: create, head, delete (settling buffered deletes first), list by tenant."""

from __future__ import annotations

import asyncio
import logging
import time

from app.domain.errors import S3Error
from app.domain.names import validate_bucket_name
from app.domain.objects import (
    BucketInfo,
)
from app.domain.uploads import UploadNotOpen
from app.services.core import GatewayCore
from app.services.multipart.eager_open import settled_remote_upload

log = logging.getLogger("ferry.buckets")

CREATE_RACE_SECONDS = 3.0  # how long a remote's NoSuchBucket to a racing CreateBucket is asked again
CREATE_RETRY_PAUSE = 0.05  # seconds, times the attempt number (at most 0.5)


class BucketsService:
    """Bucket operations."""

    def __init__(self, core: GatewayCore) -> None:
        self.blobs = core.blobs
        self.catalog = core.catalog
        self.destager = core.destager
        self.journal = core.journal
        self.known_buckets = core.known_buckets
        self.part_copies = core.part_copies
        self.policies = core.policies
        self.remote = core.remote
        self.tenancy = core.tenancy
        self._run = core.run

    async def list_buckets(self, tenant_id: int | None = None) -> list[BucketInfo]:
        """The remote's buckets that this tenant owns (all of them with shared tenancy)."""
        buckets = await self._run(self.remote.list_buckets)
        visible = await self.tenancy.visible(tenant_id, [b.name for b in buckets])
        return [b for b in buckets if b.name in visible]

    async def create_bucket(self, bucket: str, location: str | None, tenant_id: int | None = None) -> None:
        validate_bucket_name(bucket)
        fresh = True
        try:
            await self._create_on_remote(bucket, location)
        except S3Error as err:
            # us-east-1 semantics: re-creating a bucket you own succeeds.
            if err.code not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists") or (
                location not in (None, "us-east-1")
            ):
                raise
            await self._head_existing(bucket)
            fresh = False
        await self.tenancy.created(tenant_id, bucket, fresh=fresh)
        self.known_buckets.confirm(bucket)

    async def _create_on_remote(self, bucket: str, location: str | None) -> None:
        """The remote's CreateBucket. SeaweedFS answers NoSuchBucket to the losers of creates
        racing on one name (seen on a loaded machine, for seconds: its create reads the bucket
        back before the winner's is visible to it), never S3's answer to a create. Ferry's own
        catalog decides instead: once the winner has claimed the name, this create is a taken
        name's (BucketAlreadyExists, or a no-op if the claim is this tenant's); until then the
        remote is asked again, and one that keeps saying so gets S3's answer for a conflicting
        operation in progress (OperationAborted, which SDKs retry)."""
        deadline = time.monotonic() + CREATE_RACE_SECONDS
        attempt = 0
        while True:
            try:
                await self._run(self.remote.create_bucket, bucket, location)
                return
            except S3Error as err:
                if err.code != "NoSuchBucket":
                    raise
            attempt += 1
            log.info("the remote answered NoSuchBucket to CreateBucket %s (attempt %d)", bucket, attempt)
            if await self.tenancy.claimed(bucket):
                raise S3Error("BucketAlreadyExists", BucketName=bucket)  # create_bucket judges the owner
            if time.monotonic() >= deadline:
                raise S3Error("OperationAborted", BucketName=bucket)
            await asyncio.sleep(min(CREATE_RETRY_PAUSE * attempt, 0.5))

    async def _head_existing(self, bucket: str) -> None:
        """The remote just said the name exists: a HEAD that does not see it yet (another
        creator's bucket, not visible everywhere at once on a loaded remote) is not NoSuchBucket
        for this CreateBucket; the owner check that follows answers (BucketAlreadyExists)."""
        try:
            await self._run(self.remote.head_bucket, bucket)
        except S3Error as err:
            if err.code != "NoSuchBucket":
                raise

    async def head_bucket(self, bucket: str) -> None:
        await self._run(self.remote.head_bucket, bucket)
        self.known_buckets.confirm(bucket)

    async def delete_bucket(self, bucket: str) -> None:
        """S3's DeleteBucket: a bucket without objects is deleted with its multipart uploads in
        progress (each aborted as a client's Abort, with the remote upload its eager part copies
        started); any object, buffered or on the remote, is BucketNotEmpty and aborts nothing."""
        self.known_buckets.forget(bucket)
        await self._settle_pending_deletes(bucket)
        uploads = await self._run(self.catalog.list_uploads, bucket, "", None, 100_000)
        if uploads:
            page = await self._run(self.remote.list_objects, bucket, "", None, None, 1)
            if page.contents:
                raise S3Error("BucketNotEmpty", BucketName=bucket)
            for upload in uploads:
                await self._abort_for_bucket(bucket, upload.key, upload.upload_id)
        await self._run(self.remote.delete_bucket, bucket)
        await self.tenancy.deleted(bucket)  # its policies and staging jobs go with its owner
        self.policies.invalidate()  # other processes see the rules gone at their next refresh

    async def _abort_for_bucket(self, bucket: str, key: str, upload_id: str) -> None:
        """Abort one upload of a bucket being deleted; one being completed makes it not empty.
        A remote upload being opened is waited for, so it is aborted before the bucket goes."""
        await settled_remote_upload(self.catalog, self._run, upload_id)
        try:
            blobs, remote_id = await self._run(self.catalog.abort_upload, upload_id, self.blobs.intend_drop)
        except UploadNotOpen:
            raise S3Error("BucketNotEmpty", BucketName=bucket) from None
        for blob in blobs:  # parts held by another node's disk are not here: nothing to delete
            await self._run(self.blobs.delete, blob)
        if remote_id is not None:
            await self._run(self.part_copies.settle_before_abort, remote_id)
            try:
                await self._run(self.remote.abort_multipart, bucket, key, remote_id)
            except S3Error as err:
                if err.code not in ("NoSuchUpload", "NoSuchBucket"):
                    raise

    async def _settle_pending_deletes(self, bucket: str) -> None:
        """Before DeleteBucket: a bucket whose only buffered rows are deletes is empty once they
        reach the remote, so destage them now; a buffered put means BucketNotEmpty."""
        deadline = time.monotonic() + 30
        while True:
            rows = await self._run(self.journal.dirty_under, bucket, "", None, 1000)
            if not rows:
                return
            if any(not r.is_delete for r in rows) or time.monotonic() > deadline:
                raise S3Error("BucketNotEmpty", BucketName=bucket)
            for row in rows:
                await self._run(self.destager.destage, row.seq)
            await asyncio.sleep(0.1)

    async def bucket_location(self, bucket: str) -> str | None:
        return await self._run(self.remote.bucket_location, bucket)
