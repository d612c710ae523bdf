"""Work that must not delay an acknowledgement: destage and part copies ahead.

With a fast remote (same region, loopback) the destage of a write starts while the client's next
write arrives, and its CPU, syscalls and commits compete with that write's acknowledgement on the
same cores. Two measures give acknowledgements the right of way (bench/analysis.md measures them):

- ``AckGate``: writes hold it while they are being acknowledged; background work waits (a bounded
  time, so it is never starved) until no acknowledgement is in flight before it starts.
- ``BackgroundThreads``: the threads background work runs in have a lower CPU priority (a higher
  nice value; Linux schedules each thread on its own), so the kernel prefers the event loop and
  the acknowledgement threads when the cores are busy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")
log = logging.getLogger("ferry.background")


class AckGate:
    """Counts acknowledgements in flight (event-loop side only, so a plain counter), and when
    the last one ended (for ``quiet``'s ``settle``)."""

    def __init__(self, max_wait: float = 0.05, poll: float = 0.002) -> None:
        self.max_wait = max_wait
        self.poll = poll
        self._inflight = 0
        self._last_end = 0.0
        self._idle: list[Callable[[], None]] = []

    def when_idle(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (on the event loop) each time the last acknowledgement in flight ends."""
        self._idle.append(callback)

    @property
    def inflight(self) -> int:
        return self._inflight

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        self._inflight += 1
        try:
            yield
        finally:
            self._inflight -= 1
            self._last_end = time.monotonic()
            if not self._inflight:
                for callback in self._idle:
                    callback()

    async def quiet(self, *, since: float | None = None, max_wait: float | None = None, settle: float = 0.0) -> None:
        """Return once no acknowledgement is in flight, or ``max_wait`` (default: the gate's)
        seconds after ``since`` (default: now) at most.

        ``settle``: also wait until no acknowledgement has ended for that long. A client writing
        one object after another sends its next write a client turn after each answer, so
        without it the destage of each write starts in that gap and the next acknowledgement
        waits behind its CPU and commits (bench/analysis.md, "Small PUT: destage settles")."""
        limit = self.max_wait if max_wait is None else max_wait
        if limit <= 0:
            return
        now = time.monotonic()
        deadline = (now if since is None else since) + limit
        while now < deadline:
            wait = self.poll if self._inflight else self._last_end + settle - now
            if wait <= 0:
                return
            await asyncio.sleep(min(wait, deadline - now))
            now = time.monotonic()


def lower_priority(nice: int) -> None:
    """Raise the calling thread's nice value by ``nice`` (Linux: per thread); best effort."""
    if nice <= 0 or not hasattr(os, "setpriority"):
        return
    try:
        tid = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))
    except OSError as exc:  # not permitted in some sandboxes: run at normal priority
        log.debug("could not lower the priority of a background thread: %s", exc)


class BackgroundThreads:
    """Daemon threads at lower CPU priority for blocking background work (started lazily).

    Daemon threads: a process that is told to stop does not wait at exit for a part copy stuck
    on an unreachable remote (the journal has the rows; the next start destages them again). The
    executor's ``stop`` still waits for the destages it started (``shutdown``)."""

    def __init__(self, workers: int, nice: int = 10, name: str = "ferry-bg") -> None:
        self.workers = workers
        self.nice = nice
        self.name = name
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()

    def _serve(self, jobs: queue.SimpleQueue[Callable[[], None] | None]) -> None:
        lower_priority(self.nice)
        while (job := jobs.get()) is not None:
            job()

    def _submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            if len(self._threads) < self.workers:
                thread = threading.Thread(target=self._serve, args=(self._jobs,), daemon=True,
                                          name=f"{self.name}-{len(self._threads)}")
                thread.start()
                self._threads.append(thread)
            self._jobs.put(job)

    async def run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn`` in a background thread. Cancelling the caller waits for the thread (as
        anyio's threads do), so no work outlives the one who asked for it."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()

        def settle(result: Any, error: BaseException | None) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)

        def job() -> None:
            try:
                result, error = fn(*args, **kwargs), None
            except BaseException as exc:  # handed to the caller
                result, error = None, exc
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody is waiting
                loop.call_soon_threadsafe(settle, result, error)

        self._submit(job)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            with contextlib.suppress(BaseException):
                await future
            raise

    def shutdown(self) -> None:
        """Wait for running work and stop the threads (a later ``run`` starts new ones)."""
        with self._lock:
            threads, self._threads = self._threads, []
            jobs, self._jobs = self._jobs, queue.SimpleQueue()  # later work goes to new threads
            for _ in threads:
                jobs.put(None)
        for thread in threads:
            thread.join()
