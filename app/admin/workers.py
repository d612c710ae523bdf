"""``GET /admin/workers?node=...``: the liveness of each node's Celery worker and beat.

For ``ferry flush --wait`` and operators: a node's buffered writes are destaged only by the
worker that consumes its queue, so "waiting" must say whether that worker is alive. Read from
the heartbeats in the broker (``app/fleet/worker_heartbeat.py``); empty in embedded mode.
"""

from __future__ import annotations

import anyio
from fastapi import APIRouter, Query

from app.admin.auth import Authenticator
from app.admin.common import Out
from app.bootstrap import Container
from app.fleet import worker_heartbeat


class LivenessOut(Out):
    alive: bool
    age_seconds: float | None
    detail: str


def router(container: Container, auth: Authenticator) -> APIRouter:
    api = APIRouter(prefix="/admin", tags=["health"], dependencies=auth.read())
    settings = container.settings

    @api.get("/workers", response_model=dict[str, dict[str, LivenessOut]])
    async def workers(node: list[str] = Query(default_factory=list)) -> dict[str, dict[str, LivenessOut]]:
        """Per node id (default: this node), its worker's and beat's last heartbeat."""
        if not settings.broker_url:
            return {}
        url = settings.broker_url

        def read() -> dict[str, dict[str, LivenessOut]]:
            return {n: {role: LivenessOut(alive=life.alive, age_seconds=life.age, detail=life.describe())
                        for role, life in worker_heartbeat.read_url(url, n, settings.node_stale_seconds, 3.0).items()}
                    for n in (node or [settings.node_id])}

        return await anyio.to_thread.run_sync(read)

    return api
