"""Parts being sent to a remote multipart upload, so that no part is sent twice at once.

When a client completes a multipart upload, its last parts may still be on their way to the
remote upload (eager part copies). A destage that listed the remote's parts at that moment
would send those parts a second time, in parallel, halving the link for both. Two layers:

- in this process, a count per object key (``started``/``finished``/``wait_idle``);
- across processes (``ferry serve --workers N``, Celery), a claim per (remote upload, part)
  in the catalog (``PartClaimStore``) under a short lease renewed while the body is sent: an
  eager copy sends only a part nobody else is sending, the destage waits for every live claim
  of its upload before listing the remote's parts and claims each part it sends. A worker
  killed mid-copy stops renewing; its claim runs out and the part is sent by the destage.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import threading
import time
from collections.abc import Iterator
from typing import Protocol

from app.domain.fencing import Lease

log = logging.getLogger("ferry.destage")

PART_LEASE_SECONDS = 10.0  # a killed copier's part is sent by the destage at most this much later
# How long an Abort (a client's, the expiry's, DeleteBucket's) waits for parts still being sent
# to the remote upload it is about to abort; a part that lands after the abort would, on
# SeaweedFS, be kept under the bucket (and bring a deleted bucket back).
ABORT_WAIT_SECONDS = 60.0


class PartClaimStore(Protocol):
    def claim_part(self, remote_id: str, number: int, token: str, lease_seconds: float) -> bool: ...
    def renew_part(self, remote_id: str, number: int, token: str, lease_seconds: float) -> bool: ...
    def release_part(self, remote_id: str, number: int, token: str) -> None: ...
    def live_parts(self, remote_id: str) -> set[int]: ...
    def forget_parts(self, remote_id: str) -> None: ...


class PartCopies:
    def __init__(self, claims: PartClaimStore | None = None, lease_seconds: float = PART_LEASE_SECONDS) -> None:
        self._pending: dict[tuple[str, str], int] = {}
        self._changed = threading.Condition()
        self.claims = claims
        self.lease_seconds = lease_seconds

    def started(self, bucket: str, key: str) -> None:
        with self._changed:
            self._pending[(bucket, key)] = self._pending.get((bucket, key), 0) + 1

    def finished(self, bucket: str, key: str) -> None:
        with self._changed:
            left = self._pending.get((bucket, key), 1) - 1
            if left > 0:
                self._pending[(bucket, key)] = left
            else:
                self._pending.pop((bucket, key), None)
            self._changed.notify_all()

    def wait_idle(self, bucket: str, key: str, timeout: float) -> bool:
        """True once no copy of this key is pending (False: still some after ``timeout``)."""
        with self._changed:
            return self._changed.wait_for(lambda: (bucket, key) not in self._pending, timeout)

    def wait_others(self, remote_id: str, timeout: float) -> bool:
        """Wait until no live claim holds a part of this remote upload (any process)."""
        if self.claims is None:
            return True
        deadline = time.monotonic() + timeout
        pause = 0.05
        while self.claims.live_parts(remote_id):
            if time.monotonic() >= deadline:
                return False
            time.sleep(pause)
            pause = min(0.5, pause * 2)
        return True

    def settle_before_abort(self, remote_id: str, timeout: float = ABORT_WAIT_SECONDS) -> None:
        """Before the remote upload is aborted (its catalog row already gone): wait for the parts
        being sent into it. A copier claims its part before it checks that the upload is still
        there (``PartsAhead``), so one that got past the check holds a claim seen here."""
        if not self.wait_others(remote_id, timeout):
            log.warning("parts of remote upload %s still being sent after %s s; aborting it anyway",
                        remote_id, timeout)

    @contextlib.contextmanager
    def sending(self, remote_id: str, number: int) -> Iterator[Lease | None]:
        """The part's claim while its body is sent (None: another sender holds it). The lease
        bounds the body (``Lease.bound``): once it cannot be renewed, nothing more is sent."""
        if self.claims is None:
            yield Lease(lambda: True, float("inf"), what=f"part {number}")
            return
        token = secrets.token_hex(16)
        started = time.monotonic()
        if not self.claims.claim_part(remote_id, number, token, self.lease_seconds):
            yield None
            return
        claims = self.claims
        lease = Lease(lambda: claims.renew_part(remote_id, number, token, self.lease_seconds),
                      self.lease_seconds, what=f"part {number} of remote upload {remote_id}", started=started)
        stop = threading.Event()
        renewer = threading.Thread(target=_renew, args=(lease, stop), daemon=True)
        renewer.start()
        try:
            yield lease
        finally:
            stop.set()
            renewer.join()
            try:
                claims.release_part(remote_id, number, token)
            except Exception:  # the lease runs out by itself
                log.warning("releasing the claim of part %s failed", number, exc_info=True)

    @contextlib.contextmanager
    def sending_after_others(self, remote_id: str, number: int, timeout: float
                             ) -> Iterator[tuple[Lease, bool]]:
        """The part's claim, waiting for another sender of it to finish first; the flag says
        whether one did (the caller then checks whether the remote holds the part now)."""
        deadline = time.monotonic() + timeout
        waited = False
        while True:
            with self.sending(remote_id, number) as lease:
                if lease is not None:
                    yield lease, waited
                    return
            if time.monotonic() >= deadline:
                raise TimeoutError(f"part {number} of remote upload {remote_id} stayed claimed for {timeout} s")
            waited = True
            time.sleep(0.1)

    def forget(self, remote_id: str) -> None:
        if self.claims is not None:
            with contextlib.suppress(Exception):
                self.claims.forget_parts(remote_id)


def _renew(lease: Lease, stop: threading.Event) -> None:
    while not stop.wait(lease.seconds / 3):
        try:
            if not lease.renew():
                return
        except Exception:  # a catalog blip: the lease may still be renewed before it runs out
            log.warning("renewing a part copy's claim failed", exc_info=True)
            if lease.expired():
                return


