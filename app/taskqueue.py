"""The Celery application of fleet mode: broker, node queues and the beat schedule.

It lives in ``app`` so that the composition root (``bootstrap.make_executor``) can send destage
tasks without importing ``workers/``: ``workers/`` imports ``app``, never the reverse. The
worker entry point (``workers.celery_app``) takes this same instance and adds its task modules.

The broker comes from FERRY_BROKER_URL. Buffered bytes live on the node that accepted them, so
each node's destage tasks go to that node's own queue (``ferry.<node id>``), which the node's
worker consumes by default. Beat runs the outbox sweeper.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache

from celery import Celery

from app.config import Settings, get_settings
from app.services.executor import compaction_interval


def node_queue(node_id: str) -> str:
    return f"ferry.{node_id}"


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
    soft, hard, visibility = destage_limits(settings)
    app.conf.update(
        # Production settings (docs/fleet.md, "Celery"): a message is acknowledged after its task
        # ran, and a worker killed mid-task leaves it to be redelivered; one message at a time
        # per worker process, since destages are long.
        broker_transport_options={"visibility_timeout": visibility},
        task_annotations={"ferry.destage": {"soft_time_limit": soft, "time_limit": hard}},
        task_default_queue=node_queue(settings.node_id),
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
        beat_schedule={
            "ferry-sweep": {"task": "ferry.sweep", "schedule": settings.sweep_interval},
            "ferry-compact": {"task": "ferry.compact",
                              "schedule": compaction_interval(settings.journal_retention_seconds,
                                                              settings.sweep_interval)},
        },
    )
    return app


def destage_sender() -> Callable[[int], None]:
    """Send one journal row's destage to this node's queue (tasks are addressed by name)."""
    app = celery_app()

    def send(seq: int) -> None:
        app.send_task("ferry.destage", args=[seq])

    return send
