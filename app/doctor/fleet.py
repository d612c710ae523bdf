"""``ferry doctor --serving`` in fleet mode: does a worker drain this node's queue, does its beat run?

A gateway acknowledges writes whether or not anything destages them (the journal is the
outbox), so a dead worker is invisible at the door: these checks read the heartbeats the worker
and beat write into the broker (``app/fleet/worker_heartbeat.py``).
"""

from __future__ import annotations

from collections.abc import Iterator

from app.config import Settings
from app.doctor import Finding
from app.fleet import worker_heartbeat


def check_node_worker(settings: Settings, timeout: float) -> Iterator[Finding]:
    if not settings.broker_url or not settings.node_id:
        return
    try:
        found = worker_heartbeat.read_url(settings.broker_url, settings.node_id, settings.node_stale_seconds, timeout)
    except Exception as exc:
        yield Finding("fail", "worker", f"cannot read the heartbeats from the broker: {type(exc).__name__}: {exc}")
        return
    hints = {"worker": "start `celery -A workers.celery_app worker` with this FERRY_NODE_ID (it consumes "
                       f"ferry.{settings.node_id}); until then this node's writes stay buffered",
             "beat": "start `celery -A workers.celery_app beat` (or the worker with -B) with this FERRY_NODE_ID"}
    for role, life in found.items():
        if life.alive:
            yield Finding("ok", role, life.describe())
        else:
            yield Finding("fail", role, f"{life.describe()}: {hints[role]}")
