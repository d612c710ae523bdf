"""Destage: move one journaled write to the remote. One function for every executor.

``Destager.destage(seq)`` is idempotent and safe to run concurrently and repeatedly (a lost,
duplicated or retried message is harmless): it claims the row with a lease, skips rows that a
newer write of the same key supersedes, uploads with the original part boundaries, verifies
the remote ETag, and marks the row durable in a transaction guarded by its generation.
Blocking code: the embedded executor runs it in a thread, Celery in a worker process.
"""

from __future__ import annotations

import base64
import contextlib
import io
import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import BinaryIO

from app import metrics
from app.domain.errors import S3Error
from app.domain.fencing import Lease, LeaseLost
from app.domain.routing import RouteMoved, RouteStamp
from app.domain.states import VersionState, backoff_seconds
from app.domain.versions import BlobRef, VersionRow
from app.services.partcopies import PartCopies
from app.services.ports import BlobPort, JournalPort, RemotePort, RoutedRemote

log = logging.getLogger("ferry.destage")

# Answers that refuse the request's signature or key, whatever the object: the remote's
# credentials are wrong for now, every row would fail alike.
ROUTE_MOVES = 3  # uploads of one claim to a bucket remapped under it, before it is retried later

CREDENTIAL_REFUSALS = frozenset({"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"})


@dataclass(frozen=True)
class UploadSpec:
    bucket: str
    key: str
    size: int
    etag: str
    blobs: list[BlobRef]
    multipart: bool
    content_headers: dict[str, str]
    metadata: dict[str, str]
    checksums: dict[str, str]
    checksum_algorithm: str | None
    remote_upload_id: str | None = None  # parts may already be there (copied as they arrived)
    inline: bytes | None = None  # the body of a single INLINE_BLOB piece (kept in the journal row)


__all__ = ["CREDENTIAL_REFUSALS", "Destager", "LeaseLost", "UploadSpec", "delete", "upload"]


def upload(remote: RemotePort, store: BlobPort, spec: UploadSpec, part_concurrency: int = 8,
           fence: Callable[[], bool] | None = None, copies: PartCopies | None = None,
           conditional: bool = False) -> str:
    """Write one object version to the remote; returns the remote ETag (verified equal to ours).

    ``fence()`` renews the destage lease; it is asked right before each request that writes the
    key (PutObject, CreateMultipartUpload, Complete, Abort): False or an error (the catalog
    unreachable) raises LeaseLost and nothing more is sent. So every such request starts with a
    whole lease ahead of it. When ``fence`` is a ``Lease`` (the Destager's), the requests already
    in flight are bounded by it too (``app/domain/fencing.py``): bodies (PutObject, UploadPart)
    stop being read once the lease is over, and no request or retry starts after it; another
    worker can claim the row only after the lease plus a takeover grace longer than what may
    still be in flight (``Journal.claim``). So two destages of one key are never at the remote at
    once, even when the lease lapsed mid-request while the catalog was restarting (issue 15).
    ``conditional``: a single PutObject carries If-Match (or If-None-Match) on the ETag the remote
    has now, so it fails with PreconditionFailed if another write lands before it does.
    """
    if spec.multipart:
        if copies is not None and spec.remote_upload_id:
            # Let the parts still being copied ahead land, rather than send them a second time.
            copies.wait_idle(spec.bucket, spec.key, timeout=1800)
            copies.wait_others(spec.remote_upload_id, timeout=1800)  # and other processes' copies
        remote_etag = _upload_multipart(remote, store, spec, part_concurrency, fence, copies)
        if copies is not None and spec.remote_upload_id:
            copies.forget(spec.remote_upload_id)
    else:
        remote_etag = _put_single(remote, store, spec, conditional, fence)
    if remote_etag and remote_etag != spec.etag:
        raise S3Error("InternalError", f"the remote reported ETag {remote_etag}, expected {spec.etag}")
    return remote_etag or spec.etag


def _holds(fence: Callable[[], bool] | None) -> bool:
    """True when the lease is (still) ours, renewed just now; False when lost or unknown."""
    if fence is None:
        return True
    try:
        return bool(fence())
    except Exception:  # the catalog did not answer: the lease may lapse before the request ends
        log.warning("could not renew a destage lease before writing the remote", exc_info=True)
        return False


def _fenced(fence: Callable[[], bool] | None, bucket: str, key: str, what: str) -> None:
    if not _holds(fence):
        raise LeaseLost(f"lost (or could not renew) the destage lease of {bucket}/{key} before {what}")


def _bounded(fence: Callable[[], bool] | None, body: BinaryIO) -> BinaryIO:
    """The body of a write request, read only while the lease lasts (when the fence is a Lease)."""
    return fence.bound(body) if isinstance(fence, Lease) else body


def _guarded(fence: Callable[[], bool] | None) -> contextlib.AbstractContextManager[None]:
    """No request (nor botocore's retry of it) starts in this block once the lease is over."""
    return fence.guard() if isinstance(fence, Lease) else contextlib.nullcontext()


def _expectation(remote: RemotePort, bucket: str, key: str) -> dict[str, str]:
    """The condition that holds while nobody else writes the key: its current ETag, or absence.

    Read under the destage lease, when no newer version of the key can be destaged: if one lands
    later (this worker stalled past its lease), the ETag changes and the write is refused."""
    current = remote.current_etag(bucket, key)
    return {"if_match": current} if current is not None else {"if_none_match": "*"}


def _put_single(remote: RemotePort, store: BlobPort, spec: UploadSpec, conditional: bool,
                fence: Callable[[], bool] | None = None) -> str:
    condition = _expectation(remote, spec.bucket, spec.key) if conditional else {}
    try:
        return _send_put(remote, store, spec, condition, fence)
    except S3Error as err:
        if not (condition.get("if_none_match") and err.code == "PreconditionFailed"):
            raise
        if remote.current_etag(spec.bucket, spec.key) is not None:
            raise  # an object landed meanwhile: the fence did its job
        # Still no object, yet "If-None-Match: *" refused: the key names a directory on a
        # filesystem-backed remote (SeaweedFS refuses every conditional write of ``a/`` while
        # ``a/b`` exists, and of ``a`` while ``a/`` does), where the plain PUT is stored. The
        # lease, renewed right before it, still fences this one request.
        return _send_put(remote, store, spec, {}, fence)


def _send_put(remote: RemotePort, store: BlobPort, spec: UploadSpec, condition: dict[str, str],
              fence: Callable[[], bool] | None) -> str:
    piece = spec.blobs[0] if spec.blobs else None
    md5_b64 = base64.b64encode(bytes.fromhex(spec.etag)).decode()
    _fenced(fence, spec.bucket, spec.key, "PutObject")
    with contextlib.ExitStack() as stack:
        if piece is None or piece.inline:
            fh: BinaryIO = io.BytesIO(spec.inline or b"")
        else:
            fh = stack.enter_context(open(store.path(piece.blob), "rb"))
        stack.enter_context(_guarded(fence))
        return remote.put_object(spec.bucket, spec.key, _bounded(fence, fh), piece.size if piece else 0, md5_b64,
                                 spec.content_headers, spec.metadata, spec.checksums, **condition)


def delete(remote: RemotePort, bucket: str, key: str, conditional: bool = False,
           fence: Callable[[], bool] | None = None) -> None:
    """Delete the key remotely; ``conditional``: only the version found under the lease."""
    if not conditional:
        _fenced(fence, bucket, key, "DeleteObject")
        with _guarded(fence):
            remote.delete_object(bucket, key)
        return
    current = remote.current_etag(bucket, key)
    if current is not None:  # absent: nothing to delete (and nothing newer to undo)
        _fenced(fence, bucket, key, "DeleteObject")
        with _guarded(fence):
            remote.delete_object(bucket, key, if_match=current)


def _upload_multipart(remote: RemotePort, store: BlobPort, spec: UploadSpec, concurrency: int,
                      fence: Callable[[], bool] | None = None, copies: PartCopies | None = None) -> str:
    """Same part boundaries as the client used, so the remote's ETag is the client's.

    When the parts were copied to a remote upload as they arrived, that upload is reused: the
    remote's list of parts is compared with ours (by MD5 ETag) and only missing or different
    parts are sent. The remote checks every part's ETag again at Complete, so a stale copy can
    never be committed.
    """
    upload_id: str | None = None
    present: dict[int, str] = {}
    if spec.remote_upload_id:
        try:
            present = remote.list_parts(spec.bucket, spec.key, spec.remote_upload_id)
            upload_id = spec.remote_upload_id
        except S3Error as err:
            if err.code != "NoSuchUpload":
                raise
    reused = upload_id is not None
    if upload_id is None:
        _fenced(fence, spec.bucket, spec.key, "CreateMultipartUpload")
        with _guarded(fence):
            upload_id = remote.create_multipart(spec.bucket, spec.key, spec.content_headers, spec.metadata,
                                                spec.checksum_algorithm, _checksum_type(spec))
    numbered = all(p.number for p in spec.blobs)
    numbers = [int(p.number or 0) for p in spec.blobs] if numbered else list(range(1, len(spec.blobs) + 1))

    def send(number: int, piece: BlobRef) -> None:
        md5_b64 = base64.b64encode(bytes.fromhex(piece.etag)).decode()
        with _claimed(copies, upload_id, number) as (part_lease, waited):
            if waited and remote.list_parts(spec.bucket, spec.key, upload_id).get(number) == piece.etag:
                return  # another worker's copy of this part landed while we waited for it
            with open(store.path(piece.blob), "rb") as fh, _guarded(fence):
                body = part_lease.bound(_bounded(fence, fh)) if part_lease else _bounded(fence, fh)
                etag = remote.upload_part(spec.bucket, spec.key, upload_id, number, body, piece.size,
                                          md5_b64, piece.checksums)
        if etag and etag != piece.etag:
            raise S3Error("InternalError", f"remote part {number} ETag {etag}, expected {piece.etag}")

    missing = [(n, piece) for n, piece in zip(numbers, spec.blobs, strict=True) if present.get(n) != piece.etag]
    try:
        with ThreadPoolExecutor(max_workers=max(1, min(concurrency, len(missing) or 1))) as pool:
            futures = [pool.submit(send, n, piece) for n, piece in missing]
            for f in futures:
                f.result()
        parts = [(n, piece.etag, piece.checksums) for n, piece in zip(numbers, spec.blobs, strict=True)]
        _fenced(fence, spec.bucket, spec.key, "completing it")
        with _guarded(fence):
            return remote.complete_multipart(spec.bucket, spec.key, upload_id, parts)
    except BaseException as exc:
        # A reused upload keeps its parts for the retry. An abort is a write of the key too: only
        # under a live lease; otherwise the remote-uploads chore removes the orphan later.
        if not reused and not isinstance(exc, LeaseLost) and _holds(fence):
            with _guarded(fence):
                remote.abort_multipart(spec.bucket, spec.key, upload_id)
        raise


@contextlib.contextmanager
def _claimed(copies: PartCopies | None, upload_id: str, number: int) -> Iterator[tuple[Lease | None, bool]]:
    """The part's claim shared with eager copies in every process (none without ``copies``)."""
    if copies is None:
        yield None, False
        return
    with copies.sending_after_others(upload_id, number, timeout=1800) as held:
        yield held


def _checksum_type(spec: UploadSpec) -> str | None:
    """A FULL_OBJECT multipart checksum (no ``-N``) asks the remote for the same type; otherwise
    the remote's default (COMPOSITE, FULL_OBJECT for CRC64NVME), which is Ferry's too."""
    value = spec.checksums.get(spec.checksum_algorithm or "")
    return "FULL_OBJECT" if value and "-" not in value else None


def spec_of(row: VersionRow, inline: bytes | None = None) -> UploadSpec:
    return UploadSpec(row.bucket, row.key, row.size, row.etag, row.blobs, row.multipart, row.content_headers,
                      row.metadata, row.checksums, row.checksum_algorithm, row.remote_upload_id, inline)


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
                                     fence=lease, copies=self.part_copies, conditional=conditional)
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
            return self._done("durable", row)
        self._keep_blobs(row)
        return self._lost_after_write(row)

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
