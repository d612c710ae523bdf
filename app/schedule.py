"""The intervals the chores run by, read from the settings once: the in-process chore loop
(``bootstrap``) and each node's Celery beat (``taskqueue``) both take them from here."""

from __future__ import annotations

from app.config import Settings
from app.services.control.chores import Intervals

RESEND_AFTER = 3.0  # seconds before the sweep sends a queued row's destage to Celery again


def chore_intervals(settings: Settings) -> Intervals:
    """The settings the chores run by (the in-process loop and each node's beat alike)."""
    return Intervals(sweep=settings.sweep_interval, retention=settings.journal_retention_seconds,
                     revalidate=settings.cache_revalidate_interval,
                     remote_uploads=settings.remote_upload_sweep_interval,
                     resend=RESEND_AFTER if settings.broker_url else 0.0)
