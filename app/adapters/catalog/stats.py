"""Aggregate figures of one node's catalog rows, for /metrics and the status page.

Read at scrape time rather than kept as counters in memory: the catalog is the truth shared by
every worker process (and node), so a scrape counts each byte once however many workers run.
Each query is one aggregate over an indexed subset (dirty journal rows by state) or one node's
cache entries; the metrics collector reuses a result for a couple of seconds.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, case, func, or_, select

from app.adapters.catalog.tables import CacheEntry, MultipartPart, ObjectVersion, StagingJob, Tenant
from app.domain.states import DIRTY, CacheState
from app.metrics import NodeStats, TenantUsage

_DIRTY_VALUES = tuple(s.value for s in DIRTY)
ACTIVE_STAGING_STATES = ("queued", "running")


class CatalogStats:
    def __init__(self, engine: Engine, node_id: str) -> None:
        self.engine = engine
        self.node_id = node_id
        self._journal = (
            select(ObjectVersion.state, func.count(), func.coalesce(func.sum(ObjectVersion.size), 0),
                   func.min(ObjectVersion.created_at))
            .where(ObjectVersion.state.in_(_DIRTY_VALUES), ObjectVersion.node_id == node_id)
            .group_by(ObjectVersion.state)
        )
        self._parts = select(func.coalesce(func.sum(MultipartPart.size), 0)).where(
            or_(MultipartPart.node_id == node_id, MultipartPart.node_id.is_(None)))
        self._cache = (
            select(CacheEntry.tenant_id,
                   func.coalesce(func.sum(CacheEntry.cached_bytes), 0),
                   func.coalesce(func.sum(case((CacheEntry.pinned, CacheEntry.cached_bytes), else_=0)), 0),
                   func.coalesce(func.sum(case((CacheEntry.state == CacheState.READY.value, 1), else_=0)), 0))
            .where(CacheEntry.node_id == node_id)
            .group_by(CacheEntry.tenant_id)
        )
        self._tenants = select(Tenant.id, Tenant.name, Tenant.cache_quota_bytes)

    def node_stats(self) -> NodeStats:
        now = datetime.now(UTC)
        with self.engine.connect() as conn:
            dirty_versions: dict[str, int] = {}
            dirty_bytes = 0
            oldest: datetime | None = None
            for state, count, size, first_at in conn.execute(self._journal):
                dirty_versions[str(state)] = int(count)
                dirty_bytes += int(size)
                first = _aware(first_at)
                if first is not None and (oldest is None or first < oldest):
                    oldest = first
            parts = int(conn.scalar(self._parts) or 0)
            usage = {("" if tid is None else str(tid)): (int(c), int(p), int(n))
                     for tid, c, p, n in conn.execute(self._cache)}
            tenants = {str(tid): (str(name), quota) for tid, name, quota in conn.execute(self._tenants)}
        rows = []
        for tenant in sorted(set(usage) | set(tenants)):
            cached, pinned, entries = usage.get(tenant, (0, 0, 0))
            name, quota = tenants.get(tenant, ("", None))
            rows.append(TenantUsage(tenant, name, cached, pinned, entries, int(quota) if quota is not None else None))
        age = max(0.0, (now - oldest).total_seconds()) if oldest is not None else 0.0
        return NodeStats(rows, dirty_versions, dirty_bytes, age, parts)

    def staging_jobs(self, limit: int = 50) -> list[dict[str, Any]]:
        """Queued and running staging jobs of every node, oldest first."""
        stmt = (select(StagingJob.id, StagingJob.bucket, StagingJob.prefix, StagingJob.node_id, StagingJob.state,
                       StagingJob.objects_total, StagingJob.objects_done, StagingJob.bytes_total,
                       StagingJob.bytes_done, StagingJob.listing_done, StagingJob.created_at, StagingJob.started_at)
                .where(StagingJob.state.in_(ACTIVE_STAGING_STATES))
                .order_by(StagingJob.created_at).limit(limit))
        now = time.time()
        with self.engine.connect() as conn:
            jobs = [dict(row._mapping) for row in conn.execute(stmt)]
        for job in jobs:
            started = job.get("started_at")
            job["running_seconds"] = round(now - started, 1) if started else None
        return jobs


def _aware(when: Any) -> datetime | None:
    if when is None:
        return None
    if isinstance(when, str):  # a driver that did not convert (aggregates on SQLite)
        when = datetime.fromisoformat(when)
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when
