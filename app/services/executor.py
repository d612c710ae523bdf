"""Who runs destage: an in-process executor (embedded default) or Celery (fleet mode).

Both only ever receive a sequence number; the journal is the source of truth, so a lost
submission is found again by the sweeper and a duplicate is a no-op.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Protocol

import anyio
import anyio.to_thread

from app.adapters.catalog.journal import Journal
from app.services.destage import Destager

log = logging.getLogger("ferry.executor")


def compaction_interval(retention_seconds: float, sweep_interval: float) -> float:
    """How often history is compacted: a tenth of the retention, between one sweep and an hour
    (the query scans the journal's history; its rows age by the hour, not by the second)."""
    return max(sweep_interval, min(retention_seconds / 10, 3600.0))


class Executor(Protocol):
    def submit(self, seq: int) -> None: ...


class EmbeddedExecutor:
    """An asyncio queue drained by worker coroutines that run ``Destager.destage`` in threads."""

    def __init__(self, destager: Destager, journal: Journal, *, workers: int = 4,
                 sweep_interval: float = 2.0, node_id: str | None = None,
                 retention_seconds: float = 0.0) -> None:
        self.destager = destager
        self.journal = journal
        self.node_id = node_id  # sweep only this node's rows (a catalog shared by several nodes)
        self.retention_seconds = retention_seconds  # 0: history is kept
        self._compact_at = 0.0
        self.workers = workers
        self.sweep_interval = sweep_interval
        self.limiter = anyio.CapacityLimiter(workers)
        self._queue: asyncio.Queue[int] | None = None
        self._queued: set[int] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[None]] = []
        # Other periodic upkeep of this node's data run by the same sweeper (upload expiry).
        self.chores: list[Callable[[], object]] = []

    def submit(self, seq: int) -> None:
        if self._queue is None or seq in self._queued:
            return  # not started (the sweeper will find it) or already queued
        self._queued.add(seq)
        if self._loop is not None and self._loop.is_running():
            self._loop.call_soon_threadsafe(self._queue.put_nowait, seq)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue = asyncio.Queue()
        self._tasks = [asyncio.create_task(self._worker()) for _ in range(self.workers)]
        self._tasks.append(asyncio.create_task(self._sweeper()))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []

    async def _worker(self) -> None:
        assert self._queue is not None
        while True:
            seq = await self._queue.get()
            self._queued.discard(seq)
            try:
                await anyio.to_thread.run_sync(self.destager.destage, seq, limiter=self.limiter)
            except Exception:  # never let one entry stop the worker; the sweeper retries it
                log.exception("destage of seq %s crashed", seq)

    async def _sweeper(self) -> None:
        while True:
            try:
                await self.sweep()
            except Exception:
                log.exception("journal sweep failed")
            await asyncio.sleep(self.sweep_interval)

    async def sweep(self) -> int:
        """Re-enqueue due entries (the outbox pattern) and free leases of dead workers."""
        await anyio.to_thread.run_sync(self.journal.release_expired_leases)
        # Another node's bytes are in its own data dir, not here.
        due = await anyio.to_thread.run_sync(lambda: self.journal.due(node_id=self.node_id))
        for seq in due:
            self.submit(seq)
        for chore in self.chores:
            try:
                await anyio.to_thread.run_sync(chore)
            except Exception:  # one failing chore must not stop the destage sweep
                log.exception("sweeper chore %s failed", chore)
        await self._compact()
        return len(due)

    async def _compact(self) -> None:
        """Drop history past the retention, at most every ``compaction_interval``."""
        now = time.monotonic()
        if not self.retention_seconds or now < self._compact_at:
            return
        self._compact_at = now + compaction_interval(self.retention_seconds, self.sweep_interval)
        removed = await anyio.to_thread.run_sync(self.journal.compact, self.retention_seconds)
        if removed:
            log.info("journal compaction removed %d rows past the retention", removed)


class CeleryExecutor:
    """Fleet mode: hand the sequence number to a Celery worker (Redis broker)."""

    def __init__(self, send: Callable[[int], None]) -> None:
        self.send = send

    def submit(self, seq: int) -> None:
        try:
            self.send(seq)
        except Exception:  # the broker is down: the beat sweeper re-sends from the journal
            log.warning("could not enqueue destage of seq %s; the sweeper will retry", seq, exc_info=True)

    async def start(self) -> None:
        return None

    async def stop(self) -> None:
        return None
