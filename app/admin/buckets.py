"""Bucket owners: which tenant's keys reach a bucket (``FERRY_TENANCY=isolated``).

A tenant that creates a bucket through S3 owns it. A bucket that already exists on the remote
has no owner row and belongs to the bootstrap tenant until ``PUT /admin/buckets/{bucket}``
gives it to another; ``DELETE`` returns it to the bootstrap tenant. Changes apply at once on
the process that served them and within ``FERRY_TENANCY_REFRESH_SECONDS`` on the others.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response

from app.adapters.catalog.control.owners import OwnerInfo
from app.admin.auth import Authenticator, Principal
from app.admin.common import BUCKET_PATTERN, NAME_PATTERN, Model, Name, Out, run
from app.bootstrap import Container

BucketPath = Annotated[str, Path(pattern=BUCKET_PATTERN)]
TenantFilter = Annotated[str | None, Query(pattern=NAME_PATTERN)]


class OwnerIn(Model):
    tenant: Name


class OwnerOut(Out):
    bucket: str
    tenant: str
    tenant_id: int
    created_at: float


def router(container: Container, auth: Authenticator) -> APIRouter:
    repo = container.admin.owners
    tenancy = container.gateway.tenancy
    api = APIRouter(prefix="/admin/buckets", tags=["buckets"])

    def changed() -> None:
        if tenancy is not None:
            tenancy.invalidate()

    @api.get("", response_model=list[OwnerOut])
    async def list_owners(tenant: TenantFilter = None, principal: Principal = auth.tenant_read()) -> list[OwnerInfo]:
        """Buckets with an explicit owner (optionally one tenant's); the others are the bootstrap
        tenant's. A token bound to a tenant sees that tenant's only."""
        if principal.tenant is not None:
            if tenant not in (None, principal.tenant):
                return []
            tenant = principal.tenant
        return await run(repo.list, tenant)

    @api.get("/{bucket}", response_model=OwnerOut)
    async def get_owner(bucket: BucketPath, principal: Principal = auth.tenant_read()) -> OwnerInfo:
        """404 when the bucket has no explicit owner (it is the bootstrap tenant's)."""
        await auth.check_bucket(principal, bucket)
        return await run(repo.get, bucket)

    @api.put("/{bucket}", response_model=OwnerOut, dependencies=auth.write())
    async def put_owner(bucket: BucketPath, body: OwnerIn, response: Response) -> OwnerInfo:
        """Give the bucket (e.g. one that exists on the remote already) to a tenant; 201 when it had no owner."""
        info, created = await run(repo.assign, bucket, body.tenant)
        changed()
        response.status_code = 201 if created else 200
        return info

    @api.delete("/{bucket}", status_code=204, dependencies=auth.write())
    async def delete_owner(bucket: BucketPath) -> Response:
        """Remove the explicit owner: the bucket is the bootstrap tenant's again."""
        await run(repo.delete, bucket)
        changed()
        return Response(status_code=204)

    return api
