"""Sending one journaled version to the remote: a single PUT, fenced by the row's lease and by a
condition on what the remote holds, or a multipart upload with the client's part boundaries (so
the remote's ETag is the one the client got); and fenced deletes. ``Destager`` (destage.py)
decides what to send and when; this module only sends it.
"""

from __future__ import annotations

import base64
import contextlib
import io
import logging
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import BinaryIO

from app.domain.errors import S3Error
from app.domain.fencing import Lease, LeaseLost
from app.domain.versions import BlobRef, VersionRow
from app.services.multipart.part_copies import PartCopies
from app.services.ports import BlobPort, RemotePort

log = logging.getLogger("ferry.destage")

# A single PUT of at most this many bytes asks for the key's absence first (If-None-Match: *) and
# reads the remote's ETag only when refused: a body this small costs less to send twice than a
# round trip to the remote costs every new key. Larger bodies read the ETag first (a HEAD).
ABSENCE_FIRST_BYTES = 256 * 1024


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


def upload(remote: RemotePort, store: BlobPort, spec: UploadSpec, part_concurrency: int = 8,
           fence: Callable[[], bool] | None = None, copies: PartCopies | None = None,
           conditional: bool = False, record: Callable[[str], bool] | None = None) -> str:
    """Write one object version to the remote; returns the remote ETag (verified equal to ours).

    ``fence()`` renews the destage lease (the first request after the claim excepted: the claim just
    confirmed it); it is asked right before each request that writes the key (PutObject,
    CreateMultipartUpload, Complete, Abort): False or an error (the catalog unreachable) raises
    LeaseLost and nothing more is sent. So every such request starts with at least two thirds of a
    lease ahead of it (all but the first with a whole one). When ``fence`` is a ``Lease`` (the
    Destager's), the requests already in flight are bounded by it too (``app/domain/fencing.py``):
    bodies (PutObject, UploadPart) stop being read once the lease is over, and no request or retry
    starts after it; another worker can claim the row only after the lease plus a takeover grace
    longer than what may still be in flight (``Journal.claim``). So two destages of one key are
    never at the remote at once, even when the lease lapsed mid-request while the catalog was
    restarting (issue 15).
    ``conditional``: a single PutObject carries If-Match (or If-None-Match) on the ETag the remote
    has now, so it fails with PreconditionFailed if another write lands before it does.
    ``record(upload_id)`` names a remote multipart upload this call creates on the row before
    any part is sent (False: the row is no longer ours); a recorded upload is kept on failure,
    for the retry to resume.
    """
    if spec.multipart:
        if copies is not None and spec.remote_upload_id:
            # Let the parts still being copied ahead land, rather than send them a second time.
            copies.wait_idle(spec.bucket, spec.key, timeout=1800)
            copies.wait_others(spec.remote_upload_id, timeout=1800)  # and other processes' copies
        remote_etag = _upload_multipart(remote, store, spec, part_concurrency, fence, copies, record)
        if copies is not None and spec.remote_upload_id:
            copies.forget(spec.remote_upload_id)
    else:
        remote_etag = _put_single(remote, store, spec, conditional, fence)
    if remote_etag and remote_etag != spec.etag:
        raise S3Error("InternalError", f"the remote reported ETag {remote_etag}, expected {spec.etag}")
    return remote_etag or spec.etag


def _holds(fence: Callable[[], bool] | None) -> bool:
    """True when the lease is (still) ours, confirmed just now; False when lost or unknown."""
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
    if conditional and spec.size <= ABSENCE_FIRST_BYTES:
        # Most small writes make new keys: ask the remote for absence in the PUT itself rather
        # than by a HEAD first (one round trip instead of two). A refusal means an object was
        # there when it arrived; the HEAD below reads what it is, under the lease as before.
        try:
            return _send_put(remote, store, spec, {"if_none_match": "*"}, fence)
        except S3Error as err:
            if err.code != "PreconditionFailed":
                raise
        current = remote.current_etag(spec.bucket, spec.key)
        if current is None:  # refused, yet no object: a directory-named key (below)
            return _send_put(remote, store, spec, {}, fence)
        return _send_put(remote, store, spec, {"if_match": current}, fence)
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
                      fence: Callable[[], bool] | None = None, copies: PartCopies | None = None,
                      record: Callable[[str], bool] | None = None) -> str:
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
        reused = _recorded(remote, spec, upload_id, record)
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


def _recorded(remote: RemotePort, spec: UploadSpec, upload_id: str, record: Callable[[str], bool] | None) -> bool:
    """Name a just-created remote upload on the row (True), before any part goes. Refused (the
    row was taken over): the upload is aborted (only this call knows its id, so aborting it
    touches nobody's write) and the destage stops."""
    if record is None:
        return False
    try:
        kept = record(upload_id)
    except BaseException:
        with contextlib.suppress(Exception):
            remote.abort_multipart(spec.bucket, spec.key, upload_id)
        raise
    if not kept:
        with contextlib.suppress(Exception):
            remote.abort_multipart(spec.bucket, spec.key, upload_id)
        raise LeaseLost(f"the destage row of {spec.bucket}/{spec.key} was taken over before its upload was recorded")
    return True


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
