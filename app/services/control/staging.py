"""Staging: warm a prefix into the read cache ahead of a job, with progress an operator can watch.

A job is a row (``staging_jobs``) and one task function, ``run_staging_job(job_id, parts)``, which
both executors run: in embedded mode an asyncio task of the serving process that accepted it
(``EmbeddedStagingExecutor``), in fleet mode the node's Celery worker (``ferry.staging`` on the
node's own queue, since the blocks land in this node's data directory; ``workers/tasks.py``).

The job lists the prefix on the remote page by page and warms objects ``concurrency`` at a time
through ``warm`` (``Gateway.warm_object``, which returns the bytes it fetched: 0 means already
fresh, counted as skipped). Claiming the job is a guarded update (``queued`` to ``running``), so
a duplicate message runs nothing. Progress goes to the row at most every ``persist_interval``
seconds, guarded by ``state = running``: a cancel made through any process stops the job at its
next write. Each write is a heartbeat: a running job whose runner was killed is marked failed by
the ``staging-recovery`` chore once its heartbeat is ``STALE_AFTER`` old, and, in embedded mode,
at once by the next start of its node's serving process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import anyio.to_thread

from app.domain.errors import S3Error
from app.domain.objects import ObjectSummary
from app.domain.staging import JobInfo, Progress
from app.services.ports import RemotePort

log = logging.getLogger("ferry.staging")

Warm = Callable[[str, str, int | None], Awaitable[int]]
STALE_AFTER = 30.0  # seconds without a progress write (written every persist_interval)


class StagingJobs(Protocol):
    """What staging needs of the job rows (``adapters/catalog/control/staging.StagingRepo``)."""

    def create(self, bucket: str, prefix: str, node_id: str, tenant_id: int | None) -> JobInfo: ...
    def get(self, job_id: str) -> JobInfo: ...
    def mark_running(self, job_id: str) -> bool: ...
    def save_progress(self, job_id: str, p: Progress) -> bool: ...
    def finish(self, job_id: str, state: str, p: Progress, error: str | None = None) -> bool: ...
    def cancel(self, job_id: str) -> JobInfo: ...
    def abandon_active(self, node_id: str, created_before: float) -> int: ...
    def fail_stale(self, node_id: str, heartbeat_before: float) -> int: ...


@dataclass
class StagingParts:
    """What a job runs on, built by the composition root (a serving process or a worker)."""

    repo: StagingJobs
    remote: RemotePort
    warm: Warm  # Gateway.warm_object: this node's read cache
    node_id: str
    concurrency: int = 8
    persist_interval: float = 0.5
    page_size: int = 1000


def recover_stale(parts: StagingParts, stale_after: float = STALE_AFTER) -> int:
    """The ``staging-recovery`` chore: fail this node's running jobs whose runner stopped."""
    failed = parts.repo.fail_stale(parts.node_id, time.time() - stale_after)
    if failed:
        log.warning("marked %d staging job(s) whose runner stopped as failed", failed)
    return failed


# ---- the task function ---------------------------------------------------------------------------
async def run_staging_job(job_id: str, parts: StagingParts) -> str:
    """The one entry point of a job (both executors call it); returns what it did."""
    if not await anyio.to_thread.run_sync(parts.repo.mark_running, job_id):
        return "skipped"  # cancelled before it started, or already claimed (a duplicate message)
    job = await anyio.to_thread.run_sync(parts.repo.get, job_id)
    progress = Progress()
    errors: list[str] = []
    try:
        if not await _work_and_persist(job, parts, progress, errors):
            return "cancelled"
    except asyncio.CancelledError:
        # A cancel through the API already wrote its state; a shutdown did not.
        with contextlib.suppress(Exception):
            await asyncio.shield(_finish(parts, job_id, "failed", progress, "interrupted: the gateway stopped"))
        raise
    except Exception as exc:
        log.warning("staging job %s failed: %s", job_id, exc)
        await _finish(parts, job_id, "failed", progress, _describe(exc))
        return "failed"
    if errors:
        await _finish(parts, job_id, "failed", progress,
                      f"{len(errors)} of {progress.objects_total} objects could not be warmed; first: {errors[0]}")
        return "failed"
    await _finish(parts, job_id, "done", progress)
    return "done"


async def _work_and_persist(job: JobInfo, parts: StagingParts, progress: Progress, errors: list[str]) -> bool:
    """Warm while writing progress every ``persist_interval``; False when cancelled elsewhere."""
    work = asyncio.create_task(_work(job, parts, progress, errors))
    try:
        while True:
            done, _ = await asyncio.wait({work}, timeout=parts.persist_interval)
            if done:
                break
            if not await anyio.to_thread.run_sync(parts.repo.save_progress, job.id, progress):
                work.cancel()  # cancelled (or removed) through another process
                with contextlib.suppress(asyncio.CancelledError):
                    await work
                return False
        work.result()
        return True
    finally:
        if not work.done():
            work.cancel()


async def _finish(parts: StagingParts, job_id: str, state: str, progress: Progress, error: str | None = None) -> None:
    await anyio.to_thread.run_sync(parts.repo.finish, job_id, state, progress, error)


async def _work(job: JobInfo, parts: StagingParts, p: Progress, errors: list[str]) -> None:
    queue: asyncio.Queue[ObjectSummary | None] = asyncio.Queue(maxsize=parts.concurrency * 4)

    async def lister() -> None:
        start_after: str | None = None
        while True:
            page = await anyio.to_thread.run_sync(parts.remote.list_objects, job.bucket, job.prefix, None,
                                                  start_after, parts.page_size)
            for obj in page.contents:
                p.objects_total += 1
                p.bytes_total += obj.size
            for obj in page.contents:
                await queue.put(obj)
            if not page.is_truncated or not page.contents:
                break
            start_after = page.contents[-1].key
        p.listing_done = True
        for _ in range(parts.concurrency):
            await queue.put(None)

    async def worker() -> None:
        while (obj := await queue.get()) is not None:
            fetched = await _warm_one(job, parts.warm, obj, errors)
            p.objects_done += 1
            p.bytes_done += obj.size
            if fetched == 0:
                p.objects_skipped += 1

    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(lister())
            for _ in range(parts.concurrency):
                group.create_task(worker())
    except BaseExceptionGroup as eg:
        first = eg.exceptions[0]
        raise first if isinstance(first, Exception) else RuntimeError(str(first)) from eg


async def _warm_one(job: JobInfo, warm: Warm, obj: ObjectSummary, errors: list[str]) -> int | None:
    """The bytes fetched for one object; None (and an error noted) when it could not be warmed."""
    try:
        return await warm(job.bucket, obj.key, job.tenant_id)
    except S3Error as exc:
        if exc.code == "NoSuchKey":  # deleted since the listing: nothing to warm
            return 0
        errors.append(f"{obj.key}: {exc.code}: {exc.message}")
    except Exception as exc:
        errors.append(f"{obj.key}: {exc!r}")
    return None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, S3Error):
        return f"{exc.code}: {exc.message}"
    return str(exc) or type(exc).__name__


# ---- executors -----------------------------------------------------------------------------------
class StagingExecutor(Protocol):
    def submit(self, job_id: str) -> None: ...
    def cancel(self, job_id: str) -> None: ...
    async def stop(self) -> None: ...


class EmbeddedStagingExecutor:
    """Embedded mode: each job is an asyncio task of this serving process."""

    runs_here = True

    def __init__(self, parts: StagingParts) -> None:
        self.parts = parts
        self._tasks: dict[str, asyncio.Task[str]] = {}

    def submit(self, job_id: str) -> None:
        task = asyncio.get_running_loop().create_task(run_staging_job(job_id, self.parts), name=f"staging-{job_id}")
        self._tasks[job_id] = task
        task.add_done_callback(lambda _t: self._tasks.pop(job_id, None))

    def cancel(self, job_id: str) -> None:
        task = self._tasks.get(job_id)
        if task is not None:
            task.cancel()

    def running(self) -> list[str]:
        return list(self._tasks)

    async def stop(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


class CeleryStagingExecutor:
    """Fleet mode: the node's Celery worker runs the job (a cancel reaches it through the row)."""

    runs_here = False

    def __init__(self, send: Callable[[str], None]) -> None:
        self.send = send

    def submit(self, job_id: str) -> None:
        self.send(job_id)

    def cancel(self, job_id: str) -> None:
        return None

    async def stop(self) -> None:
        return None


# ---- the service the admin API calls -------------------------------------------------------------
class StagingService:
    """Start and cancel jobs; the executor given by the composition root runs them."""

    def __init__(self, parts: StagingParts, executor: EmbeddedStagingExecutor | CeleryStagingExecutor) -> None:
        self.parts = parts
        self.repo = parts.repo
        self.executor = executor
        self.started_at = time.time()

    async def startup(self) -> None:
        """Embedded mode: this node's jobs of an earlier process cannot resume (no other process
        runs them). In fleet mode a worker runs them; the recovery chore judges them by heartbeat."""
        if not self.executor.runs_here:
            return
        abandoned = await anyio.to_thread.run_sync(self.repo.abandon_active, self.parts.node_id, self.started_at)
        if abandoned:
            log.warning("marked %d staging job(s) of an earlier run as failed", abandoned)

    async def shutdown(self) -> None:
        await self.executor.stop()

    async def start(self, bucket: str, prefix: str, tenant_id: int | None) -> JobInfo:
        job = await anyio.to_thread.run_sync(self.repo.create, bucket, prefix, self.parts.node_id, tenant_id)
        try:
            self.executor.submit(job.id)
        except Exception as exc:  # the broker is down: say so now rather than leave it queued
            log.warning("could not submit staging job %s: %s", job.id, exc)
            await _finish(self.parts, job.id, "failed", Progress(), f"could not be submitted: {_describe(exc)}")
            return await anyio.to_thread.run_sync(self.repo.get, job.id)
        return job

    async def cancel(self, job_id: str) -> JobInfo:
        info = await anyio.to_thread.run_sync(self.repo.cancel, job_id)
        self.executor.cancel(job_id)
        return info
