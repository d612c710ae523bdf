"""Bucket ownership as an access rule: a tenant's keys reach only the tenant's buckets.

Every S3 request passes ``Tenancy.authorize`` with its bucket (and a copy's source bucket)
before its handler runs (``app/s3/app.py``), and ListBuckets is filtered here too, so no
operation can skip the check. A bucket with no explicit owner belongs to the bootstrap tenant
(``default``, the FERRY_ACCESS_KEY tenant): a single-tenant setup in front of pre-existing
remote buckets works unchanged. ``FERRY_TENANCY=shared`` turns the rule off (every tenant
reaches every bucket), for operators who use tenants only as labels.

The mapping is held in memory and re-read at most every ``refresh_seconds``: the hit path never
waits on SQL. A refusal is confirmed with one point query first, so a bucket just created or
assigned on another process is usable at once on every process; a revoked one stops within
``refresh_seconds``.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Protocol

import anyio.to_thread

from app.domain.errors import S3Error
from app.domain.owners import OwnerMap
from app.refresher import Refresher

LIST_MAX_AGE = 0.5  # ListBuckets (which waits on the remote anyway) reads a mapping at most this old


class BucketProbe(Protocol):
    """Whether a bucket exists (the remote's HeadBucket): raises S3Error NoSuchBucket if not."""

    def head_bucket(self, bucket: str) -> None: ...


class Owners(Protocol):
    """The owners' table (``adapters/catalog/control/owners.OwnerRepo``)."""

    def snapshot(self) -> OwnerMap: ...
    def owner(self, bucket: str) -> tuple[int | None, bool]: ...
    def claim(self, bucket: str, tenant_id: int) -> int: ...
    def release(self, bucket: str) -> None: ...


class Tenancy:
    def __init__(self, repo: Owners, remote: BucketProbe, *, shared: bool = False,
                 refresh_seconds: float = 2.0) -> None:
        self.repo = repo
        self.remote = remote
        self.shared = shared
        self.refresh_seconds = refresh_seconds
        self._map: OwnerMap | None = None
        self._loaded_at = float("-inf")
        self._lock: asyncio.Lock | None = None
        self._generation = 0  # bumped by invalidate: a read begun before it is not kept
        self._assign = threading.Lock()  # the refresher's thread and the loop both replace the mapping
        self._refresher = Refresher(self, "_reload_if_half_old", refresh_seconds / 2)

    def invalidate(self) -> None:
        """After a change in this process (admin API, create, delete): the next check re-reads."""
        with self._assign:
            self._generation += 1
            self._loaded_at = float("-inf")

    def _reload_if_half_old(self) -> None:
        """The refresher's tick (app/refresher.py): requests find the mapping fresh."""
        started, generation = time.monotonic(), self._generation
        if started - self._loaded_at < self.refresh_seconds / 2:
            return
        fresh = self.repo.snapshot()
        with self._assign:
            if generation == self._generation and started > self._loaded_at:
                self._map, self._loaded_at = fresh, started

    async def _current(self, max_age: float) -> OwnerMap:
        """The mapping, re-read when older than ``max_age``; concurrent callers share one read."""
        if self._map is not None and time.monotonic() - self._loaded_at < max_age:
            if max_age == self.refresh_seconds:
                self._refresher.used()
            return self._map
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._map is None or time.monotonic() - self._loaded_at >= max_age:
                started, generation = time.monotonic(), self._generation
                fresh = await anyio.to_thread.run_sync(self.repo.snapshot)
                with self._assign:
                    # Invalidated meanwhile: read again next time; the refresher newer: keep its.
                    if generation == self._generation and started > self._loaded_at:
                        self._map, self._loaded_at = fresh, started
                    elif self._map is None:
                        self._map = fresh
        return self._map

    @staticmethod
    def _owner(m: OwnerMap, bucket: str) -> int | None:
        return m.owners.get(bucket, m.default_tenant)

    @staticmethod
    def _allows(owner: int | None, explicit: bool, tenant_id: int | None, creating: bool) -> bool:
        if tenant_id is None:
            return False
        if creating and not explicit:
            return True  # a new bucket, or an unowned one: create_bucket decides (see created)
        return owner == tenant_id

    async def authorize(self, tenant_id: int | None, bucket: str, *, creating: bool = False) -> None:
        """AccessDenied (BucketAlreadyExists for CreateBucket) unless the tenant owns the bucket;
        NoSuchBucket for a name nobody owns that the remote does not have either, as S3 answers.
        The cached mapping answers; a refusal is confirmed against the catalog before it is sent."""
        if self.shared:
            return
        m = await self._current(self.refresh_seconds)
        if self._allows(self._owner(m, bucket), bucket in m.owners, tenant_id, creating):
            return
        owner, explicit = await anyio.to_thread.run_sync(self.repo.owner, bucket)
        if self._allows(owner, explicit, tenant_id, creating):
            self.invalidate()  # the mapping is behind: the next request re-reads it
            return
        if creating:
            raise S3Error("BucketAlreadyExists", BucketName=bucket)
        if tenant_id is not None and not explicit and not await self._exists(bucket):
            raise S3Error("NoSuchBucket", BucketName=bucket)  # as S3: a missing name is no one's
        raise S3Error("AccessDenied", "Access Denied")

    async def _exists(self, bucket: str) -> bool:
        """An unowned bucket the remote does not have is missing, not forbidden (asked only on a
        refusal; an unreachable remote keeps the refusal)."""
        try:
            await anyio.to_thread.run_sync(self.remote.head_bucket, bucket)
        except S3Error as err:
            return err.code != "NoSuchBucket"
        return True

    async def visible(self, tenant_id: int | None, buckets: list[str]) -> set[str]:
        """The names ListBuckets may show this tenant. It already waits on a remote call, so it
        reads a mapping at most LIST_MAX_AGE old: a bucket just created elsewhere is listed."""
        if self.shared:
            return set(buckets)
        m = await self._current(LIST_MAX_AGE)
        return {b for b in buckets if tenant_id is not None and self._owner(m, b) == tenant_id}

    async def created(self, tenant_id: int | None, bucket: str, *, fresh: bool) -> None:
        """After CreateBucket succeeded on the remote. A bucket the remote made now becomes the
        creator's. One that existed already stays with its owner: re-creating it is only the
        owner's no-op, anyone else gets BucketAlreadyExists (never an unowned bucket's takeover).
        The owner is read from the catalog, not the cached mapping: a retried CreateBucket that
        lands on another process must succeed again."""
        if tenant_id is None:
            return
        if fresh:
            owner = await anyio.to_thread.run_sync(self.repo.claim, bucket, tenant_id)
            self.invalidate()
            if owner == tenant_id or self.shared:
                return
        elif self.shared or (await anyio.to_thread.run_sync(self.repo.owner, bucket))[0] == tenant_id:
            return
        raise S3Error("BucketAlreadyExists", BucketName=bucket)

    async def claimed(self, bucket: str) -> bool:
        """Whether a tenant owns the name explicitly (a CreateBucket claimed it), from the
        catalog: what a racing create is judged by when the remote's answer is not to be trusted."""
        _, explicit = await anyio.to_thread.run_sync(self.repo.owner, bucket)
        return explicit

    async def deleted(self, bucket: str) -> None:
        """After DeleteBucket: the name is free again, for any tenant."""
        await anyio.to_thread.run_sync(self.repo.release, bucket)
        self.invalidate()
