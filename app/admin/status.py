"""The status page: ``GET /admin/status`` (HTML, no data in it) polls ``GET /admin/stats`` (JSON, read scope).

No front-end build and nothing loaded from elsewhere: the page is one HTML document with inline
script and SVG (app/admin/status_page.py). It keeps a ring of samples of the cumulative counters
and charts their differences (hit ratio over time), next to the catalog's live figures (dirty bytes,
destage lag, cache usage per tenant) and the running staging jobs.

The JSON adds up every worker process's counters (prometheus_client multiprocess files), so any
worker answering a poll gives the same totals.
"""

from __future__ import annotations

import os
import time
from collections import defaultdict
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import HTMLResponse

from app import metrics, slowlog
from app.adapters.catalog.stats import CatalogStats
from app.admin.auth import Authenticator
from app.admin.common import run
from app.admin.status_page import PAGE
from app.bootstrap import Container

_COLLECTORS: dict[int, tuple[Container, metrics.CatalogCollector]] = {}

_COUNTERS = (
    "ferry_http_requests_total", "ferry_http_request_bytes_total", "ferry_http_response_bytes_total",
    "ferry_cache_requests_total", "ferry_cache_evictions_total", "ferry_destage_attempts_total",
    "ferry_destage_failures_total", "ferry_destaged_bytes_total", "ferry_remote_requests_total",
    "ferry_remote_circuit_state", "ferry_remote_circuit_rejected_total", "ferry_remote_body_errors_total",
)
CIRCUIT_NAMES = {0: "closed", 1: "half-open", 2: "open"}
CACHE_OUTCOMES = ("hit", "miss", "stale", "bypass")


Samples = dict[str, list[tuple[dict[str, str], float]]]  # metrics.samples: name -> (labels, value)

def catalog_collector(container: Container) -> metrics.CatalogCollector:
    """The process's one collector of catalog gauges, shared by /metrics and /admin/stats so both
    reuse one set of aggregate queries per couple of seconds."""
    entry = _COLLECTORS.get(id(container))
    if entry is None or entry[0] is not container:
        settings = container.settings
        collector = metrics.CatalogCollector(container.admin.stats,
                                             write_buffer_bytes=settings.write_buffer_bytes,
                                             cache_budget_bytes=settings.cache_bytes)
        entry = _COLLECTORS[id(container)] = (container, collector)
    return entry[1]


def _sum_by(rows: list[tuple[dict[str, str], float]], *labels: str) -> dict[Any, float]:
    out: dict[Any, float] = defaultdict(float)
    for sample_labels, value in rows:
        key = tuple(sample_labels.get(name, "") for name in labels)
        out[key[0] if len(key) == 1 else key] += value
    return out


def stats_document(container: Container) -> dict[str, Any]:
    """Everything the page shows, in one blocking call (catalog queries + counter files)."""
    collector = catalog_collector(container)
    try:
        node = collector.stats()
        catalog_ok = True
    except Exception:
        node, catalog_ok = metrics.NodeStats(), False
    s = metrics.samples(_COUNTERS)
    remote = _sum_by(s["ferry_remote_requests_total"], "outcome")
    settings = container.settings
    return {
        "time": time.time(),
        "node_id": settings.node_id,
        "catalog_ok": catalog_ok,
        "requests": _requests(s),
        "cache": _cache(s, node, settings.cache_bytes),
        "writes": {
            "dirty_bytes": node.dirty_bytes,
            "multipart_bytes": node.multipart_bytes,
            "buffer_bytes": settings.write_buffer_bytes,
            "queue_depth": node.queue_depth,
            "failed": node.dirty_versions.get("failed", 0),
            "lag_seconds": round(node.oldest_dirty_age, 3),
            "versions": node.dirty_versions,
        },
        "destage": {
            "attempts": _sum_by(s["ferry_destage_attempts_total"], "outcome"),
            "failures": sum(v for _, v in s["ferry_destage_failures_total"]),
            "bytes": sum(v for _, v in s["ferry_destaged_bytes_total"]),
        },
        "remote": {
            "requests": sum(remote.values()),
            # Calls that failed, and bodies that failed after good headers (cut short, altered).
            "errors": remote.get("server_error", 0.0) + remote.get("network", 0.0)
            + sum(v for _, v in s["ferry_remote_body_errors_total"]),
            "body_errors": _sum_by(s["ferry_remote_body_errors_total"], "reason"),
            **_circuit(container, s),
        },
        "staging_jobs": _staging_jobs(collector),
        "workers": _workers(container),
        # The answering worker's miss-ratio curve (its own reads): GET /admin/cache/sizing has the rest.
        "sizing": container.cache.sizing.summary(node.dirty_bytes if catalog_ok else None),
    }


def _workers(container: Container) -> list[dict[str, Any]]:
    """Each fleet node's worker, beat and queue depth ([] in embedded mode or without a broker)."""
    from app.admin.workers import fleet_workers

    try:
        found = fleet_workers(container)
    except Exception:  # the broker is away: the broker check of /readyz says so
        return []
    return [{"node_id": n, **w.model_dump()} for n, w in found.items()]


def _requests(s: Samples) -> dict[str, Any]:
    """The HTTP section: totals, and requests and bytes per S3 operation."""
    http_by_op = _sum_by(s["ferry_http_requests_total"], "operation")
    http_by_outcome = _sum_by(s["ferry_http_requests_total"], "outcome")
    bytes_in = _sum_by(s["ferry_http_request_bytes_total"], "operation")
    bytes_out = _sum_by(s["ferry_http_response_bytes_total"], "operation")
    return {
        "total": sum(http_by_op.values()),
        "errors": http_by_outcome.get("error", 0.0),
        "client_errors": http_by_outcome.get("client_error", 0.0),
        "bytes_in": sum(bytes_in.values()),
        "bytes_out": sum(bytes_out.values()),
        "by_operation": {op: {"requests": n, "bytes_in": bytes_in.get(op, 0.0), "bytes_out": bytes_out.get(op, 0.0)}
                         for op, n in sorted(http_by_op.items())},
        "by_outcome": dict(http_by_outcome),
    }


def _cache(s: Samples, node: metrics.NodeStats, budget_bytes: int) -> dict[str, Any]:
    """The cache section: outcomes overall and per (bucket, tenant), usage per tenant."""
    cache_outcomes = _sum_by(s["ferry_cache_requests_total"], "outcome")
    by_bucket: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: dict.fromkeys(CACHE_OUTCOMES, 0.0))
    for labels, value in s["ferry_cache_requests_total"]:
        counts = by_bucket[(labels.get("bucket", ""), labels.get("tenant", ""))]
        outcome = labels.get("outcome", "")
        counts[outcome] = counts.get(outcome, 0.0) + value
    names = {t.tenant: t.name for t in node.tenants}
    return {
        "outcomes": {o: cache_outcomes.get(o, 0.0) for o in CACHE_OUTCOMES},
        "by_bucket": [{"bucket": b, "tenant": t, "tenant_name": names.get(t, ""), **counts}
                      for (b, t), counts in sorted(by_bucket.items())],
        "tenants": [{"tenant": t.tenant, "name": t.name, "cached_bytes": t.cached_bytes,
                     "pinned_bytes": t.pinned_bytes, "entries": t.entries, "quota_bytes": t.quota_bytes}
                    for t in node.tenants],
        "cached_bytes": node.cached_bytes,
        "pinned_bytes": node.pinned_bytes,
        "budget_bytes": budget_bytes,
        "evictions": sum(v for _, v in s["ferry_cache_evictions_total"]),
    }


def _circuit(container: Container, s: dict[str, list[tuple[dict[str, str], float]]]) -> dict[str, Any]:
    """The default remote's circuit breaker, the worst over the workers (each holds its own), and
    how many calls it refused at once."""
    circuit = getattr(container.remote, "circuit", None)
    endpoint = circuit.endpoint if circuit is not None else ""
    states = [v for labels, v in s["ferry_remote_circuit_state"] if labels.get("endpoint") == endpoint]
    worst = int(max(states)) if states else 0
    if circuit is not None:
        worst = max(worst, {v: k for k, v in CIRCUIT_NAMES.items()}[circuit.state])
    return {"circuit": CIRCUIT_NAMES.get(worst, "closed"),
            "circuit_rejected": sum(v for labels, v in s["ferry_remote_circuit_rejected_total"]
                                    if labels.get("endpoint") == endpoint)}


def _staging_jobs(collector: metrics.CatalogCollector) -> list[dict[str, Any]]:
    source = collector.source
    if not isinstance(source, CatalogStats):
        return []
    try:
        return source.staging_jobs()
    except Exception:  # the page still shows the counters when the catalog is away
        return []


def status_router(container: Container, auth: Authenticator | None = None) -> APIRouter:
    """/admin/status (public HTML shell: shows nothing without a token) and /admin/stats (read scope)."""
    auth = auth or Authenticator(container)
    api = APIRouter(tags=["status"])

    @api.get("/admin/status", response_class=HTMLResponse, include_in_schema=False)
    async def status_page() -> HTMLResponse:
        """The page itself holds no data: it asks /admin/stats with the token the operator gives it."""
        return HTMLResponse(PAGE, headers={"Cache-Control": "no-store", "X-Frame-Options": "DENY",
                                           "Content-Security-Policy": "default-src 'none'; script-src 'unsafe-inline'; "
                                           "style-src 'unsafe-inline'; connect-src 'self'; img-src data:"})

    @api.get("/admin/requests/slowest", dependencies=auth.read())
    async def slowest(limit: Annotated[int, Query(ge=1, le=200)] = 20,
                      window_seconds: Annotated[float, Query(gt=0, le=86400)] = 3600) -> dict[str, Any]:
        """This worker's slowest recent S3 requests, with the time spent in each stage."""
        return {"node_id": container.settings.node_id, "pid": os.getpid(),
                "slow_seconds": slowlog.SLOW_SECONDS,
                "requests": slowlog.slowest(limit, time.time() - window_seconds),
                "latency_by_bucket": slowlog.latency(time.time() - window_seconds)}

    @api.get("/admin/stats", dependencies=auth.read())
    async def stats() -> dict[str, Any]:
        """Cumulative counters (all workers) and the catalog's live figures; poll it and diff."""
        metrics.flush_requests()
        return await run(stats_document, container)

    return api
