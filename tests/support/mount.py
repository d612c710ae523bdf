"""A real ``ferry mount`` process for tests: started on a fresh directory, waited for, unmounted.

Mount tests need /dev/fuse, fusermount3 and trio (the [mount] extra). Without them they skip,
or fail where FERRY_REQUIRE_FUSE=1 (CI) or FERRY_REQUIRE_SERVICES=1 says they must run.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.gateway import ACCESS_KEY, FERRY, SECRET_KEY, GatewayProcess


def fuse_problem() -> str | None:
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if shutil.which("fusermount3") is None:
        return "no fusermount3 (Debian: fuse3)"
    if importlib.util.find_spec("trio") is None:
        return "trio is not installed (the [mount] extra)"
    return None


def require_fuse() -> None:
    problem = fuse_problem()
    if problem is None:
        return
    required = any(os.environ.get(flag, "") not in ("", "0", "false", "no")
                   for flag in ("FERRY_REQUIRE_FUSE", "FERRY_REQUIRE_SERVICES"))
    if required:
        pytest.fail(f"mount tests required (FERRY_REQUIRE_FUSE/FERRY_REQUIRE_SERVICES) but {problem}", pytrace=False)
    pytest.skip(f"mount test skipped: {problem} (set FERRY_REQUIRE_FUSE=1 to fail instead)")


def is_mounted(path: Path) -> bool:
    with open("/proc/self/mounts") as fh:
        return any(line.split()[1] == str(path) for line in fh)


class MountProcess:
    def __init__(self, gateway: GatewayProcess, *args: str, env: dict[str, str] | None = None) -> None:
        self.gateway = gateway
        self.args = args
        self.extra_env = env or {}
        self.path = Path(tempfile.mkdtemp(prefix="ferry-mnt-"))
        self.staging = Path(tempfile.mkdtemp(prefix="ferry-mnt-staging-"))
        self.log_path = self.staging.parent / f"{self.path.name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FERRY_", "AWS_"))}
        env.update(FERRY_URL=self.gateway.endpoint, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
                   FERRY_MOUNT_STAGING=str(self.staging), FERRY_LOG_LEVEL="info",
                   FERRY_DATA_DIR=str(self.gateway.data_dir))  # on the serving node: its local read socket
        env.update(self.extra_env)
        return env

    def start(self, timeout: float = 30.0) -> MountProcess:
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen([FERRY, "mount", str(self.path), *self.args], env=self.env(), stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ferry mount exited {self.proc.returncode}:\n{self.log_tail()}")
            if is_mounted(self.path):
                return self
            time.sleep(0.05)
        raise RuntimeError(f"ferry mount did not mount in {timeout}s:\n{self.log_tail()}")

    def log_tail(self, size: int = 4000) -> str:
        try:
            return self.log_path.read_bytes()[-size:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM, as an operator would; the mount unmounts itself on the way out."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._unmount()
        return self.proc.returncode if self.proc else None

    def kill(self) -> None:
        """kill -9: the kernel's mount stays until it is lazily unmounted."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
        self._unmount()

    def _unmount(self) -> None:
        if is_mounted(self.path):
            subprocess.run(["fusermount3", "-u", "-z", str(self.path)], check=False, capture_output=True)

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.staging, ignore_errors=True)
        self.log_path.unlink(missing_ok=True)
        if not is_mounted(self.path):
            shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> MountProcess:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.cleanup()
