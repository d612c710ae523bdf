"""The worker's and the beat's side of ``app/fleet/worker_heartbeat.py``.

Beat stamps its key when it publishes ``ferry.heartbeat`` (so a stamp means beat runs and
reaches the broker); the worker that runs the task stamps the worker key (so a stamp means a
consumer of this node's queue ran it). Failures only log: a missed stamp shows as stale.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from typing import Any

from celery import signals

from app.config import get_settings
from app.fleet import worker_heartbeat

log = logging.getLogger("ferry.worker")
TASK = "ferry.heartbeat"


@lru_cache(maxsize=1)
def _client() -> Any:
    import redis

    return redis.Redis.from_url(get_settings().broker_url or "redis://127.0.0.1:6379/0", socket_timeout=3,
                                socket_connect_timeout=3)


def stamp(role: str) -> None:
    settings = get_settings()
    try:
        worker_heartbeat.stamp(_client(), role, settings.node_id, settings.node_stale_seconds)
    except Exception as exc:  # the broker is away: the stamp goes stale, which is what health should see
        log.warning("could not write the %s heartbeat: %s", role, exc)


@signals.before_task_publish.connect(sender=TASK)
def beat_sends(**_: Any) -> None:
    stamp("beat")
