"""Eager part copies: an acknowledged part goes to the remote's multipart upload now, in the
background, so the remote holds most of the object when the client completes it and the destage
only sends what is missing. Best effort: a failure leaves the part to the destage.

The copies run in threads of lower priority (``BackgroundThreads``) and give way to writes being
acknowledged (``CopyAdmission``); ``PartCopies`` tells the destage which parts are on their way.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from typing import Any

from app.domain.objects import PartInfo
from app.services.destage.background import BackgroundThreads
from app.services.multipart.copy_admission import CopyAdmission
from app.services.multipart.eager_open import remote_upload_for_copy
from app.services.multipart.part_copies import PartCopies
from app.services.ports import BlobPort, RemotePort, UploadsPort

log = logging.getLogger("ferry.gateway")


class PartsAhead:
    def __init__(self, catalog: UploadsPort, blobs: BlobPort, remote: RemotePort, part_copies: PartCopies,
                 admission: CopyAdmission, threads: BackgroundThreads, *, enabled: bool,
                 takeover_grace: float) -> None:
        self.catalog = catalog
        self.blobs = blobs
        self.remote = remote
        self.part_copies = part_copies
        self.admission = admission
        self.threads = threads
        self.enabled = enabled
        # How long a request may still be at the remote once its sender's lease is over: an
        # eager opener's catalog lease covers it too (Settings.destage_takeover_grace).
        self.takeover_grace = takeover_grace
        self.tasks: set[asyncio.Future[Any]] = set()  # work nobody awaits: kept from the collector

    def spawn(self, work: Any) -> None:
        """Run ``work`` on the loop without anyone awaiting it."""
        task = asyncio.ensure_future(work)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def start(self, bucket: str, key: str, upload_id: str, part: PartInfo, blob: str) -> None:
        """Copy one acknowledged part to the remote upload now (if eager copies are on)."""
        if not self.enabled:
            return
        self.part_copies.started(bucket, key)
        self.spawn(self._copy(bucket, key, upload_id, part, blob))

    async def _copy(self, bucket: str, key: str, upload_id: str, part: PartInfo, blob: str) -> None:
        try:
            async with self.admission.slot(part.size):
                await self.threads.run(self._copy_sync, bucket, key, upload_id, part, blob)
        except Exception as exc:  # the destage sends this part instead
            log.info("copying part %s of %s/%s ahead failed: %s", part.part_number, bucket, key, exc)
        finally:
            self.part_copies.finished(bucket, key)

    def _copy_sync(self, bucket: str, key: str, upload_id: str, part: PartInfo, blob: str) -> None:
        remote_id = remote_upload_for_copy(self.catalog, self.remote, upload_id, bucket, key, self.takeover_grace)
        if remote_id is None:
            return  # completed or aborted meanwhile, or another copy is still opening it
        md5_b64 = base64.b64encode(bytes.fromhex(part.etag)).decode()
        try:
            fh = open(self.blobs.path(blob), "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            return  # replaced by a newer upload of the same part, or completed and destaged
        with fh, self.part_copies.sending(remote_id, part.part_number) as lease:
            if lease is None:
                return  # another worker is sending this part (a newer upload of it, or the destage)
            if self.catalog.remote_upload(upload_id) != remote_id:
                return  # aborted meanwhile: the aborter waits only for the claims it can see
            with lease.guard():
                self.remote.upload_part(bucket, key, remote_id, part.part_number, lease.bound(fh), part.size,
                                        md5_b64, part.checksums)
