"""Opening the remote multipart upload of a local upload, once (eager part copies).

The first part copied ahead opens the remote upload; the catalog records the opener before the
CreateMultipartUpload is sent (``RemoteOpenings``), so the copies of one upload never open two
remote uploads, and a Complete waits for a live opener before it reads the id it hands to the
destage. Every remote upload opened here is therefore either recorded (then completed by the
destage, or aborted by a client's Abort, the expiry, DeleteBucket or a superseding row) or
aborted by its opener when the record is refused. Only an opener whose record was lost in the
catalog (an outage between the two) leaves one to the sweep of unowned remote uploads.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from typing import Any

from app.domain.fencing import Lease
from app.services.ports import RemotePort, UploadsPort

log = logging.getLogger("ferry.gateway")

OPEN_LEASE_SECONDS = 30.0  # how long an opener may take to create and record the remote upload
WAIT_POLL_SECONDS = 0.05
# How long a buffered Complete waits for an opener's CreateMultipartUpload before going on
# without its id (issue 26: a hung remote held the Complete 19 s; a slow one answers in less).
BUFFERED_COMPLETE_WAIT = 1.0


def remote_upload_for_copy(catalog: UploadsPort, remote: RemotePort, upload_id: str, bucket: str, key: str,
                           grace: float, wait: float = OPEN_LEASE_SECONDS) -> str | None:
    """The remote upload to copy a part into: the recorded one, the one another copy is opening
    (waited for up to ``wait`` seconds), or one opened now. None: the part is left to the destage."""
    token = secrets.token_hex(16)
    deadline = time.monotonic() + wait
    while True:
        started = time.monotonic()
        outcome, remote_id = catalog.open_remote_upload(upload_id, token, OPEN_LEASE_SECONDS + grace, grace)
        if outcome == "have" or outcome == "gone":
            return remote_id
        if outcome == "mine":
            return _create(catalog, remote, upload_id, bucket, key, token, started)
        if time.monotonic() >= deadline:
            return None
        time.sleep(WAIT_POLL_SECONDS)


def _create(catalog: UploadsPort, remote: RemotePort, upload_id: str, bucket: str, key: str, token: str,
            started: float) -> str | None:
    """Create the remote upload under the opener's lease (no request or retry starts after it;
    the catalog's lease adds the takeover grace for the one in flight), then record it."""
    found = catalog.get_upload(upload_id)
    if found is None:
        catalog.drop_remote_opener(upload_id, token)
        return None
    info, headers = found
    lease = Lease(lambda: True, OPEN_LEASE_SECONDS, what=f"opening {bucket}/{key}", started=started)
    try:
        with lease.guard():
            created = remote.create_multipart(bucket, key, _dict(headers.get("content")),
                                              _dict(headers.get("metadata")), info.checksum_algorithm,
                                              str(headers.get("checksum_type") or "") or None)
    except BaseException:
        catalog.drop_remote_opener(upload_id, token)
        raise
    if catalog.opened_remote_upload(upload_id, token, created):
        return created
    # The upload ended meanwhile (completed without it, aborted, expired): nobody will use it.
    log.info("remote upload %s of %s/%s opened too late; aborting it", created, bucket, key)
    remote.abort_multipart(bucket, key, created)
    return None


async def settled_remote_upload(catalog: UploadsPort, run: Any, upload_id: str,
                                wait: float | None = None) -> str | None:
    """For a Complete holding its claim (no new opener can start): the remote upload id once no
    opener is live, so the destage reuses the only remote upload opened for this upload. With
    ``wait`` (a buffered Complete, which must not wait on the remote), an opener still at it
    after that many seconds is struck off: its late id is aborted, the destage opens its own."""
    deadline = None if wait is None else time.monotonic() + wait
    while True:
        settled, remote_id = await run(catalog.settled_remote_upload, upload_id)
        if settled:
            return remote_id
        if deadline is not None and time.monotonic() >= deadline:
            # The ignore: `run` (a thread hop) returns Any; take_remote_upload gives str | None.
            return await run(catalog.take_remote_upload, upload_id)
        await asyncio.sleep(WAIT_POLL_SECONDS)


def _dict(value: object) -> dict[str, str]:
    return dict(value) if isinstance(value, dict) else {}
