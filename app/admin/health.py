"""Readiness: can this node serve? Liveness (``/healthz``) only says the process answers.

``/readyz`` checks the catalog, the broker (fleet mode), the default remote and free space in
the data directory, each with a short bound, and answers 503 when any fails, so a load balancer
stops sending traffic to a node that would only produce errors.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from app.admin.common import Out
from app.bootstrap import Container
from app.services.probes import CheckResult, check_broker, check_catalog, check_disk, check_remote


class CheckOut(Out):
    ok: bool
    latency_ms: float | None
    detail: str | None


class ReadyOut(Out):
    ready: bool
    checks: dict[str, CheckOut]


def router(container: Container) -> APIRouter:
    settings = container.settings
    api = APIRouter(tags=["health"])

    @api.get("/readyz", response_model=ReadyOut, responses={503: {"model": ReadyOut, "description": "Not ready"}})
    async def readyz() -> JSONResponse:
        """200 when every dependency answers in time, else 503; each check's status is listed."""
        names = ["catalog", "remote", "disk"]
        probes = [check_catalog(container.catalog.engine, 3.0),
                  check_remote(container.remote.cfg, None, 3.0),
                  check_disk(settings.data_dir, settings.ready_min_free_bytes, settings.ready_min_free_ratio)]
        if settings.broker_url:
            names.append("broker")
            probes.append(check_broker(settings.broker_url, 3.0))
        results: list[CheckResult] = list(await asyncio.gather(*probes))
        checks = {name: CheckOut(ok=r.ok, latency_ms=r.latency_ms, detail=r.detail)
                  for name, r in zip(names, results, strict=True)}
        body = ReadyOut(ready=all(r.ok for r in results), checks=checks)
        return JSONResponse(body.model_dump(), status_code=200 if body.ready else 503)

    return api
