"""CPU pinning of a process tree: what ``taskset -a -cp CPUS PID`` does, for a process and all its descendants.

    pin_tree(gw.proc.pid, parse_cpus("0"))    # the gateway, its threads and its uvicorn workers on cpu 0

Used by ``python -m bench.checkpoint --cpus 0 0,1`` (issue 29's core-scaling figure). Every thread
(/proc/<pid>/task/*) of every process of the tree is pinned; threads and processes started later
inherit the mask of the thread that starts them, so pinning once after start-up covers them too
(``pinned()`` reports what each thread has, to check). Linux only.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from bench.proc_cpu import process_tree


def parse_cpus(spec: str) -> set[int]:
    """``taskset -c`` syntax: "0", "0,1", "0-3", "0,2-3"."""
    cpus: set[int] = set()
    for part in spec.split(","):
        lo, _, hi = part.strip().partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    if not cpus:
        raise ValueError(f"no CPUs in {spec!r}")
    return cpus


def tasks(root: int) -> Iterator[int]:
    """The thread ids of every process in ``root``'s tree."""
    for pid in process_tree(root):
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{pid}/task").iterdir():
                yield int(task.name)


def pin_tree(root: int, cpus: set[int]) -> int:
    """Pin every thread of ``root``'s process tree to ``cpus``; the number of threads pinned."""
    n = 0
    for tid in tasks(root):
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            os.sched_setaffinity(tid, cpus)
            n += 1
    return n


def pinned(root: int) -> set[frozenset[int]]:
    """The distinct affinity masks the threads of ``root``'s tree hold (one, after ``pin_tree``)."""
    masks: set[frozenset[int]] = set()
    for tid in tasks(root):
        with contextlib.suppress(ProcessLookupError):
            masks.add(frozenset(os.sched_getaffinity(tid)))
    return masks


@contextlib.contextmanager
def affinity(cpus: set[int] | None) -> Iterator[None]:
    """This thread runs on ``cpus`` inside the block (a child it starts there inherits the mask), then as before."""
    if cpus is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)
