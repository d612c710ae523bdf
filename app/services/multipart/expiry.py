"""Expiry of abandoned multipart uploads (S3's AbortIncompleteMultipartUpload, node-wide).

An upload never completed holds its parts on this node's disk and in the write buffer, and
possibly a remote multipart upload started by eager part copies. After ``FERRY_MULTIPART_EXPIRY``
seconds the sweep aborts it as a client's Abort would: the same CAS on ``open`` (an upload being
completed is left alone), then its blobs and the remote upload go. Kept Complete results are
forgotten after ``COMPLETED_RETENTION``. Only this node's uploads: their parts are on its disk.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol

from app.domain.objects import UploadInfo
from app.domain.uploads import UploadNotOpen
from app.services.multipart.part_copies import PartCopies
from app.services.ports import BlobPort, RemotePort

log = logging.getLogger("ferry.uploads")

OPENER_WAIT_SECONDS = 35.0  # an opener's lease (app/services/multipart/eager_open.py) and a little more
COMPLETED_RETENTION = 24 * 3600.0  # how long a repeated Complete still gets the committed answer


class ExpiringUploads(Protocol):
    """What expiry needs of the catalog's uploads (``adapters/catalog/repo.Catalog``)."""

    def expired_uploads(self, initiated_before: datetime) -> list[str]: ...
    def get_upload(self, upload_id: str) -> tuple[UploadInfo, dict[str, object]] | None: ...
    def abort_upload(self, upload_id: str, intend_drop: Callable[[list[str]], None] | None = None
                     ) -> tuple[list[str], str | None]: ...
    def settled_remote_upload(self, upload_id: str) -> tuple[bool, str | None]: ...
    def forget_completed(self, completed_before: datetime) -> int: ...
    def forget_key_claims(self, done_before: float) -> int: ...


class RunOutClaims(Protocol):
    """Part copy claims (``adapters/catalog/uploads/part_claims.PartClaims``) whose holder died."""

    def forget_run_out(self, ended_before: float) -> int: ...


@dataclass(slots=True)
class UploadExpiry:
    catalog: ExpiringUploads
    blobs: BlobPort
    remote: RemotePort
    max_age: float
    retention: float = COMPLETED_RETENTION
    part_claims: RunOutClaims | None = None
    part_copies: PartCopies | None = None  # parts being sent, waited for before a remote abort
    _next_run: float = field(default=0.0, init=False)

    def sweep(self) -> int:
        """Abort this node's uploads older than ``max_age``; returns how many were aborted.
        Called on every journal sweep, it looks at the catalog at most every ``max_age / 4``
        seconds (at most every minute): expiry needs no finer clock."""
        if time.monotonic() < self._next_run:
            return 0
        self._next_run = time.monotonic() + min(60.0, self.max_age / 4)
        now = datetime.now(UTC)
        aborted = 0
        for upload_id in self.catalog.expired_uploads(now - timedelta(seconds=self.max_age)):
            found = self.catalog.get_upload(upload_id)
            self._wait_for_opener(upload_id)  # as a client's Abort does: its remote upload is aborted here
            try:
                blobs, remote_id = self.catalog.abort_upload(upload_id, self.blobs.intend_drop)
            except UploadNotOpen:
                continue  # completed or aborted meanwhile
            for blob in blobs:
                self.blobs.delete(blob)
            if remote_id is not None and found is not None:
                if self.part_copies is not None:
                    self.part_copies.settle_before_abort(remote_id)
                try:
                    self.remote.abort_multipart(found[0].bucket, found[0].key, remote_id)
                except Exception as exc:  # the remote's own lifecycle rules are the backstop
                    log.warning("aborting remote upload %s of expired upload %s failed: %s",
                                remote_id, upload_id, exc)
            aborted += 1
            log.info("expired multipart upload %s", upload_id)
        self.catalog.forget_completed(now - timedelta(seconds=self.retention))
        self.catalog.forget_key_claims(time.time() - self.retention)  # conditional writes' results
        if self.part_claims is not None:  # a lease that ended an hour ago: its holder is long gone
            self.part_claims.forget_run_out(time.time() - 3600)
        return aborted

    def _wait_for_opener(self, upload_id: str) -> None:
        """Until no eager copy is opening the upload's remote upload (at most its lease): the id
        is then recorded and aborted below, instead of by its opener some time after the sweep."""
        deadline = time.monotonic() + OPENER_WAIT_SECONDS
        while not self.catalog.settled_remote_upload(upload_id)[0] and time.monotonic() < deadline:
            time.sleep(0.05)
