"""What one thread hop costs: ``anyio.to_thread.run_sync`` (with a limiter, as the gateway used
it) against app/services/threads.py's ``ThreadHops`` (``loop.run_in_executor`` with the caller's
context), ``--callers`` coroutines hopping at once on one event loop.

    .venv/bin/python -m bench.thread_hops [--hops 20000] [--callers 8] [--runs 3]

Prints the process's CPU and the wall time per hop, per run, then the medians.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import anyio
import anyio.to_thread

from app.services.threads import ThreadHops


def _nothing(x: int) -> int:
    return x


async def _hops(kind: str, hops: int, callers: int) -> tuple[float, float]:
    limiter, threads = anyio.CapacityLimiter(64), ThreadHops(64, "bench")

    async def caller() -> None:
        for i in range(hops // callers):
            if kind == "anyio":
                await anyio.to_thread.run_sync(_nothing, i, limiter=limiter)
            else:
                await threads.run(_nothing, i)

    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(callers)))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    threads.close()
    return 1e6 * cpu / hops, 1e6 * wall / hops


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hops", type=int, default=20000)
    parser.add_argument("--callers", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    results: dict[str, list[tuple[float, float]]] = {"anyio": [], "ThreadHops": []}
    for run in range(args.runs):
        for kind in results:
            cpu, wall = asyncio.run(_hops(kind, args.hops, args.callers))
            results[kind].append((cpu, wall))
            print(f"run {run} {kind}: {cpu:.1f} µs CPU, {wall:.1f} µs wall per hop", flush=True)
    print("| hop | CPU µs per hop (median) | wall µs per hop |\n|---|---|---|")
    for kind, rows in results.items():
        print(f"| {kind} | {statistics.median(r[0] for r in rows):.1f} | {statistics.median(r[1] for r in rows):.1f} |")


if __name__ == "__main__":
    main()
