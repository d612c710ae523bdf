"""A worker of ``ferry serve --workers N`` must not outlive its owner, whose data-directory lock
dies with it (invariant 6), even when the owner is killed while the worker is still starting."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

OWNER = '''
import multiprocessing, os, sys, time

def worker(out):
    time.sleep(1.5)  # still starting (importing the app) when the owner is killed
    with open(out + ".pid", "w") as f:
        f.write(str(os.getpid()))
    from app.adapters.local.datadir import die_with_parent
    die_with_parent()
    with open(out, "w") as f:
        f.write("still serving")

if __name__ == "__main__":
    multiprocessing.set_start_method("spawn")
    multiprocessing.Process(target=worker, args=(sys.argv[1],)).start()
    os._exit(0)  # the owner dies at once, as under kill -9
'''


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in state


def test_a_worker_whose_owner_died_while_it_started_kills_itself(tmp_path: Path) -> None:
    out = tmp_path / "worker"
    owner = tmp_path / "owner.py"  # a file: spawn's child imports the worker function from it
    owner.write_text(OWNER)
    subprocess.run([sys.executable, str(owner), str(out)], check=True, cwd=ROOT,
                   env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=30)
    pid_file = Path(f"{out}.pid")
    deadline = time.monotonic() + 20
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pid_file.exists(), "the worker never started"
    while pid_file.read_text() == "" and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 10
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert not out.exists(), "the worker went on after its owner was gone"
        assert not _running(pid)
    finally:
        if _running(pid):
            os.kill(pid, 9)
