"""A real Ferry gateway process (``ferry serve``) for tests, in front of a given remote.

    gw = GatewayProcess(remote=seaweed, data_dir=tmp).start()
    s3 = gw.client()          # boto3, path style, the bootstrap tenant's key
    gw.kill(); gw.start()     # kill -9 and restart on the same port and data
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import boto3
from botocore.config import Config

ADMIN_TOKEN = "ferry-test-admin-token"
ACCESS_KEY = "FERRYTESTKEY0000001"
SECRET_KEY = "ferry-test-secret-key-0123456789abcdef"
FERRY = str(Path(sys.executable).with_name("ferry"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class GatewayProcess:
    running: set[GatewayProcess] = set()  # started and not stopped: what flush_all() flushes

    def __init__(self, remote: Any, data_dir: Path | None = None, *, tls: Any = None, workers: int = 1,
                 env: dict[str, str] | None = None, port: int | None = None) -> None:
        self.remote = remote
        if data_dir is None:  # a directory of its own, removed when the test run ends (not at stop:
            data_dir = Path(tempfile.mkdtemp(prefix="ferry-gw-"))  # a test may start it again)
            atexit.register(shutil.rmtree, data_dir, ignore_errors=True)
        self.data_dir = Path(data_dir)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.tls = tls
        self.workers = workers
        self.extra_env = env or {}
        self.port = port or free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.data_dir / "gateway.log"

    @property
    def endpoint(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FERRY_", "AWS_"))}
        env.update(
            FERRY_HOST="127.0.0.1",
            FERRY_PORT=str(self.port),
            FERRY_WORKERS=str(self.workers),
            FERRY_DATA_DIR=str(self.data_dir),
            FERRY_REMOTE_ENDPOINT=self.remote.endpoint,
            FERRY_REMOTE_REGION="us-east-1",
            FERRY_REMOTE_ACCESS_KEY=self.remote.access_key,
            FERRY_REMOTE_SECRET_KEY=self.remote.secret_key,
            FERRY_ACCESS_KEY=ACCESS_KEY,
            FERRY_SECRET_KEY=SECRET_KEY,
            FERRY_LOG_LEVEL="warning",
            FERRY_ADMIN_TOKEN=ADMIN_TOKEN,
            FERRY_SWEEP_INTERVAL="0.5",
        )
        if self.tls:
            env.update(FERRY_TLS_CERT=str(self.tls.cert_chain), FERRY_TLS_KEY=str(self.tls.key))
        env.update(self.extra_env)
        return env

    def start(self, timeout: float = 60.0) -> GatewayProcess:
        # Each uvicorn worker imports the whole application again (1.3 s of CPU): on 2 cores
        # under a parallel test run, a 2-worker start was measured at 8-17 s and once passed 30 s.
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child
        self.proc = subprocess.Popen([FERRY, "serve"], env=self.env(), stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        log.close()
        deadline = time.monotonic() + timeout
        ctx = self.tls.client_context() if self.tls else None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ferry serve exited {self.proc.returncode}:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.endpoint}/healthz", timeout=1, context=ctx) as r:
                    if r.status == 200:
                        GatewayProcess.running.add(self)
                        return self
            except (urllib.error.URLError, OSError):
                time.sleep(0.1)
        self.kill()  # never leave a process that did not come up running behind the test
        raise RuntimeError(f"ferry serve did not answer within {timeout}s:\n{self.log_tail()}")

    def log_tail(self, size: int = 4000) -> str:
        try:
            return self.log_path.read_bytes()[-size:].decode(errors="replace")
        except OSError:
            return ""

    def flush(self, bucket: str | None = None, prefix: str = "", timeout: float = 300.0) -> dict[str, Any]:
        """The durability barrier: returns when the remote holds everything written before."""
        import json

        query = urllib.parse.urlencode({k: v for k, v in {"bucket": bucket, "prefix": prefix,
                                                          "timeout": str(timeout)}.items() if v})
        req = urllib.request.Request(f"{self.endpoint}/admin/flush?{query}", method="POST",
                                     headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
        ctx = self.tls.client_context() if self.tls else None
        with urllib.request.urlopen(req, timeout=timeout + 30, context=ctx) as r:
            result: dict[str, Any] = json.loads(r.read())
        return result

    def stop(self, timeout: float = 10.0) -> None:
        GatewayProcess.running.discard(self)
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()

    def kill(self) -> None:
        """kill -9 of the whole process group (all uvicorn workers)."""
        GatewayProcess.running.discard(self)
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def client(self, access_key: str = ACCESS_KEY, secret_key: str = SECRET_KEY, **config: Any) -> Any:
        config.setdefault("s3", {"addressing_style": "path"})
        config.setdefault("retries", {"max_attempts": 1, "mode": "standard"})
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            region_name="us-east-1",
            verify=str(self.tls.ca_bundle) if self.tls else None,
            config=Config(**config),
        )

    def __enter__(self) -> GatewayProcess:
        return self.start() if self.proc is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def flush_all() -> None:
    """Flush every running gateway, so the remote can be inspected directly."""
    for gw in list(GatewayProcess.running):
        if gw.proc is not None and gw.proc.poll() is None:
            result = gw.flush()
            assert result["durable"], f"flush did not complete: {result}"


def remote_client(remote: Any, **config: Any) -> Any:
    """The remote's own client, after every gateway destaged what it buffered (write-back)."""
    flush_all()
    return remote.client(**config)


def admin_call(gw: GatewayProcess, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    """One admin API call with the admin token: its JSON answer (None for an empty one)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"{gw.endpoint}{path}", data=data, method=method,
                                 headers={"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        raw = r.read()
    return json.loads(raw) if raw else None


def readyz(gw: GatewayProcess) -> tuple[int, dict[str, Any]]:
    """``/readyz`` with the admin token (every check's detail): status and body."""
    req = urllib.request.Request(f"{gw.endpoint}/readyz", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())
