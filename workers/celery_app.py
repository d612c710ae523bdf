"""The Celery worker entry point of fleet mode (``celery -A workers.celery_app worker``).

The application itself (broker, node queues, beat schedule) is ``app.taskqueue``'s, shared with
the gateway that sends to it; this module adds the task modules the worker runs.
"""

from __future__ import annotations

from workers import metrics as worker_metrics

worker_metrics.prepare()  # before app imports prometheus_client (multiprocess mode, its own port)

from app.taskqueue import celery_app, node_queue  # noqa: E402

__all__ = ["app", "node_queue"]

app = celery_app()
from workers import heartbeat  # noqa: E402,F401 - beat's stamp (a publish signal): beat loads this module

app.conf.update(include=["workers.tasks", "workers.metrics"])
