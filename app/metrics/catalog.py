"""Gauges read from the catalog when scraped (cached, pinned and dirty bytes, destage lag)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily, Metric

from app.domain.states import DIRTY


@dataclass(frozen=True)
class TenantUsage:
    tenant: str  # tenant id as text ("" for entries without a tenant), as in the counters' labels
    name: str
    cached_bytes: int
    pinned_bytes: int
    entries: int
    quota_bytes: int | None = None


@dataclass(frozen=True)
class NodeStats:
    """Aggregates of this node's catalog rows (see app/adapters/catalog/stats.py)."""

    tenants: list[TenantUsage] = field(default_factory=list)
    dirty_versions: dict[str, int] = field(default_factory=dict)  # by journal state (dirty states)
    dirty_bytes: int = 0
    oldest_dirty_age: float = 0.0  # seconds; 0 when nothing is dirty
    multipart_bytes: int = 0  # parts of open multipart uploads

    @property
    def cached_bytes(self) -> int:
        return sum(t.cached_bytes for t in self.tenants)

    @property
    def pinned_bytes(self) -> int:
        return sum(t.pinned_bytes for t in self.tenants)

    @property
    def queue_depth(self) -> int:
        return self.dirty_versions.get("buffered", 0) + self.dirty_versions.get("destaging", 0)


class StatsSource(Protocol):
    def node_stats(self) -> NodeStats: ...


class CatalogCollector:
    """Gauges read from the catalog when scraped: one scrape runs one set of aggregate queries.

    A scrape always queries; the status page's polls (``stats()``) reuse a result up to ``ttl``
    seconds old, so many open pages cost one set of queries per ``ttl``, not one each.
    """

    def __init__(self, source: StatsSource, *, write_buffer_bytes: int, cache_budget_bytes: int,
                 ttl: float = 2.0) -> None:
        self.source = source
        self.write_buffer_bytes = write_buffer_bytes
        self.cache_budget_bytes = cache_budget_bytes
        self.ttl = ttl
        self._cached: tuple[float, NodeStats, float] | None = None

    def stats(self, max_age: float | None = None) -> NodeStats:
        """Aggregates at most ``max_age`` (default ``ttl``) seconds old; raises if the catalog cannot be read."""
        now = time.monotonic()
        cached = self._cached
        if cached is not None and now - cached[0] < (self.ttl if max_age is None else max_age):
            return cached[1]
        started = time.perf_counter()
        stats = self.source.node_stats()
        self._cached = (now, stats, time.perf_counter() - started)
        return stats

    def describe(self) -> Iterable[Metric]:
        return list(self._families(None, 0.0))

    def collect(self) -> Iterable[Metric]:
        try:
            stats = self.stats(max_age=0.0)
        except Exception:
            stats = None
        took = self._cached[2] if self._cached else 0.0
        return list(self._families(stats, took))

    def _families(self, stats: NodeStats | None, took: float) -> Iterator[Metric]:
        yield GaugeMetricFamily("ferry_write_buffer_bytes", "Write buffer budget (FERRY_WRITE_BUFFER_BYTES)",
                                value=self.write_buffer_bytes)
        yield GaugeMetricFamily("ferry_cache_budget_bytes", "Read cache budget (FERRY_CACHE_BYTES)",
                                value=self.cache_budget_bytes)
        yield GaugeMetricFamily("ferry_catalog_up", "1 if the catalog answered this scrape's queries",
                                value=0 if stats is None else 1)
        yield GaugeMetricFamily("ferry_catalog_scrape_duration_seconds",
                                "Time the catalog aggregate queries took", value=took)
        s = stats or NodeStats()
        cached = GaugeMetricFamily("ferry_cache_bytes", "Bytes held in the read cache on this node, by tenant",
                                   labels=["tenant"])
        pinned = GaugeMetricFamily("ferry_cache_pinned_bytes", "Cached bytes under pinned policies, by tenant",
                                   labels=["tenant"])
        entries = GaugeMetricFamily("ferry_cache_entries", "Cached objects ready to serve, by tenant",
                                    labels=["tenant"])
        quota = GaugeMetricFamily("ferry_tenant_cache_quota_bytes", "Cache quota of a tenant (when set)",
                                  labels=["tenant"])
        info = GaugeMetricFamily("ferry_tenant_info", "Tenant id to name (join on the tenant label)",
                                 labels=["tenant", "name"])
        for t in s.tenants:
            cached.add_metric([t.tenant], t.cached_bytes)
            pinned.add_metric([t.tenant], t.pinned_bytes)
            entries.add_metric([t.tenant], t.entries)
            if t.quota_bytes is not None:
                quota.add_metric([t.tenant], t.quota_bytes)
            if t.name:
                info.add_metric([t.tenant, t.name], 1)
        yield from (cached, pinned, entries, quota, info)
        versions = GaugeMetricFamily("ferry_dirty_versions", "Journal rows not yet on the remote, by state",
                                     labels=["state"])
        for state in DIRTY:
            versions.add_metric([state.value], s.dirty_versions.get(state.value, 0))
        yield versions
        yield GaugeMetricFamily("ferry_dirty_bytes", "Bytes written by clients and not yet durable on the remote",
                                value=s.dirty_bytes)
        yield GaugeMetricFamily("ferry_multipart_pending_bytes", "Bytes of parts of open multipart uploads",
                                value=s.multipart_bytes)
        yield GaugeMetricFamily("ferry_write_buffer_used_bytes",
                                "What counts against the write buffer: dirty plus open multipart parts",
                                value=s.dirty_bytes + s.multipart_bytes)
        yield GaugeMetricFamily("ferry_destage_queue_depth", "Journal rows waiting for or in destage",
                                value=s.queue_depth)
        yield GaugeMetricFamily("ferry_destage_failed_versions",
                                "Journal rows whose destage gave up (state failed; bytes kept, operator retry)",
                                value=s.dirty_versions.get("failed", 0))
        yield GaugeMetricFamily("ferry_destage_lag_seconds", "Age of the oldest write not yet on the remote",
                                value=s.oldest_dirty_age)


