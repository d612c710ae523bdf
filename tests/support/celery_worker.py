"""A real Celery worker process (fleet mode) for tests: the destage side of a gateway node.

    gw = GatewayProcess(seaweed, data_dir, env=fleet_env).start()
    worker = CeleryWorker(gw).start()   # same FERRY_* environment, same data dir, beat included
    worker.kill(); worker.start()       # kill -9 and restart

It runs ``celery -A workers.celery_app worker --pool threads -c 4 -B`` from the project root, so
it consumes the node's own queue (``ferry.<FERRY_NODE_ID>``) and the shared one (``ferry.shared``),
and runs the node's beat (every chore of ``app/services/control/chores.py`` but the per-process ones).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CELERY = str(Path(sys.executable).with_name("celery"))


class CeleryWorker:
    def __init__(self, gateway: Any, *, concurrency: int = 4, beat: bool = True,
                 env: dict[str, str] | None = None, queues: list[str] | None = None) -> None:
        self.gateway = gateway
        self.concurrency = concurrency
        self.beat = beat
        self.queues = queues  # None: the node's queue and the shared one (the default)
        self.extra_env = env or {}
        self.data_dir: Path = gateway.data_dir
        self.log_path = self.data_dir / "celery.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def env(self) -> dict[str, str]:
        env = dict(self.gateway.env())
        env.update(self.extra_env)
        if not env.get("FERRY_BROKER_URL") or not env.get("FERRY_NODE_ID"):
            raise ValueError("a Celery worker needs FERRY_BROKER_URL and FERRY_NODE_ID")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        return env

    @property
    def node_id(self) -> str:
        return self.env()["FERRY_NODE_ID"]

    def command(self) -> list[str]:
        cmd = [CELERY, "-A", "workers.celery_app", "worker", "-l", "info", "--pool", "threads",
               "-c", str(self.concurrency), "-n", f"ferry-{self.node_id}@%h",
               "--without-gossip", "--without-mingle", "--without-heartbeat"]
        if self.queues:
            cmd += ["-Q", ",".join(self.queues)]
        if self.beat:
            cmd += ["-B", "-s", str(self.data_dir / "celerybeat-schedule")]
        return cmd

    def start(self, timeout: float = 30.0) -> CeleryWorker:
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen(self.command(), env=self.env(), cwd=ROOT, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"celery worker exited {self.proc.returncode}:\n{self.log_tail()}")
            if b" ready." in self._log_since(offset):
                return self
            time.sleep(0.1)
        raise RuntimeError(f"celery worker not ready within {timeout}s:\n{self.log_tail()}")

    def _log_since(self, offset: int) -> bytes:
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(offset)
                return fh.read()
        except OSError:
            return b""

    def log_text(self) -> str:
        return self._log_since(0).decode(errors="replace")

    def log_tail(self, size: int = 4000) -> str:
        return self.log_text()[-size:]

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """kill -9 of the worker's process group (worker, beat, their threads)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout: float = 15.0) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def __enter__(self) -> CeleryWorker:
        return self.start() if not self.is_running() else self

    def __exit__(self, *exc: object) -> None:
        self.stop()
