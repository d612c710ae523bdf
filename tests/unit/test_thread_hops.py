"""ThreadHops keeps what the callers relied on from anyio.to_thread: a bound, the caller's
context variables, and a cancelled caller that goes on only once its running call ended."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

import pytest

from app.services.threads import ThreadHops

WHO: contextvars.ContextVar[str] = contextvars.ContextVar("who", default="nobody")


def test_the_callers_context_variables_are_the_threads() -> None:
    hops = ThreadHops(2, "t")

    async def main() -> str:
        WHO.set("caller")
        return await hops.run(WHO.get)

    assert asyncio.run(main()) == "caller"
    hops.close()


def test_results_and_exceptions_come_back() -> None:
    hops = ThreadHops(2, "t")

    def boom() -> None:
        raise KeyError("x")

    async def main() -> int:
        with pytest.raises(KeyError):
            await hops.run(boom)
        return await hops.run(sum, [1, 2, 3])

    assert asyncio.run(main()) == 6
    hops.close()


def test_at_most_limit_calls_run_at_once() -> None:
    hops = ThreadHops(3, "t")
    running = peak = 0
    lock = threading.Lock()

    def work() -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.02)
        with lock:
            running -= 1

    async def main() -> None:
        await asyncio.gather(*(hops.run(work) for _ in range(12)))

    asyncio.run(main())
    assert peak == 3
    hops.close()


def test_a_cancelled_caller_waits_for_its_running_call_and_a_queued_one_never_runs() -> None:
    hops = ThreadHops(1, "t")
    started, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def slow() -> None:
        started.set()
        release.wait(5)
        ran.append("slow")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        running = asyncio.ensure_future(hops.run(slow))
        queued = asyncio.ensure_future(hops.run(ran.append, "queued"))  # waits for the one thread
        await loop.run_in_executor(None, started.wait, 5)
        running.cancel()
        queued.cancel()
        await asyncio.sleep(0.05)
        assert not running.done()  # still waiting for slow() to end
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await running
        assert ran == ["slow"]
        with pytest.raises(asyncio.CancelledError):
            await queued
        await hops.run(time.sleep, 0.01)
        assert ran == ["slow"]  # the queued call was dropped, never run

    asyncio.run(main())
    hops.close()
