"""Process CPU from /proc: utime + stime of a process tree, before and after a workload.

Used by ``bench.stages`` (the gateway's CPU per phase) and by ``python -m bench`` (every contender
that runs on this machine: Ferry, rclone, nginx), so all CPU figures are measured the same way.
Linux only; elsewhere (no /proc) the readings are empty and the CPU columns stay blank.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> list[str]:
    """The fields of /proc/<pid>/stat after the command name (which may hold spaces)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process and its children that were waited for (/proc/<pid>/stat)."""
    fields = _stat(pid)
    return sum(int(fields[i]) for i in (11, 12, 13, 14)) / TICK


def parents() -> dict[int, int]:
    """pid -> parent pid of every process (a /proc scan: not every kernel has /proc/<pid>/task/*/children)."""
    out: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                out[int(entry.name)] = int(_stat(int(entry.name))[1])
    return out


def process_tree(root: int) -> list[int]:
    """``root`` and all its descendants (uvicorn workers, nginx workers), root first."""
    kids: dict[int, list[int]] = {}
    for pid, ppid in parents().items():
        kids.setdefault(ppid, []).append(pid)
    pids, i = [root], 0
    while i < len(pids):
        pids += [p for p in sorted(kids.get(pids[i], [])) if p not in pids]
        i += 1
    return pids


def gateway_pids(root: int) -> list[int]:
    """The gateway's process and its children (uvicorn workers): its whole tree."""
    return process_tree(root)


def snapshot(roots: list[int]) -> dict[tuple[int, str], float]:
    """CPU seconds per live process of the trees of ``roots``, keyed by (pid, start time): a reused pid is
    another process."""
    out: dict[tuple[int, str], float] = {}
    for root in roots:
        for pid in process_tree(root):
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = _stat(pid)
                out[(pid, fields[19])] = sum(int(fields[i]) for i in (11, 12, 13, 14)) / TICK
    return out


class CpuMeter:
    """CPU seconds the process trees of ``roots`` spent since the meter was made (None: nothing to measure).

    A process that started meanwhile counts from zero; one that ended meanwhile is lost unless its parent
    waited for it (then its time is in the parent's cutime/cstime).
    """

    def __init__(self, roots: list[int]) -> None:
        self.roots = [r for r in roots if r]
        self.before = snapshot(self.roots)

    def seconds(self) -> float | None:
        if not self.roots or not self.before:
            return None
        after = snapshot(self.roots)
        return sum(max(0.0, cpu - self.before.get(key, 0.0)) for key, cpu in after.items())
