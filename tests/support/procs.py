"""Run a command that is expected to end on its own (a refusal), bounded in time."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path


def run_bounded(cmd: list[str], env: dict[str, str], timeout: float = 20.0,
                cwd: Path | None = None) -> tuple[int, str, float]:
    """(exit code, output, seconds). A process still running after ``timeout`` is killed with its
    process group (uvicorn workers hold the pipe too) and the call fails naming the command."""
    started = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"{cmd[:3]} still ran after {timeout}s:\n{out.decode(errors='replace')}") from None
    return proc.returncode, out.decode(errors="replace"), time.monotonic() - started
