"""Read cache usage from the ``cache_entries`` table: per node, bucket and tenant (fleet-wide)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import InstrumentedAttribute

from app.adapters.catalog.cache.entry_rows import SHARED_NODE
from app.adapters.catalog.engine import Sessions
from app.adapters.catalog.tables import CacheEntry, Tenant
from app.domain.states import CacheState


@dataclass(frozen=True)
class UsageRow:
    name: str
    entries: int
    bytes: int
    pinned_bytes: int


@dataclass(frozen=True)
class TenantUsage:
    tenant_id: int | None
    tenant: str | None
    entries: int
    bytes: int
    quota_bytes: int | None


@dataclass(frozen=True)
class CacheUsage:
    entries: int
    bytes: int
    nodes: list[UsageRow]
    buckets: list[UsageRow]
    tenants: list[TenantUsage]


@dataclass(frozen=True)
class CachedCopy:
    """One node's cache entry for a key: which node, which version, how much of it is on disk."""

    node_id: str
    state: str
    etag: str
    size: int
    block_size: int
    blocks: int
    cached_bytes: int
    pinned: bool
    hits: int
    last_access: float
    validated_at: float


class CacheUsageQueries:
    def __init__(self, engine: Engine) -> None:
        self.sessions = Sessions(engine)

    def usage(self) -> CacheUsage:
        ready = CacheEntry.state == CacheState.READY.value
        pinned = func.coalesce(func.sum(CacheEntry.cached_bytes).filter(CacheEntry.pinned.is_(True)), 0)

        def grouped(column: InstrumentedAttribute[str]) -> list[UsageRow]:
            stmt = (select(column, func.count(), func.coalesce(func.sum(CacheEntry.cached_bytes), 0), pinned)
                    .where(ready).group_by(column).order_by(column))
            with self.sessions() as s:
                return [UsageRow(str(name), int(n), int(b), int(p)) for name, n, b, p in s.execute(stmt)]

        nodes = grouped(CacheEntry.node_id)
        buckets = grouped(CacheEntry.bucket)
        with self.sessions() as s:
            by_tenant = {tid: (int(n), int(b)) for tid, n, b in s.execute(
                select(CacheEntry.tenant_id, func.count(), func.coalesce(func.sum(CacheEntry.cached_bytes), 0))
                .where(ready).group_by(CacheEntry.tenant_id))}
            tenants = {t.id: t for t in s.scalars(select(Tenant))}
        rows = [TenantUsage(t.id, t.name, *by_tenant.get(t.id, (0, 0)), t.cache_quota_bytes)
                for t in sorted(tenants.values(), key=lambda t: t.name)]
        rows += [TenantUsage(tid, None, n, b, None) for tid, (n, b) in by_tenant.items() if tid not in tenants]
        return CacheUsage(sum(r.entries for r in nodes), sum(r.bytes for r in nodes), nodes, buckets, rows)

    def copies(self, bucket: str, key: str) -> list[CachedCopy]:
        """Every node's entry for (bucket, key), fleet-wide, without the shared invalidation tombstone."""
        stmt = (select(CacheEntry).where(CacheEntry.bucket == bucket, CacheEntry.key == key,
                                         CacheEntry.node_id != SHARED_NODE).order_by(CacheEntry.node_id))
        with self.sessions() as s:
            return [CachedCopy(e.node_id, e.state, e.etag, e.size, e.block_size,
                               max(1, -(-e.size // max(1, e.block_size))), e.cached_bytes,
                               bool(e.pinned), e.hits, e.last_access, e.validated_at)
                    for e in s.scalars(stmt)]
