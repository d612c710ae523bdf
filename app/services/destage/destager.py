"""Destage: move one journaled write to the remote. One function for every executor.

``Destager.destage(seq)`` is idempotent and safe to run concurrently and repeatedly (a lost,
duplicated or retried message is harmless): it claims the row with a lease, skips rows that a
newer write of the same key supersedes, uploads with the original part boundaries, verifies
the remote ETag, and marks the row durable in a transaction guarded by its generation.
Blocking code: the embedded executor runs it in a thread, Celery in a worker process.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable

from app import metrics
from app.domain.errors import S3Error
from app.domain.fencing import Lease, LeaseLost
from app.domain.routing import RouteMoved, RouteStamp
from app.domain.states import DIRTY, VersionState, backoff_seconds
from app.domain.versions import BlobRef, VersionRow
from app.services.destage.upload import UploadSpec, delete, spec_of, upload
from app.services.multipart.part_copies import PartCopies
from app.services.ports import BlobPort, JournalPort, RemotePort, RoutedRemote

log = logging.getLogger("ferry.destage")

ROUTE_MOVES = 3  # uploads of one claim to a bucket remapped under it, before it is retried later
# Answers that refuse the request's signature or key, whatever the object: the remote's
# credentials are wrong for now, every row would fail alike.
CREDENTIAL_REFUSALS = frozenset({"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"})

__all__ = ["CREDENTIAL_REFUSALS", "Destager", "LeaseLost", "UploadSpec", "delete", "spec_of", "upload"]


class Destager:
    def __init__(self, journal: JournalPort, store: BlobPort, remote: RemotePort, *, lease_seconds: float = 30.0,
                 max_attempts: int = 12, part_concurrency: int = 8, backoff_base: float = 1.0,
                 backoff_cap: float = 300.0, on_outcome: Callable[[str, VersionRow], None] | None = None,
                 part_copies: PartCopies | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.journal = journal
        # Durability invalidates the key's cache entries in the same commit (see mark_durable).
        self.store = store
        self.remote = remote
        self.lease_seconds = lease_seconds
        self.max_attempts = max_attempts
        self.part_concurrency = part_concurrency
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.on_outcome = on_outcome
        self.part_copies = part_copies
        self.clock = clock  # the lease's (monotonic) clock; a fake one in tests

    def destage(self, seq: int) -> str:
        """Returns the outcome: durable, superseded, retry, failed, lost or skipped."""
        claimed_at = self.clock()
        row = self.journal.claim(seq, self.lease_seconds)
        if row is None:
            return "skipped"
        lease = self._lease(row, claimed_at)
        if self.journal.has_newer(row):
            if row.remote_upload_id:  # parts copied ahead for a version that will never be completed
                with lease.guard():
                    self.remote.abort_multipart(row.bucket, row.key, row.remote_upload_id)
            self._intend_drop(row)
            if self.journal.mark_superseded(row):
                self._drop_blobs(row)
            else:
                self._keep_blobs(row)
            return self._done("superseded", row)
        if row.after_seq is not None and self._put_pending(row.after_seq):
            # A rename's delete: the source goes from the remote only once the new name is there.
            self.journal.mark_retry(row, f"waits for seq {row.after_seq} (the rename's new name)",
                                    time.time() + 1.0, failed=False)
            return self._done("retry", row)
        for attempt in range(ROUTE_MOVES):
            outcome = self._send_and_mark(row, lease, fresh=attempt > 0)
            if outcome != "moved":
                return outcome
        return self._failed(row, RouteMoved(f"bucket {row.bucket!r} remapped {ROUTE_MOVES} times during its destage"))

    def _send_and_mark(self, row: VersionRow, lease: Lease, fresh: bool) -> str:
        """One upload to where the bucket maps now, then the durable commit, which refuses it
        ("moved") if the bucket was remapped meanwhile: then the caller sends it again."""
        remote, stamp = self._pin(row.bucket, fresh)
        lost = threading.Event()
        stop = threading.Event()
        renewer = threading.Thread(target=self._renew, args=(lease, row, stop, lost), daemon=True)
        renewer.start()
        try:
            # A worker that lost its lease (stalled past it) must not land an older version over a
            # newer one: multipart re-checks the lease at its commit point (Complete); a single
            # request is conditional on the remote's state read under the lease, where honoured.
            conditional = remote.conditional_writes(row.bucket)
            if row.is_delete:
                delete(remote, row.bucket, row.key, conditional, fence=lease)
                remote_etag = ""
            else:
                remote_etag = upload(remote, self.store, spec_of(row, self._inline(row)), self.part_concurrency,
                                     fence=lease, copies=self.part_copies, conditional=conditional,
                                     record=lambda upload_id: self.journal.record_remote_upload(row, upload_id))
        except Exception as exc:  # any failure: keep the bytes, retry later
            stop.set()
            renewer.join()
            return self._failed(row, exc)
        finally:
            stop.set()
        renewer.join()
        if lost.is_set():
            return self._lost_after_write(row)
        # row.generation is still the claim's: the CAS fails if the row was taken over meanwhile.
        self._intend_drop(row)
        # A row whose body is in the row drops no file after this move: losing it in a power cut
        # only sends the same bytes again, so it need not wait for an fsync (a kill -9 loses nothing).
        inline_only = bool(row.blobs) and not _files(row)
        try:
            durable = self.journal.mark_durable(row, remote_etag, None, invalidate_cache=True, relaxed=inline_only,
                                                route=stamp)
        except RouteMoved:
            self._keep_blobs(row)
            log.warning("seq %s (%s/%s): its bucket was remapped during the upload; sending it to the new remote",
                        row.seq, row.bucket, row.key)
            return "moved"
        if durable:
            self._drop_blobs(row)
            outcome = self._done("durable", row)
            if row.renamed_from is not None and (gone := self.journal.renamed_away(row)) is not None:
                self.destage(gone)  # the rename's delete was waiting for this upload
            return outcome
        self._keep_blobs(row)
        return self._lost_after_write(row)

    def _put_pending(self, seq: int) -> bool:
        put = self.journal.get(seq)
        return put is not None and put.state in DIRTY

    def _pin(self, bucket: str, fresh: bool) -> tuple[RemotePort, RouteStamp | None]:
        """The remote the whole upload goes to, and where that is (None: a remote without routing)."""
        if isinstance(self.remote, RoutedRemote):
            return self.remote.pinned(bucket, fresh)
        return self.remote, None

    def _lost_after_write(self, row: VersionRow) -> str:
        """The write reached the remote, but the row was no longer ours: whatever it replaced
        there, the key's newest row must be (re)sent, so it is made due now. A newest row that
        is already durable cannot be re-sent (its bytes are gone); with conditional writes the
        remote refused this one, so this can only happen on a remote without them."""
        newest = self.journal.newest(row.bucket, row.key)
        if newest is not None and newest.seq != row.seq:
            if newest.state is VersionState.BUFFERED:
                self.journal.make_due(newest.seq)
            elif newest.state is VersionState.DURABLE and not self.remote.conditional_writes(row.bucket):
                log.error("a destage of %s/%s (seq %s) that lost its lease may have landed after the newer "
                          "seq %s; rewrite the object", row.bucket, row.key, row.seq, newest.seq)
        return self._done("lost", row)

    def _lease(self, row: VersionRow, claimed_at: float) -> Lease:
        """The claim's lease, as the holder sees it (never longer than the catalog's)."""
        return Lease(lambda: self.journal.renew(row, self.lease_seconds), self.lease_seconds,
                     what=f"seq {row.seq}, {row.bucket}/{row.key}", clock=self.clock, started=claimed_at)

    def _renew(self, lease: Lease, row: VersionRow, stop: threading.Event, lost: threading.Event) -> None:
        """Extend the lease while the upload runs (so a long upload is not cut by its watchdog).
        The claim's generation is the fencing token and is never refreshed from the catalog: once
        another worker has claimed the row, renewing fails."""
        while not stop.wait(self.lease_seconds / 3):
            try:
                if not lease.renew():
                    lost.set()
                    return
            except Exception:  # a catalog blip: keep trying while the lease can still be ours
                log.warning("renewing the destage lease of seq %s failed", row.seq, exc_info=True)
                if lease.expired():
                    lost.set()
                    return

    def _failed(self, row: VersionRow, exc: Exception) -> str:
        current = self.journal.get(row.seq)
        attempts = current.attempts if current else row.attempts
        # An unreachable or overloaded remote (5xx, connection errors), or one that refuses our
        # credentials (a key revoked before its rotation reached this process), is an outage,
        # not a fault of this object: keep retrying at the capped backoff, so everything
        # destages when the remote (or its new key) is back. A lease lost or not renewable (the catalog
        # restarting) is not the object's fault either. Only refusals of the object itself
        # (other 4xx, AccessDenied included) use up the attempts.
        outage = (isinstance(exc, S3Error) and (exc.status >= 500 or exc.code in CREDENTIAL_REFUSALS)) \
            or isinstance(exc, ConnectionError | TimeoutError | LeaseLost | RouteMoved)
        failed = attempts >= self.max_attempts and not outage
        delay = backoff_seconds(attempts, self.backoff_base, self.backoff_cap) * random.uniform(0.5, 1.0)
        message = f"{type(exc).__name__}: {exc}"
        log.warning("destage of seq %s (%s/%s) failed (attempt %s): %s", row.seq, row.bucket, row.key,
                    attempts, message)
        if not self.journal.mark_retry(row, message, time.time() + delay, failed=failed):
            return self._done("lost", row)  # another worker owns the row now
        return self._done("failed" if failed else "retry", row)

    def _inline(self, row: VersionRow) -> bytes | None:
        """The body kept in the row, for a row whose one piece is ``INLINE_BLOB`` (None otherwise).
        The claimed row is not final, so its body is there."""
        if not (row.blobs and row.blobs[0].inline):
            return None
        body = self.journal.inline_body(row.seq)
        if body is None:
            raise FileNotFoundError(f"the journal row of seq {row.seq} holds no body")
        return body

    def _intend_drop(self, row: VersionRow) -> None:
        """A crash between the row's final commit and ``_drop_blobs`` must not leak the blobs.
        An inline body needs none of this: the final commit itself empties it."""
        for piece in _files(row):
            self.store.pending(piece.blob)

    def _keep_blobs(self, row: VersionRow) -> None:
        for piece in _files(row):
            self.store.settle(piece.blob)

    def _drop_blobs(self, row: VersionRow) -> None:
        for piece in _files(row):
            self.store.delete(piece.blob)

    def _done(self, outcome: str, row: VersionRow) -> str:
        metrics.destage_outcome(outcome, 0 if row.is_delete else row.size, row.created_at.timestamp())
        if self.on_outcome is not None:
            self.on_outcome(outcome, row)
        return outcome


def _files(row: VersionRow) -> list[BlobRef]:
    """The row's pieces that are blob files (not kept in the row)."""
    return [piece for piece in row.blobs if not piece.inline]
