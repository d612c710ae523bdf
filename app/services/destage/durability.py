"""Durability you can see and wait for: per-key state and the flush barrier."""

from __future__ import annotations

import asyncio
import functools
import time
from dataclasses import dataclass
from typing import Protocol

import anyio.to_thread

from app.domain.versions import VersionRow
from app.services.destage.executor import EmbeddedExecutor, Executor


class JournalFlush(Protocol):
    """What the flush barrier and the per-key report read of the journal."""

    @property
    def node_id(self) -> str | None: ...

    def max_seq(self) -> int: ...
    def retry_now(self, bucket: str | None = None, prefix: str = "", include_failed: bool = True) -> int: ...
    def pending_count(self, bucket: str | None, prefix: str, upto_seq: int) -> dict[str, int]: ...
    def due(self, limit: int = ..., now: float | None = ..., node_id: str | None = ...,
            resend_after: float = ...) -> list[int]: ...
    def versions(self, bucket: str, prefix: str = "", limit: int = 1000) -> list[VersionRow]: ...


@dataclass
class FlushResult:
    upto_seq: int
    pending: int
    failed: int
    durable: bool
    waited_seconds: float


class Durability:
    def __init__(self, journal: JournalFlush, executor: Executor) -> None:
        self.journal = journal
        self.executor = executor

    async def flush(self, bucket: str | None, prefix: str = "", *, wait: bool = True,
                    timeout: float = 3600.0, poll: float = 0.2) -> FlushResult:
        """Destage everything written under the prefix before this call; optionally wait for it.

        The barrier covers writes acknowledged before the call (by sequence number); later writes
        do not hold it up. Failed entries are retried once more and reported if they fail again.
        """
        started = time.monotonic()
        upto = await anyio.to_thread.run_sync(self.journal.max_seq)
        await anyio.to_thread.run_sync(self.journal.retry_now, bucket, prefix, True)
        await self._kick()
        counts = await anyio.to_thread.run_sync(self.journal.pending_count, bucket, prefix, upto)
        while wait and _outstanding(counts) and time.monotonic() - started < timeout:
            await asyncio.sleep(poll)
            counts = await anyio.to_thread.run_sync(self.journal.pending_count, bucket, prefix, upto)
            if counts and not _outstanding(counts):
                break
        return FlushResult(upto, _outstanding(counts), counts.get("failed", 0),
                           not counts, time.monotonic() - started)

    async def _kick(self) -> None:
        if isinstance(self.executor, EmbeddedExecutor):
            await self.executor.sweep()
            return
        # Fleet: this node's queue gets this node's rows only (the bytes are on its disk).
        for seq in await anyio.to_thread.run_sync(functools.partial(self.journal.due, node_id=self.journal.node_id)):
            self.executor.submit(seq)

    async def states(self, bucket: str, prefix: str = "", limit: int = 1000) -> list[VersionRow]:
        return await anyio.to_thread.run_sync(self.journal.versions, bucket, prefix, limit)


def _outstanding(counts: dict[str, int]) -> int:
    return counts.get("buffered", 0) + counts.get("destaging", 0)
