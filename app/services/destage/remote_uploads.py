"""The sweep of leaked remote multipart uploads.

Eager part copies start a remote multipart upload on an upload's first part; Complete's destage,
a client's Abort, the expiry, DeleteBucket and a superseded row finish or abort it. What can
still leak is an upload whose owner vanished without a word: a crash between the remote's
CreateMultipartUpload and the catalog recording its id, a destage that gave up (``failed``),
an abort that the remote did not answer. Incomplete uploads are billed on AWS, so this sweep
lists the remote's uploads in progress (ListMultipartUploads, every bucket of the remote) and
aborts those that no catalog upload or dirty journal row owns, once they are older than the
grace period (a younger one may be a copy whose id is being recorded right now).

It assumes the remote's buckets are Ferry's: a multipart upload that another client runs
directly on the remote for longer than the grace period would be aborted too. Set the interval
to 0 to turn the sweep off on such a remote.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol

from app.domain.errors import S3Error
from app.services.ports import RemoteBuckets, RemoteMultipart

log = logging.getLogger("ferry.uploads")


class OwnedUploads(Protocol):
    def owned(self) -> set[str]: ...


class SweptRemote(RemoteBuckets, RemoteMultipart, Protocol):
    """What the sweep needs of the remote."""


@dataclass(slots=True)
class RemoteUploadSweep:
    owners: OwnedUploads
    remote: SweptRemote
    interval: float  # seconds between sweeps; 0: never
    grace: float  # an unowned upload younger than this is left alone
    _next_run: float = field(default=0.0, init=False)

    def sweep(self) -> int:
        """The one entry point (a chore of the sweeper, or a task): at most once per interval,
        abort every unowned remote upload older than the grace; returns how many."""
        if self.interval <= 0 or time.monotonic() < self._next_run:
            return 0
        self._next_run = time.monotonic() + self.interval
        return self.sweep_now()

    def sweep_now(self) -> int:
        cutoff = datetime.now(UTC) - timedelta(seconds=self.grace)
        aborted = 0
        for bucket in [b.name for b in self.remote.list_buckets()]:
            try:
                uploads = self.remote.list_multipart(bucket)
            except S3Error as exc:  # deleted meanwhile, or the remote does not list uploads
                log.info("listing the remote uploads of %s failed: %s", bucket, exc)
                continue
            if not uploads:
                continue
            owned = self.owners.owned()  # read after the listing: an id recorded meanwhile is seen
            for key, upload_id, initiated in uploads:
                when = initiated if initiated.tzinfo else initiated.replace(tzinfo=UTC)
                if upload_id in owned or when > cutoff:
                    continue
                self.remote.abort_multipart(bucket, key, upload_id)
                aborted += 1
                log.info("aborted remote upload %s of %s/%s that no upload or journal row owns",
                         upload_id, bucket, key)
        return aborted
