"""What an agent may ask (read scope) and do (write scope): each tool is one or two admin API calls.

Kept apart from the transport (server.py) so the tools are plain functions over an ``AdminClient``.
"""

from __future__ import annotations

import time
from typing import Any

from app.cli_admin import parse_target
from app.mcp.client import AdminClient, AdminError

CACHE_OUTCOMES = ("hit", "miss", "stale", "bypass")
MAX_WINDOW = 300.0


class ToolFailure(Exception):
    """A message for the agent: what the gateway said, and for 401/403 what token is needed."""


def explain(exc: AdminError, action: bool) -> ToolFailure:
    """403 on an action means the token lacks the write scope: say so plainly, not just the code."""
    if exc.status == 403 and action:
        return ToolFailure(f"forbidden (403): this action needs a write-scoped admin token; the token "
                           f"given to ferry mcp is not allowed to run it ({exc.detail})")
    if exc.status == 401:
        return ToolFailure(f"unauthorized (401): set FERRY_ADMIN_TOKEN for ferry mcp ({exc.detail})")
    return ToolFailure(f"the gateway answered {exc}")


def _ratio(counts: dict[str, float]) -> float | None:
    served = sum(counts.get(o, 0.0) for o in ("hit", "miss", "stale"))
    return round(counts.get("hit", 0.0) / served, 4) if served else None


def _diff(after: Any, before: Any) -> Any:
    """Counter deltas of two /admin/stats documents (numbers subtract, dicts recurse)."""
    if isinstance(after, dict) and isinstance(before, dict):
        return {k: _diff(v, before.get(k)) for k, v in after.items()}
    if isinstance(after, (int, float)) and isinstance(before, (int, float)):
        return after - before
    return after


def _traffic_of(doc: dict[str, Any], before: dict[str, Any] | None) -> dict[str, Any]:
    requests, cache = doc["requests"], doc["cache"]
    rows = {(r["bucket"], r["tenant"]): r for r in cache["by_bucket"]}
    old_rows = {(r["bucket"], r["tenant"]): r for r in (before or {}).get("cache", {}).get("by_bucket", [])}
    if before is not None:
        requests = _diff(requests, before["requests"])
        cache = {**cache, "outcomes": _diff(cache["outcomes"], before["cache"]["outcomes"])}
        rows = {k: _diff(r, old_rows.get(k, {})) for k, r in rows.items()}
    by_bucket = [{"bucket": b, "tenant": t, "tenant_name": r.get("tenant_name", ""),
                  **{o: r.get(o, 0.0) for o in CACHE_OUTCOMES},
                  "hit_ratio": _ratio(r)} for (b, t), r in sorted(rows.items())]
    by_tenant: dict[str, dict[str, float]] = {}
    for row in by_bucket:
        acc = by_tenant.setdefault(row["tenant_name"] or row["tenant"], dict.fromkeys(CACHE_OUTCOMES, 0.0))
        for o in CACHE_OUTCOMES:
            acc[o] += row[o]
    return {"hit_ratio": _ratio(cache["outcomes"]), "cache_outcomes": cache["outcomes"],
            "requests": requests["total"], "errors": requests["errors"],
            "bytes_in": requests["bytes_in"], "bytes_out": requests["bytes_out"],
            "by_operation": requests["by_operation"], "by_bucket": by_bucket,
            "by_tenant": [{"tenant": t, **c, "hit_ratio": _ratio(c)} for t, c in sorted(by_tenant.items())]}


def traffic(admin: AdminClient, window_seconds: float = 0.0) -> dict[str, Any]:
    """Hit ratio, requests and bytes by tenant and bucket: since start, or over a window sampled now."""
    first = admin.get("/admin/stats")
    if window_seconds <= 0:
        return {"window": "since the gateway started (cumulative counters)", "node_id": first["node_id"],
                **_traffic_of(first, None), "latency_by_bucket": _latency(admin, 86400.0)}
    window = min(float(window_seconds), MAX_WINDOW)
    time.sleep(window)
    second = admin.get("/admin/stats")
    return {"window": f"the last {round(second['time'] - first['time'], 3)} s (two samples, diffed)",
            "node_id": second["node_id"], **_traffic_of(second, first),
            "latency_by_bucket": _latency(admin, window)}


def _latency(admin: AdminClient, window: float) -> dict[str, Any]:
    doc = admin.get("/admin/requests/slowest", limit=1, window_seconds=window)
    return {"rows": doc["latency_by_bucket"],
            "note": "from the answering worker's last 1024 requests within the window, not all traffic"}


def status(admin: AdminClient) -> dict[str, Any]:
    """Node status (stats) with readiness, and the fleet as the catalog sees it (nodes with cached bytes)."""
    stats = admin.get("/admin/stats")
    try:
        ready = admin.get("/readyz")
    except AdminError as exc:  # /readyz answers 503 with its detail when not ready
        ready = {"ready": False, "detail": exc.detail}
    usage = admin.get("/admin/cache/usage")
    return {"node": {k: stats[k] for k in ("node_id", "catalog_ok", "cache", "writes", "destage", "remote")},
            "ready": ready, "fleet": {"nodes": usage.get("nodes", []), "cached_bytes": usage.get("bytes"),
                                      "entries": usage.get("entries")},
            "staging_jobs": stats.get("staging_jobs", [])}


def cache_sizing(admin: AdminClient) -> dict[str, Any]:
    """The miss-ratio curve (GET /admin/cache/sizing): hit ratio at cache sizes around the budget,
    per bucket and tenant, bytes touched in the last hour and day, predicted against measured."""
    return admin.get("/admin/cache/sizing")


def where_is(admin: AdminClient, uri: str) -> dict[str, Any]:
    """Cache copies (node, blocks, bytes) and journal history (dirty or durable, last error) of a key."""
    bucket, key = parse_target(uri)
    if not key:
        raise ToolFailure("give a key: s3://bucket/key")
    versions = [v for v in admin.get("/admin/objects", bucket=bucket, prefix=key, limit=1000)["versions"]
                if v["key"] == key]
    dirty = [e for e in admin.get("/admin/journal", bucket=bucket, prefix=key, limit=1000)["entries"]
             if e["key"] == key]
    latest = versions[0] if versions else None
    cache = admin.get("/admin/cache/object", bucket=bucket, key=key)
    return {"bucket": bucket, "key": key, "cached": cache["cached"], "cache_copies": cache["copies"],
            "journaled": bool(versions),
            "state": latest["state"] if latest else None,
            "durable": latest["durable_at"] is not None if latest else None,
            "last_error": next((v["last_error"] for v in versions if v["last_error"]), None),
            "dirty": dirty, "history": versions,
            "note": "history is the write journal: a key never written through Ferry has none; "
                    "cache_copies lists each node's cache entry (blocks of block_size bytes)"}


def destage(admin: AdminClient, limit: int = 50) -> dict[str, Any]:
    """Destage lag (oldest dirty age), counts, and the failed rows with their errors."""
    summary = admin.get("/admin/journal/summary")
    failed = admin.get("/admin/journal", state="failed", limit=max(1, min(limit, 1000)))["entries"]
    return {"summary": summary, "failed": failed}


def slow_requests(admin: AdminClient, limit: int = 20, window_seconds: float = 3600) -> dict[str, Any]:
    """The slowest recent S3 requests (of the worker that answers) with auth/lookup/transfer stages."""
    return admin.get("/admin/requests/slowest", limit=max(1, min(limit, 200)),
                     window_seconds=max(1.0, min(window_seconds, 86400.0)))


def effective_policy(admin: AdminClient, uri: str) -> dict[str, Any]:
    bucket, key = parse_target(uri)
    return admin.get("/admin/policies/effective", bucket=bucket, key=key)


def stage(admin: AdminClient, uri: str, tenant: str | None = None) -> dict[str, Any]:
    bucket, prefix = parse_target(uri)
    return admin.post("/admin/staging", {"bucket": bucket, "prefix": prefix, "tenant": tenant})


def flush(admin: AdminClient, uri: str = "", timeout_seconds: float = 60.0) -> dict[str, Any]:
    bucket, prefix = parse_target(uri) if uri else (None, "")
    timeout = max(0.1, min(timeout_seconds, 3600.0))
    params = {"bucket": bucket or None, "prefix": prefix, "wait": True, "timeout": timeout}
    return admin.call("POST", "/admin/flush", params=params, timeout=timeout + 30)


def evict(admin: AdminClient, uri: str) -> dict[str, Any]:
    bucket, prefix = parse_target(uri)
    return admin.post("/admin/cache/evict", {"bucket": bucket, "prefix": prefix})


def retry(admin: AdminClient, seq: int) -> dict[str, Any]:
    return admin.post(f"/admin/journal/{int(seq)}/retry")
