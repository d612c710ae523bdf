"""One owner per data directory: a second ``ferry serve`` (or a CLI command that would change the
data dir) refuses while a gateway owns it; kill -9 of the owner frees it (flock semantics)."""

from __future__ import annotations

import http.client
import os
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from tests.support.gateway import ACCESS_KEY, ADMIN_TOKEN, FERRY, SECRET_KEY, GatewayProcess, free_port
from tests.support.procs import run_bounded

BODY = bytes(range(256)) * 4096  # 1 MiB


class SlowPut(threading.Thread):
    """A signed PutObject whose body trickles in over ``seconds``: an upload in flight."""

    def __init__(self, gw: GatewayProcess, bucket: str, key: str, seconds: float = 4.0, pieces: int = 16) -> None:
        super().__init__(daemon=True)
        self.gw, self.bucket, self.key = gw, bucket, key
        self.delay, self.pieces = seconds / pieces, pieces
        self.status: int | None = None
        self.error: BaseException | None = None
        self.answer = b""

    def run(self) -> None:
        url = f"{self.gw.endpoint}/{self.bucket}/{self.key}"
        req = AWSRequest(method="PUT", url=url, data=BODY, headers={"Content-Length": str(len(BODY))})
        S3SigV4Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1").add_auth(req)
        conn = http.client.HTTPConnection("127.0.0.1", self.gw.port, timeout=60)
        try:
            conn.putrequest("PUT", f"/{self.bucket}/{self.key}", skip_accept_encoding=True)
            for name, value in req.headers.items():
                conn.putheader(name, value)
            conn.endheaders()
            step = len(BODY) // self.pieces
            for i in range(self.pieces):
                conn.send(BODY[i * step:(i + 1) * step])
                time.sleep(self.delay)
            resp = conn.getresponse()
            self.status, self.answer = resp.status, resp.read()
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            conn.close()


def _wait_for_tmp_file(data_dir: Path, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any((data_dir / "tmp").iterdir()):
            return
        time.sleep(0.05)
    raise AssertionError("the slow upload never reached tmp/")


def _serves(port: int) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def _metrics_files(data_dir: Path) -> set[str]:
    return {p.name for p in (data_dir / "metrics").iterdir()}


def test_second_gateway_on_an_owned_data_dir_refuses_and_harms_nothing(seaweed: Any, tmp_path: Path) -> None:
    gw = GatewayProcess(seaweed, tmp_path / "node", workers=2).start()
    try:
        s3 = gw.client()
        bucket = f"lock-{uuid.uuid4().hex[:12]}"
        s3.create_bucket(Bucket=bucket)
        s3.put_object(Bucket=bucket, Key="warm", Body=b"x")  # the workers write metrics files
        metrics_before = _metrics_files(gw.data_dir)
        assert metrics_before
        upload = SlowPut(gw, bucket, "in-flight")
        upload.start()
        _wait_for_tmp_file(gw.data_dir)

        second_env = dict(gw.env(), FERRY_PORT=str(free_port()))
        code, out, took = run_bounded([FERRY, "serve"], second_env)
        assert code != 0, out
        assert f"pid {gw.proc.pid}" in out, out
        assert took < 15, took
        assert "incomplete upload" not in out, out

        code, out, _ = run_bounded([FERRY, "db", "upgrade"], gw.env())  # SQLite catalog in the owned dir
        assert code == 1 and f"pid {gw.proc.pid}" in out, out

        upload.join(30)
        assert upload.error is None, upload.error
        assert upload.status == 200, upload.answer
        assert s3.get_object(Bucket=bucket, Key="in-flight")["Body"].read() == BODY
        assert metrics_before <= _metrics_files(gw.data_dir), "the owner's metrics dir was wiped"

        # The orphan sweep goes through the owner's admin API: it works while the gateway runs.
        code, out, _ = run_bounded([FERRY, "evict", "--orphans", "--url", gw.endpoint, "--token", ADMIN_TOKEN], gw.env())
        assert code == 0 and "orphan block files" in out, out
    finally:
        gw.stop()


def test_kill_9_of_the_owner_frees_the_data_dir_for_a_successor(seaweed: Any, tmp_path: Path) -> None:
    gw = GatewayProcess(seaweed, tmp_path / "node", workers=2).start()
    s3 = gw.client()
    bucket = f"lock-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="kept", Body=b"acknowledged")
    upload = SlowPut(gw, bucket, "cut", seconds=20)
    upload.start()
    _wait_for_tmp_file(gw.data_dir)
    gw.kill()  # kill -9 of the process group: the lock goes with it
    upload.join(30)
    successor = GatewayProcess(seaweed, gw.data_dir, workers=2)
    try:
        successor.start()
        assert "removed 1 incomplete upload" in successor.log_tail(), successor.log_tail()
        assert successor.client().get_object(Bucket=bucket, Key="kept")["Body"].read() == b"acknowledged"
    finally:
        successor.stop()


def test_owner_killed_alone_takes_its_workers_with_it(seaweed: Any, tmp_path: Path) -> None:
    """kill -9 of the ``ferry serve`` process only: its uvicorn workers must not outlive the lock."""
    gw = GatewayProcess(seaweed, tmp_path / "node", workers=2).start()
    try:
        os.kill(gw.proc.pid, signal.SIGKILL)
        gw.proc.wait()
        deadline = time.monotonic() + 10
        while _serves(gw.port):
            assert time.monotonic() < deadline, "uvicorn workers still serve after their owner was killed"
            time.sleep(0.2)
        successor = GatewayProcess(seaweed, gw.data_dir, port=gw.port).start()
        successor.stop()
    finally:
        gw.kill()


def test_quickstart_refuses_a_directory_in_use(tmp_path: Path) -> None:
    """The quickstart owns its directory the same way, before it writes or starts anything."""
    from app.adapters.local.datadir import DataDirLock

    with DataDirLock(tmp_path):
        code, out, _ = run_bounded([FERRY, "quickstart", "--data-dir", str(tmp_path), "--port", str(free_port()),
                             "--remote-port", str(free_port())], dict(os.environ))
    assert code != 0 and f"pid {os.getpid()}" in out, out
    assert not (tmp_path / "remote-region").exists()
    assert not (tmp_path / "quickstart-credentials.json").exists()
