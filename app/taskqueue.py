"""The Celery application of fleet mode: broker, node queues and the beat schedule.

It lives in ``app`` so that the composition root (``bootstrap.make_executor``) can send destage
tasks without importing ``workers/``: ``workers/`` imports ``app``, never the reverse. The
worker entry point (``workers.celery_app``) takes this same instance and adds its task modules.

The broker comes from FERRY_BROKER_URL. Buffered bytes live on the node that accepted them, so
each node's destage tasks go to that node's own queue (``ferry.<node id>``), which the node's
worker consumes by default.

Beat: each node's worker runs its own beat (``celery ... worker -B``), with a schedule built from
``services/control/chores.CHORES`` for its node id. Its node chores (journal sweep, upload expiry, cache
janitor, eviction, scrub, orphan sweep, revalidation) go to its own queue, so they run where its
data directory is; its shared chores (compaction) go to ``ferry.shared``, which every worker also
consumes. Every live node's beat sends the shared chores, so a shared run first takes a broker
key for its interval (``workers/tasks.py``): one run per interval for the fleet, and a node that
dies takes neither its schedule nor the shared chores with it. Beat messages expire after one
interval: a worker that was down does not replay a backlog of passes.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

from celery import Celery
from kombu import Queue

from app.broker_transport import TRANSPORT
from app.config import Settings, get_settings
from app.schedule import chore_intervals
from app.services.control.chores import CHORES

SHARED_QUEUE = "ferry.shared"


def node_queue(node_id: str) -> str:
    return f"ferry.{node_id}"


def beat_schedule(settings: Settings) -> dict[str, dict[str, Any]]:
    """This node's beat: node chores to its own queue, shared chores to the shared one (the
    serving processes run the ``process`` chores themselves)."""
    intervals = chore_intervals(settings)
    schedule: dict[str, dict[str, Any]] = {}
    for chore in CHORES:
        every = chore.interval(intervals)
        if chore.scope == "process" or every <= 0:
            continue
        queue = node_queue(settings.node_id) if chore.scope == "node" else SHARED_QUEUE
        schedule[f"ferry-{chore.name}"] = {"task": f"ferry.{chore.name}", "schedule": every,
                                           "options": {"queue": queue, "expires": max(every, 1.0)}}
    # The node's liveness (app/fleet/worker_heartbeat.py): beat stamps as it sends, the worker as it runs it.
    schedule["ferry-heartbeat"] = {"task": "ferry.heartbeat", "schedule": settings.node_heartbeat_seconds,
                                   "options": {"queue": node_queue(settings.node_id),
                                               "expires": max(settings.node_heartbeat_seconds, 1.0)}}
    return schedule


def destage_limits(settings: Settings) -> tuple[float, float, float]:
    """(soft limit, hard limit, broker visibility timeout) of a destage task, in seconds.

    The soft limit (FERRY_DESTAGE_TIME_LIMIT) interrupts a destage: it fails like an outage and
    its row returns to buffered. The hard limit, two leases later, kills a worker stuck where
    the interruption cannot reach (a blocking socket); by then its lease has run out, so another
    worker may claim the row. Redis redelivers a message not acknowledged within the visibility
    timeout, and acks are late (after the task): so the timeout is longer than the hard limit
    plus two leases, and a destage that is still running is never handed to a second worker
    (which its lease would refuse anyway).
    """
    lease = settings.destage_lease_seconds
    soft = settings.destage_time_limit
    hard = soft + 2 * lease
    return soft, hard, hard + 2 * lease


@lru_cache(maxsize=1)
def celery_app() -> Celery:
    """The process's one Celery application (senders and the worker share it)."""
    settings = get_settings()
    settings.require_node_id()  # worker and beat route by it: never a hostname of their own
    broker = settings.broker_url or "redis://127.0.0.1:6379/0"
    app = Celery("ferry", broker=broker)
    if broker.startswith(("redis://", "rediss://")):
        app.conf.broker_transport = TRANSPORT  # survives a Redis restart mid-task (app/broker_transport.py)
    soft, hard, visibility = destage_limits(settings)
    app.conf.update(
        # Production settings (docs/fleet.md, "Celery"): a message is acknowledged after its task
        # ran, and a worker killed mid-task leaves it to be redelivered; one message at a time
        # per worker process, since destages are long.
        broker_transport_options={"visibility_timeout": visibility},
        task_annotations={"ferry.destage": {"soft_time_limit": soft, "time_limit": hard}},
        task_default_queue=node_queue(settings.node_id),
        task_queues=[Queue(node_queue(settings.node_id)), Queue(SHARED_QUEUE)],
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
        beat_schedule=beat_schedule(settings),
    )
    return app


def destage_sender() -> Callable[[int], None]:
    """Send one journal row's destage to this node's queue (tasks are addressed by name)."""
    app = celery_app()

    def send(seq: int) -> None:
        app.send_task("ferry.destage", args=[seq])

    return send


def staging_sender() -> Callable[[str], None]:
    """Send one staging job to this node's queue: its blocks land in this node's data directory."""
    app = celery_app()

    def send(job_id: str) -> None:
        app.send_task("ferry.staging", args=[job_id])

    return send
