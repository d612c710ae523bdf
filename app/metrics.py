"""Prometheus metrics: the figures an operator alerts on.

The services call the small functions below; they never import prometheus_client themselves.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

CACHE_REQUESTS = Counter("ferry_cache_requests_total", "Object reads by cache outcome",
                         ["bucket", "tenant", "outcome"])
CACHE_BYTES = Counter("ferry_cache_served_bytes_total", "Bytes served to clients by cache outcome",
                      ["bucket", "outcome"])
CACHE_EVICTIONS = Counter("ferry_cache_evictions_total", "Cache entries evicted", ["reason"])
CACHE_EVICTED_BYTES = Counter("ferry_cache_evicted_bytes_total", "Bytes evicted from the cache", ["reason"])
REMOTE_FETCH_BYTES = Counter("ferry_cache_remote_fetch_bytes_total", "Bytes fetched from the remote to fill the cache")
SINGLEFLIGHT_WAITS = Histogram("ferry_cache_singleflight_wait_seconds",
                               "Time a reader waited for another reader's fetch of the same block",
                               buckets=(0.001, 0.005, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
REVALIDATIONS = Counter("ferry_cache_revalidations_total", "Revalidations of cached entries by result",
                        ["result"])


def cache_outcome(outcome: str, bucket: str, tenant: int | None) -> None:
    """One object read: hit, miss, stale (served past policy during an outage) or bypass."""
    CACHE_REQUESTS.labels(bucket, str(tenant) if tenant is not None else "", outcome).inc()


def served_bytes(outcome: str, bucket: str, nbytes: int) -> None:
    CACHE_BYTES.labels(bucket, outcome).inc(nbytes)


def evicted(reason: str, entries: int, nbytes: int) -> None:
    CACHE_EVICTIONS.labels(reason).inc(entries)
    CACHE_EVICTED_BYTES.labels(reason).inc(nbytes)


def remote_fetched(nbytes: int) -> None:
    REMOTE_FETCH_BYTES.inc(nbytes)


def singleflight_waited(seconds: float) -> None:
    SINGLEFLIGHT_WAITS.observe(seconds)


def revalidated(result: str) -> None:
    """result: unchanged, changed, deleted, error."""
    REVALIDATIONS.labels(result).inc()
