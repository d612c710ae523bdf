"""Readiness: can this node serve? Liveness (``/healthz``) only says the process answers.

``/readyz`` checks the catalog, the broker, this node's worker and beat, its fleet port and
peers (fleet mode), the default remote (and its circuit breaker, open while the remote does
not answer) and free space in the data directory, each with a short bound, and answers 503
when any fails, so a load balancer stops sending traffic to a node that would only produce errors.

Probes are anonymous and frequent: an anonymous caller gets only ``{"ready": ...}`` (error
details name hosts, buckets and paths); a caller with a ``read`` admin token gets every check.
The remote and broker checks are network calls, so their answers are reused for
``FERRY_READY_CACHE_SECONDS`` and shared by every concurrent caller: a burst of probes makes at
most one remote call per window and process.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from fastapi import APIRouter, HTTPException, Security
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials

from app.admin.auth import Authenticator, bearer
from app.admin.common import Out
from app.bootstrap import Container
from app.fleet import worker_heartbeat
from app.services.control.probes import CheckResult, bounded, check_broker, check_catalog, check_disk, check_remote


class CheckOut(Out):
    ok: bool
    latency_ms: float | None
    detail: str | None


class ReadyOut(Out):
    ready: bool
    checks: dict[str, CheckOut] | None = None  # only for a caller with a read token


class CachedCheck:
    """One check's last answer, reused for ``ttl`` seconds; concurrent callers share one run."""

    def __init__(self, run: Callable[[], Awaitable[CheckResult]], ttl: float) -> None:
        self.run = run
        self.ttl = ttl
        self._result: CheckResult | None = None
        self._at = float("-inf")
        self._lock: asyncio.Lock | None = None

    async def __call__(self) -> CheckResult:
        if self._result is not None and time.monotonic() - self._at < self.ttl:
            return self._result
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._result is None or time.monotonic() - self._at >= self.ttl:
                self._result = await self.run()
                self._at = time.monotonic()
        return self._result


async def _circuit(container: Container) -> CheckResult:
    """The default remote's circuit breaker: open means requests needing it fail at once."""
    circuit = getattr(container.remote, "circuit", None)
    state = circuit.state if circuit is not None else "closed"
    return CheckResult(ok=state != "open", latency_ms=None, detail=f"circuit {state}")


async def check_node_worker(url: str, node_id: str, stale_seconds: float, timeout: float = 3.0) -> CheckResult:
    """Fleet mode: a worker consumes this node's queue and its beat runs (their heartbeats in the
    broker, app/fleet/worker_heartbeat.py); without them the node's writes stay buffered."""

    def call() -> str:
        found = worker_heartbeat.read_url(url, node_id, stale_seconds, timeout)
        dead = [life.describe() for life in found.values() if not life.alive]
        if dead:
            raise RuntimeError("; ".join(dead))
        return "; ".join(life.describe() for life in found.values())

    return await bounded(call, timeout)


def _probes(container: Container) -> dict[str, Callable[[], Awaitable[CheckResult]]]:
    settings = container.settings
    ttl = settings.ready_cache_seconds
    probes: dict[str, Callable[[], Awaitable[CheckResult]]] = {
        "catalog": lambda: check_catalog(container.catalog.engine, 3.0),
        "remote": CachedCheck(lambda: check_remote(container.remote.cfg, None, 3.0), ttl),
        "remote_circuit": lambda: _circuit(container),
        "disk": lambda: check_disk(settings.data_dir, settings.ready_min_free_bytes, settings.ready_min_free_ratio),
    }
    if settings.broker_url:
        broker_url = settings.broker_url
        probes["broker"] = CachedCheck(lambda: check_broker(broker_url, 3.0), ttl)
        probes["worker"] = CachedCheck(lambda: check_node_worker(broker_url, settings.node_id,
                                                                 settings.node_stale_seconds), ttl)
    if container.fleet is not None:
        from app.admin.fleet_probe import check_fleet

        probes["fleet"] = CachedCheck(lambda: check_fleet(container), ttl)
    return probes


def router(container: Container, auth: Authenticator) -> APIRouter:
    api = APIRouter(tags=["health"])
    probes = _probes(container)

    async def wants_details(credentials: HTTPAuthorizationCredentials | None = Security(bearer)) -> bool:
        """Anonymous or bound to a tenant: no details. A token must be valid (401) and hold ``read`` (403)."""
        if credentials is None:
            return False
        principal = await auth.identify(credentials)
        if "read" not in principal.scopes:
            raise HTTPException(403, "the token lacks the 'read' scope")
        return principal.tenant_id is None  # the details name every bucket's remote: not a tenant's

    @api.get("/readyz", response_model=ReadyOut, response_model_exclude_none=True,
             responses={503: {"model": ReadyOut, "description": "Not ready"}})
    async def readyz(details: bool = Security(wants_details)) -> JSONResponse:
        """200 when every dependency answers in time, else 503. Each check's status and error
        only with a ``read`` admin token; the remote and broker answers are cached a few seconds."""
        results: list[CheckResult] = list(await asyncio.gather(*(probe() for probe in probes.values())))
        ready = all(r.ok for r in results)
        body = ReadyOut(ready=ready)
        if details:
            body.checks = {name: CheckOut(ok=r.ok, latency_ms=r.latency_ms, detail=r.detail)
                           for name, r in zip(probes, results, strict=True)}
        return JSONResponse(body.model_dump(exclude_none=True), status_code=200 if ready else 503)

    return api
