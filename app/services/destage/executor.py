"""Who runs destage: an in-process executor (embedded default) or Celery (fleet mode).

Both only ever receive a sequence number; the journal is the source of truth, so a lost
submission is found again by the "sweep" chore (services/control/chores.py) and a duplicate is a no-op.
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

from app.services.control.chores import JournalChores, sweep_journal
from app.services.destage.background import AckGate, BackgroundThreads
from app.services.destage.destager import Destager

log = logging.getLogger("ferry.executor")


class Executor(Protocol):
    def submit(self, seq: int) -> None: ...


class EmbeddedExecutor:
    """An asyncio queue drained by worker coroutines that run ``Destager.destage`` in threads.

    Destage yields to acknowledgements (app/services/destage/background.py): a worker starts a destage
    once no write is being acknowledged (``gate``, waiting a bounded time), in threads of lower
    CPU priority (``nice``)."""

    def __init__(self, destager: Destager, journal: JournalChores, *, workers: int = 4,
                 node_id: str | None = None, gate: AckGate | None = None, nice: int = 0,
                 settle: float = 0.0, settle_max: float = 0.0) -> None:
        """``settle``, ``settle_max``: a queued destage also waits until no write has been
        answered for ``settle`` seconds, at most ``settle_max`` after it was queued (a backlog
        older than that goes at once), so a burst of writes is answered before its destages run
        (``AckGate.quiet``); the remote holds a write at most ``settle_max`` later for it."""
        self.destager = destager
        self.journal = journal
        self.node_id = node_id  # sweep only this node's rows (a catalog shared by several nodes)
        self.workers = workers
        self.gate = gate or AckGate(max_wait=0)
        self.settle, self.settle_max = settle, settle_max
        self.threads = BackgroundThreads(workers, nice, name="ferry-destage")
        self._queue: asyncio.Queue[tuple[int, float]] | None = None
        self._queued: set[int] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: list[asyncio.Task[None]] = []

    def submit(self, seq: int) -> None:
        if self._queue is None or seq in self._queued:
            return  # not started (the sweeper will find it) or already queued
        self._queued.add(seq)
        if self._loop is not None and self._loop.is_running():
            self._loop.call_soon_threadsafe(self._queue.put_nowait, (seq, time.monotonic()))

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue = asyncio.Queue()
        # The sweep that finds lost submissions again is the "sweep" chore (services/control/chores.py).
        self._tasks = [asyncio.create_task(self._worker()) for _ in range(self.workers)]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []
        await anyio.to_thread.run_sync(self.threads.shutdown)

    async def _worker(self) -> None:
        assert self._queue is not None
        while True:
            seq, queued_at = await self._queue.get()
            self._queued.discard(seq)
            try:
                await self.gate.quiet()  # the acknowledgement in flight, if any, goes first
                if self.settle > 0:
                    await self.gate.quiet(since=queued_at, max_wait=self.settle_max, settle=self.settle)
                await self.threads.run(self.destager.destage, seq)
            except Exception:  # never let one entry stop the worker; the sweeper retries it
                log.exception("destage of seq %s crashed", seq)

    async def sweep(self) -> int:
        """Re-enqueue due entries (the outbox pattern) and free leases of dead workers now (a
        flush's kick; the "sweep" chore runs the same function on its interval)."""
        return await anyio.to_thread.run_sync(sweep_journal, self.journal, self.submit, self.node_id)


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
