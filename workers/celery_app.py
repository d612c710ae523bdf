"""The Celery application of fleet mode (``celery -A workers.celery_app worker``).

The broker comes from FERRY_BROKER_URL. Task modules register here as they are added; the
destage, stage and sweep tasks run the same service functions as the embedded executor.
"""

from __future__ import annotations

from celery import Celery

from app.config import get_settings


def make_celery() -> Celery:
    settings = get_settings()
    broker = settings.broker_url or "redis://127.0.0.1:6379/0"
    app = Celery("ferry", broker=broker, include=[])
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_serializer="json",
        accept_content=["json"],
        broker_connection_retry_on_startup=True,
    )
    return app


app = make_celery()
