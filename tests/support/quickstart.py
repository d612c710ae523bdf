"""Running ``ferry quickstart`` in tests: free ports for it, reading its banner, stopping it."""

from __future__ import annotations

import contextlib
import os
import random
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from app.procs import listening_pids, port_bindable
from tests.support.seaweed import _PORT_RANGE, _PortReservation

# The SeaweedFS fixtures' range, shared through the same flock reservations: every port and its
# gRPC twin (+10000) stay below the ephemeral range. (23000-28000 put the twins at 33000-38000,
# where an outgoing connection took one between the check and SeaweedFS's bind: "address already
# in use", and the quickstart exited.)
_RANGE = _PORT_RANGE


@contextlib.contextmanager
def quickstart_ports() -> Iterator[tuple[int, int]]:
    """(gateway port, remote base port): the base and its next 4, each with its +10000 twin, free
    and flock-reserved (the seaweed fixtures' lock dir) for the test's life."""
    rng = random.SystemRandom()
    for _ in range(200):
        base = rng.randrange(_RANGE[0], _RANGE[1] - 6)
        ports = [base + i for i in range(6)]  # 5 for SeaweedFS, the 6th for the gateway
        wanted = ports + [p + 10000 for p in ports[:5]]
        fds = [_PortReservation._lock(p) for p in wanted]
        if None not in fds and all(port_bindable(p) for p in wanted):
            try:
                yield ports[5], base
            finally:
                for fd in fds:
                    if fd is not None:
                        os.close(fd)
            return
        for fd in fds:
            if fd is not None:
                os.close(fd)
    raise RuntimeError("no free ports for a quickstart")


def read_until_serving(proc: subprocess.Popen[str], timeout: float, lines: list[str] | None = None) -> str:
    """The quickstart's output up to its banner's last line ("Stop: ..."); fails if it exits first.
    A thread keeps reading afterwards (into ``lines``, when given: what it prints when stopping),
    so the quickstart never blocks on a full pipe."""
    assert proc.stdout is not None
    seen: list[str] = [] if lines is None else lines
    stdout = proc.stdout
    threading.Thread(target=lambda: seen.extend(iter(stdout.readline, "")), daemon=True).start()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = "".join(seen)
        if "Stop: Ctrl-C" in out:
            return out
        if proc.poll() is not None:
            time.sleep(0.5)
            raise AssertionError(f"quickstart exited {proc.returncode} before serving:\n{''.join(seen)}")
        time.sleep(0.2)
    raise AssertionError(f"quickstart not serving within {timeout:.0f}s:\n{''.join(seen)}")


def env_file_from(banner: str) -> Path:
    match = re.search(r"source this \(or paste the lines below\):\s+\. (\S+)", banner)
    assert match, banner
    return Path(match.group(1))


def listener_pids(ports: list[int]) -> set[int]:
    return set().union(*(listening_pids(p) for p in ports))


def gone(pids: set[int], timeout: float = 30) -> bool:
    """All ``pids`` have exited (or are zombies of someone else) within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = {p for p in pids if _alive(p)}
        if not alive:
            return True
        time.sleep(0.2)
    return False


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
