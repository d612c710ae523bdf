"""Bucket ownership: which tenant a bucket belongs to (``bucket_owners``).

The S3 plane never queries this per request: ``app/services/control/tenancy.py`` keeps the whole
mapping in memory and reloads it every few seconds (buckets are few, requests many).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from sqlalchemy import Engine, delete, select
from sqlalchemy.exc import IntegrityError

from app.adapters.catalog.engine import Sessions
from app.adapters.catalog.errors import NotFound
from app.adapters.catalog.tables import BucketOwner, StagingJob, Tenant
from app.adapters.catalog.tables import Policy as PolicyRow
from app.domain.owners import OwnerMap


@dataclass(frozen=True)
class OwnerInfo:
    bucket: str
    tenant: str
    tenant_id: int
    created_at: float


class OwnerRepo:
    def __init__(self, engine: Engine, default_tenant: str = "default") -> None:
        self.sessions = Sessions(engine)
        self.default_tenant = default_tenant

    def snapshot(self) -> OwnerMap:
        """Every (bucket, owner) pair and the default tenant's id, in one transaction."""
        with self.sessions() as s:
            owners = {b: t for b, t in s.execute(select(BucketOwner.bucket, BucketOwner.tenant_id))}
            default = s.scalar(select(Tenant.id).where(Tenant.name == self.default_tenant))
        return OwnerMap(owners, default)

    def owner(self, bucket: str) -> tuple[int | None, bool]:
        """The bucket's owner as of now, and whether it is explicit: its row's tenant, else the
        default tenant's id (None when there is no default tenant)."""
        with self.sessions() as s:
            explicit = s.scalar(select(BucketOwner.tenant_id).where(BucketOwner.bucket == bucket))
            if explicit is not None:
                return explicit, True
            return s.scalar(select(Tenant.id).where(Tenant.name == self.default_tenant)), False

    def claim(self, bucket: str, tenant_id: int) -> int:
        """Record ``tenant_id`` as the owner unless the bucket has one; returns the owner that counts
        (two tenants racing to create a bucket agree on the first insert)."""
        try:
            with self.sessions.begin() as s:
                row = s.get(BucketOwner, bucket)
                if row is not None:
                    return row.tenant_id
                s.add(BucketOwner(bucket=bucket, tenant_id=tenant_id, created_at=time.time()))
                return tenant_id
        except IntegrityError:
            with self.sessions() as s:
                owner = s.scalar(select(BucketOwner.tenant_id).where(BucketOwner.bucket == bucket))
            if owner is None:
                raise
            return owner

    def release(self, bucket: str) -> None:
        """Forget the owner (the bucket was deleted) with the bucket's policies and staging jobs,
        in one transaction: a new bucket of that name starts unowned, and its new owner never
        gets the old owner's rules (a read-only rule refusing its writes) nor sees its jobs."""
        with self.sessions.begin() as s:
            s.execute(delete(BucketOwner).where(BucketOwner.bucket == bucket))
            s.execute(delete(PolicyRow).where(PolicyRow.bucket == bucket))
            s.execute(delete(StagingJob).where(StagingJob.bucket == bucket))

    def assign(self, bucket: str, tenant: str) -> tuple[OwnerInfo, bool]:
        """Give the bucket to the named tenant (the admin API); True when it had no owner."""
        with self.sessions.begin() as s:
            tenant_id = s.scalar(select(Tenant.id).where(Tenant.name == tenant))
            if tenant_id is None:
                raise NotFound(f"no tenant named {tenant!r}")
            row = s.get(BucketOwner, bucket)
            created = row is None
            if row is None:
                row = BucketOwner(bucket=bucket, tenant_id=tenant_id, created_at=time.time())
                s.add(row)
            else:
                row.tenant_id = tenant_id
            s.flush()
            return OwnerInfo(bucket, tenant, tenant_id, row.created_at), created

    def get(self, bucket: str) -> OwnerInfo:
        with self.sessions() as s:
            row = s.execute(select(BucketOwner, Tenant.name).join(Tenant, Tenant.id == BucketOwner.tenant_id)
                            .where(BucketOwner.bucket == bucket)).first()
        if row is None:
            raise NotFound(f"bucket {bucket!r} has no explicit owner")
        owner, name = row
        return OwnerInfo(owner.bucket, name, owner.tenant_id, owner.created_at)

    def list(self, tenant: str | None = None) -> list[OwnerInfo]:
        stmt = (select(BucketOwner, Tenant.name).join(Tenant, Tenant.id == BucketOwner.tenant_id)
                .order_by(BucketOwner.bucket))
        if tenant is not None:
            stmt = stmt.where(Tenant.name == tenant)
        with self.sessions() as s:
            return [OwnerInfo(o.bucket, name, o.tenant_id, o.created_at) for o, name in s.execute(stmt)]

    def delete(self, bucket: str) -> None:
        """Remove the explicit owner: the bucket falls back to the default tenant."""
        with self.sessions.begin() as s:
            if s.get(BucketOwner, bucket) is None:
                raise NotFound(f"bucket {bucket!r} has no explicit owner")
            s.execute(delete(BucketOwner).where(BucketOwner.bucket == bucket))
