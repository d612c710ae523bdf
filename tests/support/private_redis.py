"""A Redis server of a test's own, on a free port under a temp dir, that the test may restart.

    with PrivateRedis(tmp_path) as r:   # redis-server --port <free> --save ''
        r.url                           # redis://127.0.0.1:<port>/0
        r.restart(down_for=1.0)         # shutdown nosave, then the same server again

Never the machine's Redis on 6379: other users' tests share that one.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

from tests.support.gateway import free_port


class PrivateRedis:
    def __init__(self, base_dir: Path) -> None:
        self.dir = base_dir
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> PrivateRedis:
        subprocess.run(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                        "--appendonly", "no", "--daemonize", "yes", "--dir", str(self.dir),
                        "--logfile", str(self.dir / "redis.log"), "--pidfile", str(self.dir / "redis.pid")],
                       check=True, timeout=30)
        self._wait(up=True)
        return self

    def stop(self) -> None:
        subprocess.run(["redis-cli", "-p", str(self.port), "shutdown", "nosave"], check=False,
                       capture_output=True, timeout=30)
        self._wait(up=False)

    def restart(self, down_for: float = 1.0) -> None:
        self.stop()
        time.sleep(down_for)
        self.start()

    def _wait(self, *, up: bool, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    if up:
                        return
            except OSError:
                if not up:
                    return
            time.sleep(0.05)
        raise RuntimeError(f"private redis on {self.port} did not come {'up' if up else 'down'}")

    def __enter__(self) -> PrivateRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
