"""Deadlines of reads that may wait on the remote: a 503 at the deadline, from one watcher task."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from app.domain.errors import S3Error

# Reads that may wait on the remote before their answer starts; writes carry bodies and are
# bounded by FERRY_BODY_READ_TIMEOUT, the write buffer and the remote's own timeouts.
DEADLINE_OPERATIONS = frozenset({
    "GetObject", "HeadObject", "ListObjects", "ListObjectsV2", "HeadBucket", "ListBuckets",
    "GetObjectAttributes", "GetBucketLocation", "ListObjectVersions", "ListParts", "ListMultipartUploads",
})


def deadline_error(seconds: float) -> S3Error:
    return S3Error("ServiceUnavailable", f"The remote did not answer within {seconds:g} s; retry later.",
                   headers={"Retry-After": str(max(1, round(seconds)))})


class Deadline:
    """One read's deadline; ``fired`` once its 503 went out."""

    __slots__ = ("answer", "fired")

    def __init__(self, answer: Callable[[], Awaitable[None]]) -> None:
        self.answer = answer
        self.fired = False

    def expire(self) -> None:
        self.fired = True
        task = asyncio.ensure_future(self.answer())
        _LATE.add(task)
        task.add_done_callback(_LATE.discard)


class DeadlineWatch:
    """The reads in progress and when each must have answered. When one's time is up, its 503
    goes out at once from a task of its own, and its handler, stuck in a remote call no
    cancellation reaches (a thread), is left to finish as if the client had gone (a late answer
    still fills the cache). One watcher task per process ticks while reads are in progress: a hit
    pays a dict insert and delete, not a timer or a task of its own (each ~10 us here)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.tick = min(0.25, seconds / 4)
        self._pending: dict[Deadline, float] = {}
        self._task: asyncio.Task[None] | None = None

    def arm(self, answer: Callable[[], Awaitable[None]]) -> Deadline:
        deadline = Deadline(answer)
        self._pending[deadline] = time.monotonic() + self.seconds
        task = self._task
        if task is None or task.get_loop() is not asyncio.get_running_loop():
            self._task = asyncio.ensure_future(self._watch())
        return deadline

    def disarm(self, deadline: Deadline) -> None:
        self._pending.pop(deadline, None)

    async def _watch(self) -> None:
        # Sleeps before it looks: a hit arms and disarms before this task first runs, and a
        # watcher that found nothing pending at once would end, to be recreated by the next request
        # (a task per request). It ends after a tick with nothing pending.
        try:
            while True:
                await asyncio.sleep(self.tick)
                if not self._pending:
                    break
                now = time.monotonic()
                for deadline, due in list(self._pending.items()):
                    if due <= now:
                        del self._pending[deadline]
                        deadline.expire()
        finally:
            if self._task is asyncio.current_task():
                self._task = None


_LATE: set[asyncio.Future[None]] = set()  # 503s sent at a deadline, still running (kept referenced)
