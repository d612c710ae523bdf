"""Blocking work off the event loop: the hot paths' thread hop.

Every GET takes one or two hops (its catalog lookups, a miss's first fetch). Through
``anyio.to_thread.run_sync`` a hop cost about twice the CPU of ``loop.run_in_executor``
(``python -m bench.thread_hops``: 189 against 92 µs per hop with 8 callers): its limiter's
shielded checkpoint is an extra turn of the loop per call, and its cancel scopes are Python
objects built per call; in a fleet's peer read that was about a tenth of the asking node's GIL
samples (py-spy, bench/peer_rate.py).

``ThreadHops`` keeps what the callers rely on from anyio: at most ``limit`` calls run at once
(the rest queue), the caller's context variables are the thread's (``SERVING_PEER``,
``FILL_TENANT``), and a caller cancelled while its call runs waits for the call to end before
the cancellation goes on: its ``finally`` (a lock's release, a file's close) never runs beside
its own thread. A call cancelled before it started never runs.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class ThreadHops:
    def __init__(self, limit: int, name: str) -> None:
        self.limit = limit
        self.executor = ThreadPoolExecutor(limit, thread_name_prefix=name)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in one of the threads; its result or its exception."""
        loop = asyncio.get_running_loop()
        work: Future[T] = self.executor.submit(contextvars.copy_context().run, fn, *args)
        try:
            return await asyncio.wrap_future(work, loop=loop)
        except asyncio.CancelledError:
            if not work.cancel():  # it is running: as anyio does, go on only once it ended
                await _ended(work, loop)
            raise

    def close(self) -> None:
        """No new calls; queued ones are dropped, running ones end on their own."""
        self.executor.shutdown(wait=False, cancel_futures=True)


async def _ended(work: Future[Any], loop: asyncio.AbstractEventLoop) -> None:
    while not work.done():
        try:
            await asyncio.wrap_future(work, loop=loop)
        except asyncio.CancelledError:
            continue  # cancelled again: still wait (the caller's cancellation is raised after)
        except BaseException:  # its outcome is nobody's now: the caller was cancelled
            return
