"""Heartbeats of a node's Celery worker and beat, in the broker: is this node's queue drained?

A fleet node's writes are destaged only by the worker that consumes ``ferry.<node id>``, fed by
its beat's sweep. Neither is the gateway's process, so health cannot guess: the beat sends
``ferry.heartbeat`` to the node's queue every FERRY_NODE_HEARTBEAT_SECONDS and stamps its own
key as it does, and the worker that runs it stamps the worker key. A key older than
FERRY_NODE_STALE_SECONDS (or missing) means that process is not doing its job: the worker key
proves a consumer of this very queue, not merely a live process.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

ROLES = ("worker", "beat")


def key(role: str, node_id: str) -> str:
    return f"ferry:alive:{role}:{node_id}"


def stamp(client: Any, role: str, node_id: str, stale_seconds: float) -> None:
    """Record that ``role`` of ``node_id`` did its job now (kept a while past stale, for its age)."""
    client.set(key(role, node_id), repr(time.time()), ex=max(1, int(stale_seconds * 10)))


@dataclass(frozen=True)
class Liveness:
    role: str
    node_id: str
    age: float | None  # seconds since the last stamp; None: never (or long ago)
    stale_seconds: float

    @property
    def alive(self) -> bool:
        return self.age is not None and self.age <= self.stale_seconds

    def describe(self) -> str:
        if self.age is None:
            return f"no {self.role} heartbeat for node {self.node_id}"
        state = "alive" if self.alive else "stale"
        return f"{self.role} of node {self.node_id} {state}: last heartbeat {self.age:.1f} s ago"


def read(client: Any, node_id: str, stale_seconds: float) -> dict[str, Liveness]:
    """The worker's and the beat's liveness for ``node_id``, from one round trip."""
    values = client.mget([key(role, node_id) for role in ROLES])
    now = time.time()
    found: dict[str, Liveness] = {}
    for role, value in zip(ROLES, values, strict=True):
        age = max(0.0, now - float(value)) if value is not None else None
        found[role] = Liveness(role, node_id, age, stale_seconds)
    return found


def queue_depth(client: Any, queue: str) -> int:
    """Messages waiting in a Celery queue on Redis (kombu keeps priorities 3, 6, 9 in suffixed lists)."""
    return sum(int(client.llen(name)) for name in (queue, *(f"{queue}\x06\x16{p}" for p in (3, 6, 9))))


def read_url(url: str, node_id: str, stale_seconds: float, timeout: float) -> dict[str, Liveness]:
    import redis

    client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
    try:
        return read(client, node_id, stale_seconds)
    finally:
        client.close()
