"""Celery tasks: thin wrappers over the same service functions the embedded executor runs.

Retries are the journal's job, not Celery's: a failed destage sets the row's next attempt time
(exponential backoff with jitter) and the sweeper re-sends it when due, so a lost or duplicated
message never loses or reorders a write.
"""

from __future__ import annotations

from functools import lru_cache

from app.bootstrap import Container, build
from app.config import get_settings
from workers.celery_app import app


@lru_cache(maxsize=1)
def container() -> Container:
    return build(get_settings())


@app.task(name="ferry.destage", acks_late=True, ignore_result=True)
def destage(seq: int) -> str:
    return container().destager.destage(seq)


@app.task(name="ferry.sweep", ignore_result=True)
def sweep() -> int:
    """Free leases of dead workers, re-send every due entry of this node, expire its abandoned uploads."""
    c = container()
    c.journal.release_expired_leases()
    due = c.journal.due(node_id=c.journal.node_id)  # other nodes' bytes are not on this disk
    for seq in due:
        destage.delay(seq)
    if c.upload_expiry is not None:  # abandoned multipart uploads of this node
        c.upload_expiry.sweep()
    if c.remote_uploads is not None:  # remote uploads nothing owns any more (at most once per interval)
        c.remote_uploads.sweep()
    return len(due)


@app.task(name="ferry.compact", ignore_result=True)
def compact() -> int:
    """Delete journal history past FERRY_JOURNAL_RETENTION_SECONDS (0 keeps it)."""
    retention = get_settings().journal_retention_seconds
    return container().journal.compact(retention) if retention else 0
