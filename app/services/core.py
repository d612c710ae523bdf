"""What the capability services share: collaborators, mode choice, backpressure, body receipt.

``GatewayCore`` is no base class: each service (``reads``, ``writes``, ``multipart``, ``listing``,
``buckets``) takes it in its constructor and keeps the collaborators it uses, by name; a service
that needs another one (a copy reads its source) is handed it. ``Gateway`` wires them."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import errno
import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import anyio

from app.domain.checksums import BodyDigests, verify_expected
from app.domain.errors import S3Error
from app.domain.expires import validate_expires
from app.domain.names import validate_key, validate_object_size
from app.domain.policy import Policy
from app.domain.versions import BlobRef, Replica
from app.services.bodies import (
    INLINE_BODY,
    WRITE_CHUNK,
    BodyStream,
    ExpectedDigests,
    PayloadCheck,
    ReceivedBody,
)
from app.services.cache import ReadCache
from app.services.control.policies import PolicyBook
from app.services.control.tenancy import Tenancy
from app.services.destage.background import AckGate, BackgroundThreads
from app.services.destage.destager import Destager
from app.services.destage.executor import Executor
from app.services.multipart.copy_admission import CopyAdmission
from app.services.multipart.part_copies import PartCopies
from app.services.multipart.parts_ahead import PartsAhead
from app.services.ports import BlobPort, JournalPort, PeerVersions, RemotePort, StagedBody, UploadsPort
from app.services.threads import ThreadHops
from app.services.writes.admission import KnownBuckets, WriteAdmission
from app.services.writes.budget import DiskReserve, WriteBudget, slow_down
from app.services.writes.modes import WriteBack, WriteMode, WriteThrough

T = TypeVar("T")
log = logging.getLogger("ferry.gateway")


class GatewayCore:
    """What every capability shares: collaborators, the write mode, backpressure, the thread limiter,
    and the steps more than one of them takes (key checks, body receipt, replicas)."""

    def __init__(self, catalog: UploadsPort, blobs: BlobPort, remote: RemotePort, *,
                 journal: JournalPort, executor: Executor, destager: Destager, cache: ReadCache,
                 policies: PolicyBook, tenancy: Tenancy,
                 region: str = "us-east-1", thread_limit: int = 64,
                 part_concurrency: int = 8, mode: str = "write-through",
                 buffer_bytes: int = 64 * 1024**3,
                 inline_lookups: bool = False, eager_parts: bool = True,
                 part_copies: PartCopies | None = None,
                 budget: WriteBudget | None = None, disk: DiskReserve | None = None,
                 peers: PeerVersions | None = None, acks: AckGate | None = None,
                 background_nice: int = 0, takeover_grace: float = 0.0, inline_max: int = 0,
                 copy_busy_limit: int = 1, copy_backlog_bytes: int = 64 * 1024**2) -> None:
        self.catalog = catalog
        self.tenancy = tenancy  # bucket ownership (Tenancy(shared=True) lets everyone in)
        self.blobs = blobs
        self.remote = remote
        self.region = region
        self.threads = ThreadHops(thread_limit, "ferry-io")
        self.part_concurrency = part_concurrency
        self.journal = journal
        self.executor = executor
        self.mode = mode
        self.buffer_bytes = buffer_bytes
        self.destager = destager
        self.cache = cache
        self.policies = policies
        # SQLite point lookups (tens of µs, never blocked by writers in WAL mode) run on the event
        # loop: a thread hop costs more than the query. A networked catalog keeps them in threads.
        self.inline_lookups = inline_lookups
        self.part_copies = part_copies or PartCopies()
        # Writes being acknowledged, which destage and part copies ahead (in threads of lower
        # priority) give way to: see services/destage/background.py.
        self.acks = acks or AckGate(max_wait=0)
        self.parts_ahead = PartsAhead(
            catalog, blobs, remote, self.part_copies,
            CopyAdmission(self.acks, part_concurrency, copy_busy_limit, copy_backlog_bytes),
            BackgroundThreads(part_concurrency, background_nice, name="ferry-ahead"),
            enabled=eager_parts, takeover_grace=takeover_grace)
        # Before a write's body is read: its bucket exists, and the disk and buffer can hold it.
        self.known_buckets = KnownBuckets(remote, journal, self.run)
        self.admission = WriteAdmission(budget or WriteBudget(buffer_bytes), disk, journal, self.run)
        # Fleet mode: other nodes' buffered writes are read from them (None: every row is ours).
        self.peers = peers
        # Write-back bodies up to this size go into their journal row (0: never; see unit_of_work.JournalWork.put).
        self.inline_max = inline_max
        self._buffered = WriteBack(self.known_buckets, self.admission, executor)
        self._through = WriteThrough(journal, destager, executor, self.run)

    @property
    def write_back(self) -> bool:
        """Whether the node-wide default mode buffers writes (policies may differ per key)."""
        return self.mode == "write-back"

    def policy(self, bucket: str, key: str = "") -> Policy:
        return self.policies.for_key(bucket, key)

    def check_key(self, bucket: str, key: str) -> None:
        """S3's key rules, plus those of the bucket's remote (its capability profile): a key the
        remote would rename or refuse is refused before a write-back write is acknowledged."""
        validate_key(key, self.remote.profile(bucket))

    def check_content(self, bucket: str, content_headers: dict[str, str]) -> None:
        """Content headers the bucket's remote would refuse (an Expires that is no HTTP date
        on SeaweedFS) are refused before a write-back write is acknowledged."""
        validate_expires(content_headers, self.remote.profile(bucket))

    def check_size(self, bucket: str, key: str, size: int) -> None:
        """A folder key ('.../') holds no bytes on a filesystem-backed remote."""
        validate_object_size(key, size, self.remote.profile(bucket))

    def mode_for(self, bucket: str, key: str) -> WriteMode:
        """The mode of a write to ``bucket/key``, chosen once: buffered (write-back) or written
        through; a read-only mapping refuses it."""
        policy = self.policy(bucket, key)
        policy.refuse_write(bucket)
        return self._buffered if policy.mode == "write-back" else self._through

    async def written(self, bucket: str, key: str) -> None:
        """After a write is accepted: no cached copy of the old version is served again."""
        await self.cache.invalidate(bucket, key)

    async def replicate(self, bucket: str, key: str, pieces: list[BlobRef]) -> Replica | None:
        """Fleet, ``write_replicas: 2``: a second live node holds the pieces durably before the
        row commits (and so before the answer). No node to take them: 503 SlowDown, nothing
        committed. Embedded mode has no second node: the policy has no effect there."""
        if self.peers is None or self.policy(bucket, key).write_replicas < 2:
            return None
        return await self.peers.replicate(pieces, self.blobs.path)

    async def accept_replica(self, body: BodyStream, size: int, md5_hex: str) -> str:
        """The internal endpoint's side of ``_replicate``: one piece, received, checked against
        its MD5 and fsynced here; returns its blob id on this node. The blob keeps its intent
        record (``tmp/``) until the origin's row commits: a restart keeps it only if a replica
        record names it (``Journal.blobs_referenced``)."""
        try:
            md5_b64 = base64.b64encode(bytes.fromhex(md5_hex)).decode()
        except ValueError as exc:
            raise S3Error("InvalidDigest") from exc
        # Held like a write of this node until its row is durable: the disk's reserve and the
        # write buffer both apply (a full buffer refuses it; the origin tries another node).
        reserved = await self.admission.reserve(size)
        try:
            received = await self.receive(body, ExpectedDigests(content_md5=md5_b64, declared_size=size), size)
        finally:
            self.admission.release(reserved)
        return await self.run(self.blobs.commit, received.staging)

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Blocking work (boto3, disk, SQL) runs in threads, at most ``thread_limit`` at once."""
        if kwargs:
            fn = functools.partial(fn, **kwargs)
        return await self.threads.run(fn, *args)


    # ---- receiving bodies --------------------------------------------------------------------
    async def receive(self, body: BodyStream, expected: ExpectedDigests, max_size: int) -> ReceivedBody:
        """Stream the body to ``tmp/`` while hashing it; verify sizes and digests. Pieces are
        batched, never joined (a copy costs as much as a CRC), and hashed and written off the loop."""
        small = expected.declared_size is not None and expected.declared_size <= INLINE_BODY
        # A small body is staged without thread hops: each costs more than its few syscalls.
        staging = self.blobs.open_staging() if small else await self.run(self.blobs.open_staging)
        digests = BodyDigests(sorted(expected.algorithms | set(expected.checksums)))
        payload = body.take_payload_hash()  # x-amz-content-sha256: hashed here with the others
        pending: asyncio.Future[None] | None = None
        batch: list[bytes | memoryview] = []
        batched = 0

        def write(pieces: list[bytes | memoryview]) -> None:
            _hash_and_write(pieces, digests, payload, staging, 8 * WRITE_CHUNK if self.blobs.fsync else 0)

        try:
            async for piece in body:
                batch.append(piece if isinstance(piece, bytes | memoryview) else bytes(piece))
                batched += len(piece)
                if staging.size + batched > max_size:
                    raise S3Error("EntityTooLarge", MaxSizeAllowed=str(max_size))
                if batched >= WRITE_CHUNK:
                    if pending is not None:
                        await pending
                    pending = asyncio.ensure_future(self.run(write, batch))
                    batch, batched = [], 0
            if pending is not None:
                await pending
                pending = None
            whole = b"".join(batch) if not staging.size and batched <= INLINE_BODY else None
            if batch:
                if batched <= INLINE_BODY:
                    write(batch)
                else:
                    await self.run(write, batch)
            if payload is not None:
                payload.verify()
            if expected.declared_size is not None and staging.size != expected.declared_size:
                raise S3Error("IncompleteBody")
            checksums = expected.with_trailers(body.trailers)
            missing = set(checksums) - set(digests.algorithms)
            if missing:
                raise S3Error("InvalidRequest", f"Checksum algorithm {sorted(missing)[0]} was not computed")
            verify_expected(digests, expected.content_md5, checksums)
        except BaseException as exc:
            if pending is not None:
                pending.cancel()
                with anyio.CancelScope(shield=True), contextlib.suppress(BaseException):
                    await pending  # the original error is the one to report
            await self.run(self.blobs.discard, staging)
            if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
                # A body larger than announced, or a disk filled by something else: retryable.
                raise slow_down("The data directory's disk is full; retry later.") from exc
            raise
        computed = digests.checksums()
        return ReceivedBody(staging, digests, {alg: computed[alg] for alg in checksums} or {
            alg: computed[alg] for alg in expected.algorithms if alg in computed}, whole)


def _hash_and_write(pieces: list[bytes | memoryview], digests: BodyDigests, payload: PayloadCheck | None,
                    staging: StagedBody, sync_every: int) -> None:
    """One batch of a body: every digest over each piece as received, then one ``writev``."""
    for piece in pieces:
        digests.update(piece)
        if payload is not None:
            payload.update(piece)
    staging.write_many(pieces, sync_every=sync_every)
