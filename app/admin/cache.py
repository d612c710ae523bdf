"""The read cache: usage, evicting a prefix and wiping. Only clean (cached) data is dropped:
writes not yet on the remote live in the write journal and are never touched here."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.encoders import jsonable_encoder
from pydantic import Field

from app.adapters.catalog.cache.usage import CacheUsage
from app.admin.auth import Authenticator, Principal
from app.admin.common import BucketName, Counted, Model, Out, Prefix, Text, run
from app.bootstrap import Container


class UsageRowOut(Out):
    name: str
    entries: int
    bytes: int
    pinned_bytes: int


class TenantUsageOut(Out):
    tenant_id: int | None
    tenant: str | None
    entries: int
    bytes: int
    quota_bytes: int | None


class UsageOut(Out):
    entries: int
    bytes: int
    capacity_bytes: int
    nodes: list[UsageRowOut]
    buckets: list[UsageRowOut]
    tenants: list[TenantUsageOut]
    local: dict[str, Any] | None = None  # this node's cache engine's own figures, when it has any


class CopyOut(Out):
    node_id: str
    state: str  # ready (served from disk) | seen (one miss recorded, nothing cached) | invalid
    etag: str
    size: int
    block_size: int
    blocks: int
    cached_bytes: int
    pinned: bool
    hits: int
    last_access: float
    validated_at: float


class ObjectCacheOut(Out):
    bucket: str
    key: str
    cached: bool  # a ready entry on some node
    copies: list[CopyOut]


class EvictIn(Model):
    bucket: BucketName
    prefix: Prefix = ""


class SweepIn(Model):
    grace_seconds: float = Field(600.0, ge=0, le=86400 * 30,
                                 description="only block files published longer ago than this are judged")


def router(container: Container, auth: Authenticator) -> APIRouter:
    queries = container.admin.cache_usage
    api = APIRouter(prefix="/admin/cache", tags=["cache"])

    @api.get("/usage", response_model=UsageOut, dependencies=auth.read())
    async def usage() -> UsageOut:
        """Cached bytes per node, bucket and tenant (with each tenant's quota), from the catalog."""
        u: CacheUsage = await run(queries.usage)
        local = jsonable_encoder(await run(container.cache.usage))
        return UsageOut(entries=u.entries, bytes=u.bytes, capacity_bytes=container.settings.cache_bytes,
                        nodes=[UsageRowOut.model_validate(r) for r in u.nodes],
                        buckets=[UsageRowOut.model_validate(r) for r in u.buckets],
                        tenants=[TenantUsageOut.model_validate(r) for r in u.tenants], local=local)

    @api.get("/object", response_model=ObjectCacheOut)
    async def object_copies(bucket: Annotated[Text, Query()], key: Annotated[Prefix, Query()],
                            principal: Principal = auth.tenant_read()) -> ObjectCacheOut:
        """Which nodes cache bucket/key, in how many blocks, how much of it, and how it is used."""
        await auth.check_bucket(principal, bucket)
        rows = await run(queries.copies, bucket, key)
        copies = [CopyOut.model_validate(r) for r in rows]
        return ObjectCacheOut(bucket=bucket, key=key, cached=any(c.state == "ready" for c in copies),
                              copies=copies)

    @api.get("/sizing")
    async def sizing(principal: Principal = auth.tenant_read()) -> dict[str, Any]:
        """Sizing: the miss-ratio curve of this process's reads, as points (cache bytes, hit
        ratio) around the node's budget (budget/4 .. 4 x budget), per bucket and tenant too,
        the bytes touched in the last hour and day, and predicted against measured hit ratio.
        Per worker process (``scope``, ``pid``). A tenant-bound token sees its own tenant and
        buckets only (docs/operations.md, "Sizing")."""
        recorder = container.cache.sizing
        if principal.tenant_id is None:
            doc = await run(recorder.report)
            named = {str(t.id): t.name for t in await run(container.admin.tenants.list)} if doc["tenants"] else {}
        else:
            names = [n[len("bucket:"):] for n in recorder.node.part_accesses() if n.startswith("bucket:")]
            mine = await auth.visible(principal, names)
            doc = await run(lambda: recorder.report(buckets=mine, tenant_id=principal.tenant_id))
            named = {str(principal.tenant_id): principal.tenant or ""}
        for tenant_id, entry in doc["tenants"].items():
            entry["name"] = named.get(tenant_id)
        workers = container.settings.workers
        doc.update(workers=workers, node_id=container.settings.node_id)
        if workers > 1:
            doc["note"] = (f"the curves of worker pid {doc['pid']}: the reads it served, about 1/{workers} of the "
                           "node's, each worker keeps its own; size a node from one worker (FERRY_WORKERS=1)")
        return doc

    @api.post("/evict", response_model=Counted)
    async def evict(body: EvictIn, principal: Principal = auth.tenant_write()) -> Counted:
        """Drop cached objects under bucket/prefix on this node (the next read fetches again)."""
        await auth.check_bucket(principal, body.bucket)
        entries, nbytes = await run(container.cache.evict_prefix, body.bucket, body.prefix)
        return Counted(entries=entries, bytes=nbytes)

    @api.post("/wipe", response_model=Counted, dependencies=auth.write())
    async def wipe() -> Counted:
        """Drop this node's whole read cache. Buffered writes are kept."""
        entries, nbytes = await run(container.cache.wipe)
        return Counted(entries=entries, bytes=nbytes)

    @api.post("/sweep", response_model=Counted, dependencies=auth.write())
    async def sweep(body: SweepIn | None = None) -> Counted:
        """Delete block files that no cache entry of this node accounts for (left by a crash
        between an entry's delete and the unlink of its blocks). Also runs daily on its own."""
        grace = (body or SweepIn.model_validate({})).grace_seconds
        files, nbytes = await run(container.cache.sweep_orphans, grace)
        return Counted(entries=files, bytes=nbytes)

    return api
