"""Who listens on a loopback port (Linux /proc), so the quickstart can tell its own processes
from an earlier run's that still hold the port (issue 15)."""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path

_LISTEN = "0A"


def port_bindable(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _listening_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if len(fields) > 9 and fields[3] == _LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(fields[9])
    return inodes


def listening_pids(port: int) -> set[int]:
    """Pids holding a listening socket on ``port`` (only those this user may inspect)."""
    wanted = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    pids: set[int] = set()
    if not wanted:
        return pids
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (entry / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) in wanted:
                        pids.add(int(entry.name))
                        break
    return pids


def listener_in_group(port: int, pgid: int) -> bool:
    """True when a process of process group ``pgid`` listens on ``port``."""
    for pid in listening_pids(port):
        with contextlib.suppress(OSError):
            if os.getpgid(pid) == pgid:
                return True
    return False
