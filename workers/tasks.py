"""Celery tasks: thin wrappers over the same service functions the embedded executor runs.

Retries are the journal's job, not Celery's: a failed destage sets the row's next attempt time
(exponential backoff with jitter) and the sweep re-sends it when due, so a lost or duplicated
message never loses or reorders a write.

Every chore of ``app/services/chores.CHORES`` but the per-process ones is one task here,
``ferry.<chore name>``, run by ``run_chore`` as in embedded mode. Each node's beat sends its
node chores to its own queue and the shared ones to ``ferry.shared`` (``app/taskqueue.py``).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
from functools import lru_cache
from typing import Any

from app.bootstrap import Container, build
from app.config import get_settings
from app.services.control.chores import CHORES, Chore, run_chore
from app.services.control.staging import run_staging_job
from workers import heartbeat
from workers.celery_app import app

log = logging.getLogger("ferry.tasks")


@lru_cache(maxsize=1)
def container() -> Container:
    return build(get_settings())


@app.task(name="ferry.destage", acks_late=True, ignore_result=True)
def destage(seq: int) -> str:
    return container().destager.destage(seq)


@app.task(name=heartbeat.TASK, ignore_result=True)
def node_heartbeat() -> None:
    """This node's queue is consumed: stamp the worker's heartbeat (workers/heartbeat.py)."""
    heartbeat.stamp("worker")


@lru_cache(maxsize=1)
def _loop() -> asyncio.AbstractEventLoop:
    """One event loop per worker process, in its own thread, for the async task functions: the
    read cache's fills and locks belong to one loop, which every staging job shares."""
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="ferry-async", daemon=True).start()
    return loop


@app.task(name="ferry.staging", acks_late=True, ignore_result=True)
def staging(job_id: str) -> str:
    """A warm-up job (``app/services/staging.run_staging_job``), as in embedded mode."""
    return asyncio.run_coroutine_threadsafe(run_staging_job(job_id, container().staging.parts), _loop()).result()


@lru_cache(maxsize=1)
def _redis() -> Any:
    import redis  # the broker's own client (Celery's Redis transport depends on it)

    return redis.Redis.from_url(get_settings().broker_url or "redis://127.0.0.1:6379/0")


def _first_this_interval(chore: Chore) -> bool:
    """A shared chore is sent by every node's beat: the first worker to take the broker key for
    this interval runs it, the others skip (the key expires after the interval)."""
    settings = get_settings()
    every = chore.interval(container().chore_parts.intervals)
    fleet = hashlib.sha256(settings.effective_database_url.encode()).hexdigest()[:16]  # one key per catalog
    try:
        return bool(_redis().set(f"ferry:chore:{fleet}:{chore.name}", settings.node_id, nx=True,
                                 px=max(1, int(every * 900))))  # 90 %: beats drift by milliseconds
    except Exception:  # no broker key to take: running twice is harmless, not running is not
        log.warning("could not take the broker key of chore %s; running it anyway", chore.name, exc_info=True)
        return True


def _register(chore: Chore) -> None:
    def task() -> object:
        if chore.scope == "shared" and not _first_this_interval(chore):
            return None
        result = run_chore(chore.name, container().chore_parts)
        return result if isinstance(result, int | str | None) else repr(result)

    task.__name__ = task.__qualname__ = f"chore_{chore.name.replace('-', '_')}"
    task.__doc__ = f"The {chore.name} chore ({chore.scope} scope)."
    app.task(name=f"ferry.{chore.name}", ignore_result=True)(task)


for _chore in CHORES:
    if _chore.scope != "process":
        _register(_chore)
