"""Admission of eager part copies: acknowledgements first, without leaving the remote behind.

A part copied ahead (services/multipart/service.py) costs CPU here (reading, TLS, checksums) and, with a
remote on the same host, in the remote too; on two cores those copies took about two thirds of
the busy time while a multipart upload was being acknowledged (issue 16). Deferring every copy
until the client completes would make the remote hold the object later, so copies are admitted:

- while an acknowledgement is in flight (``AckGate``), at most ``busy_limit`` copies run;
- once none is (ingest paused or over), up to ``idle_limit`` run (the remote's parallel streams);
- when the parts waiting for a copy add up to more than ``backlog_bytes``, or the oldest has
  waited ``max_hold`` seconds, up to ``idle_limit`` run even during acknowledgements: a long or
  link-bound upload keeps the remote close behind, and a stream of other writes starves no copy.

Copies are admitted in arrival order. None is ever dropped here: a waiting copy starts at the
latest once acknowledgements pause, and the destage waits for it (``PartCopies.wait_idle``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import AsyncIterator

from app.services.destage.background import AckGate

MAX_HOLD_SECONDS = 5.0


class CopyAdmission:
    """Event-loop side only (like ``AckGate``): plain counters, futures woken by ``_pump``."""

    def __init__(self, acks: AckGate, idle_limit: int, busy_limit: int, backlog_bytes: int,
                 max_hold: float = MAX_HOLD_SECONDS) -> None:
        self.acks = acks
        self.idle_limit = max(1, idle_limit)
        self.busy_limit = max(0, min(busy_limit, self.idle_limit))
        self.backlog_bytes = backlog_bytes
        self.max_hold = max_hold
        self._running = 0
        self._waiting: deque[tuple[asyncio.Future[None], int, float]] = deque()
        self._waiting_bytes = 0
        acks.when_idle(self._pump)

    @property
    def running(self) -> int:
        return self._running

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def _limit(self) -> int:
        if not self.acks.inflight or self._waiting_bytes > self.backlog_bytes:
            return self.idle_limit
        if self._waiting and time.monotonic() - self._waiting[0][2] >= self.max_hold:
            return self.idle_limit
        return self.busy_limit

    def _pump(self) -> None:
        """Start waiting copies while the current limit allows."""
        while self._waiting and self._running < self._limit():
            future, size, _ = self._waiting.popleft()
            self._waiting_bytes -= size
            if future.done():  # its copy was cancelled while waiting
                continue
            self._running += 1
            future.set_result(None)

    @contextlib.asynccontextmanager
    async def slot(self, size: int) -> AsyncIterator[None]:
        """Hold one copy's place while it runs; waits for admission first."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._waiting.append((future, size, time.monotonic()))
        self._waiting_bytes += size
        self._pump()
        if not future.done():
            loop.call_later(self.max_hold, self._pump)  # held that long: admitted (see _limit)
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():  # admitted just as it was cancelled
                self._release()
            raise
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        self._running -= 1
        self._pump()
