"""The run profile installed as README and the Dockerfile do (``pip install .`` into a fresh
venv, pip's cache allowed, no test extras) gives a Celery worker and beat that start and work.

Issue 26: kombu's Redis transport imports ``packaging``, which only ``kombu[redis]`` brings; a
plain ``celery`` dependency gave a fleet whose worker and beat died at start with
``ModuleNotFoundError`` while the gateway kept acknowledging writes. Here the fresh venv
migrates a catalog of its own, its worker and beat run against a private Redis from outside the
source tree (so the installed package is what runs), and the worker must run a chore its beat
sent.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.databases import throwaway_database
from tests.support.private_redis import PrivateRedis
from tests.support.run_profile import copy_build_context, empty_venv

# The fixture installs the run profile into a fresh venv (its own limit: 900 s); on a machine at load
# average 10 that alone outlasted the suite-wide 300 s (pyproject), so this module has its own limit.
pytestmark = [pytest.mark.fleet, pytest.mark.timeout(1200)]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fresh_venv(tmp_path: Path) -> Path:
    src = copy_build_context(tmp_path / "src")
    venv = empty_venv(tmp_path / "venv")
    done = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "."], cwd=src, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, f"pip install . failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return venv


@pytest.fixture
def fleet_env(fleet_services: object, tmp_path: Path) -> Iterator[dict[str, str]]:
    with throwaway_database(fleet_services.postgres_url, "ferry_inst") as db, \
            PrivateRedis(tmp_path / "redis") as broker:
        yield {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8",
               "FERRY_NODE_ID": "node-inst", "FERRY_DATA_DIR": str(tmp_path / "data"), "FERRY_DATABASE_URL": db,
               "FERRY_BROKER_URL": broker.url, "FERRY_SWEEP_INTERVAL": "1"}


def _start(venv: Path, args: list[str], env: dict[str, str], log: Path, cwd: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen([str(venv / "bin" / "celery"), "-A", "workers.celery_app", *args], env=env,
                                cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, 15)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()


def test_pip_install_gives_a_worker_and_beat_that_consume(fresh_venv: Path, fleet_env: dict[str, str],
                                                          tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere"  # not the source tree: the installed package runs
    outside.mkdir()
    migrated = subprocess.run([str(fresh_venv / "bin" / "ferry"), "db", "upgrade"], env=fleet_env, cwd=outside,
                              capture_output=True, text=True, timeout=120)
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    worker_log, beat_log = tmp_path / "worker.log", tmp_path / "beat.log"
    worker = _start(fresh_venv, ["worker", "-l", "info", "--pool", "threads", "-c", "1", "-n", "inst@%h"],
                    fleet_env, worker_log, outside)
    beat = _start(fresh_venv, ["beat", "-l", "info", "-s", str(tmp_path / "beat-schedule")], fleet_env, beat_log,
                  outside)
    try:
        deadline = time.monotonic() + 90
        while "Task ferry.sweep[" not in worker_log.read_text(errors="replace") or \
                "succeeded" not in worker_log.read_text(errors="replace"):
            assert worker.poll() is None, f"worker exited:\n{worker_log.read_text()[-3000:]}"
            assert beat.poll() is None, f"beat exited:\n{beat_log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no sweep ran:\n{worker_log.read_text()[-3000:]}"
            time.sleep(0.2)
    finally:
        _stop(worker)
        _stop(beat)
    assert "ModuleNotFoundError" not in worker_log.read_text() + beat_log.read_text()
