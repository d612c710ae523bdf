"""``GET /admin/workers?node=...``: each node's Celery worker and beat, and its queue's depth.

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


class NodeWorkersOut(Out):
    worker: LivenessOut
    beat: LivenessOut
    queue_depth: int  # messages waiting in ferry.<node id>


def _node(client: object, node_id: str, stale_seconds: float) -> NodeWorkersOut:
    lives = {role: LivenessOut(alive=life.alive, age_seconds=life.age, detail=life.describe())
             for role, life in worker_heartbeat.read(client, node_id, stale_seconds).items()}
    return NodeWorkersOut(**lives, queue_depth=worker_heartbeat.queue_depth(client, f"ferry.{node_id}"))


def fleet_workers(container: Container, nodes: list[str] | None = None) -> dict[str, NodeWorkersOut]:
    """Blocking: each node's worker, beat and queue depth ({} in embedded mode)."""
    settings = container.settings
    if not settings.broker_url:
        return {}
    import redis

    live = container.fleet.membership.live_ids() if container.fleet else ()
    client = redis.Redis.from_url(settings.broker_url, socket_timeout=3.0, socket_connect_timeout=3.0)
    try:
        return {n: _node(client, n, settings.node_stale_seconds) for n in (nodes or sorted({settings.node_id, *live}))}
    finally:
        client.close()


def router(container: Container, auth: Authenticator) -> APIRouter:
    api = APIRouter(prefix="/admin", tags=["health"], dependencies=auth.read())

    @api.get("/workers", response_model=dict[str, NodeWorkersOut])
    async def workers(node: list[str] = Query(default_factory=list)) -> dict[str, NodeWorkersOut]:
        """Per node id (default: this node and every live one), its worker's and beat's last
        heartbeat and the messages waiting in its queue."""
        return await anyio.to_thread.run_sync(lambda: fleet_workers(container, node))

    return api
