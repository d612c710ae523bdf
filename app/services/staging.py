"""Staging: warm a prefix into the read cache ahead of a job, with progress an operator can watch.

A job is an asyncio task in the serving process that accepted it. It lists the prefix on the
remote page by page and warms objects ``concurrency`` at a time through
``Gateway.warm_object`` (which returns the bytes it fetched: 0 means already fresh, counted as
skipped). Progress goes to the ``staging_jobs`` row at most every ``persist_interval`` seconds,
with an update guarded by ``state = running``: a cancel made through any process stops the job
at its next write. A job whose process stopped is marked failed on the next start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

import anyio.to_thread

from app.adapters.catalog.staging import JobInfo, Progress, StagingRepo
from app.domain.errors import S3Error
from app.domain.objects import ObjectSummary
from app.services.ports import RemotePort

log = logging.getLogger("ferry.staging")

Warm = Callable[[str, str, int | None], Awaitable[int]]


class StagingRunner:
    def __init__(self, repo: StagingRepo, remote: RemotePort, warm: Warm, node_id: str, *,
                 concurrency: int = 8, persist_interval: float = 0.5, page_size: int = 1000) -> None:
        self.repo = repo
        self.remote = remote
        self.warm = warm  # Gateway.warm_object: this node's read cache
        self.node_id = node_id
        self.concurrency = concurrency
        self.persist_interval = persist_interval
        self.page_size = page_size
        self.started_at = time.time()
        self._tasks: dict[str, asyncio.Task[None]] = {}

    async def startup(self) -> None:
        abandoned = await anyio.to_thread.run_sync(self.repo.abandon_active, self.node_id, self.started_at)
        if abandoned:
            log.warning("marked %d staging job(s) of an earlier run as failed", abandoned)

    async def shutdown(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def start(self, bucket: str, prefix: str, tenant_id: int | None) -> JobInfo:
        job = await anyio.to_thread.run_sync(self.repo.create, bucket, prefix, self.node_id, tenant_id)
        task = asyncio.create_task(self._run(job), name=f"staging-{job.id}")
        self._tasks[job.id] = task
        task.add_done_callback(lambda _t, job_id=job.id: self._tasks.pop(job_id, None))
        return job

    async def cancel(self, job_id: str) -> JobInfo:
        info = await anyio.to_thread.run_sync(self.repo.cancel, job_id)
        task = self._tasks.get(job_id)
        if task is not None:
            task.cancel()
        return info

    def running(self) -> list[str]:
        return list(self._tasks)

    # ---- the job -------------------------------------------------------------------------------
    async def _run(self, job: JobInfo) -> None:
        progress = Progress()
        errors: list[str] = []
        try:
            if not await anyio.to_thread.run_sync(self.repo.mark_running, job.id):
                return  # cancelled before it started
            work = asyncio.create_task(self._work(job, self.warm, progress, errors))
            try:
                while True:
                    done, _ = await asyncio.wait({work}, timeout=self.persist_interval)
                    if done:
                        break
                    if not await anyio.to_thread.run_sync(self.repo.save_progress, job.id, progress):
                        work.cancel()  # cancelled (or removed) through another process
                        with contextlib.suppress(asyncio.CancelledError):
                            await work
                        return
                work.result()
            finally:
                if not work.done():
                    work.cancel()
        except asyncio.CancelledError:
            # A cancel through the API already wrote its state; a shutdown did not.
            with contextlib.suppress(Exception):
                await asyncio.shield(self._finish(job.id, "failed", progress, "interrupted: the gateway stopped"))
            raise
        except Exception as exc:
            log.warning("staging job %s failed: %s", job.id, exc)
            await self._finish(job.id, "failed", progress, _describe(exc))
            return
        if errors:
            await self._finish(job.id, "failed", progress,
                               f"{len(errors)} of {progress.objects_total} objects could not be warmed; "
                               f"first: {errors[0]}")
        else:
            await self._finish(job.id, "done", progress)

    async def _finish(self, job_id: str, state: str, progress: Progress, error: str | None = None) -> None:
        await anyio.to_thread.run_sync(self.repo.finish, job_id, state, progress, error)

    async def _work(self, job: JobInfo, warm: Warm, p: Progress, errors: list[str]) -> None:
        queue: asyncio.Queue[ObjectSummary | None] = asyncio.Queue(maxsize=self.concurrency * 4)

        async def lister() -> None:
            start_after: str | None = None
            while True:
                page = await anyio.to_thread.run_sync(self.remote.list_objects, job.bucket, job.prefix, None,
                                                      start_after, self.page_size)
                for obj in page.contents:
                    p.objects_total += 1
                    p.bytes_total += obj.size
                for obj in page.contents:
                    await queue.put(obj)
                if not page.is_truncated or not page.contents:
                    break
                start_after = page.contents[-1].key
            p.listing_done = True
            for _ in range(self.concurrency):
                await queue.put(None)

        async def worker() -> None:
            while (obj := await queue.get()) is not None:
                fetched: int | None
                try:
                    fetched = await warm(job.bucket, obj.key, job.tenant_id)
                except S3Error as exc:
                    if exc.code == "NoSuchKey":  # deleted since the listing: nothing to warm
                        fetched = 0
                    else:
                        errors.append(f"{obj.key}: {exc.code}: {exc.message}")
                        fetched = None
                except Exception as exc:
                    errors.append(f"{obj.key}: {exc!r}")
                    fetched = None
                p.objects_done += 1
                p.bytes_done += obj.size
                if fetched == 0:
                    p.objects_skipped += 1

        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(lister())
                for _ in range(self.concurrency):
                    group.create_task(worker())
        except BaseExceptionGroup as eg:
            first = eg.exceptions[0]
            raise first if isinstance(first, Exception) else RuntimeError(str(first)) from eg


def _describe(exc: BaseException) -> str:
    if isinstance(exc, S3Error):
        return f"{exc.code}: {exc.message}"
    return str(exc) or type(exc).__name__
