"""docker-compose.yml run for real, without a container engine: each ferry service's command with
its environment, in its own UTS namespace (``unshare --uts``, its own hostname, as in a container),
against the machine's PostgreSQL and Redis and the session's SeaweedFS. A write through the
gateway must reach the remote: the node's gateway, worker and beat must agree on its queue."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from sqlalchemy import create_engine, text

from tests.support.gateway import ACCESS_KEY, ADMIN_TOKEN, SECRET_KEY, GatewayProcess, free_port
from tests.support.procs import run_bounded

pytestmark = pytest.mark.fleet

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
REDIS_DB = 11  # a Redis db of its own; queue names carry a uuid as well
_VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


def interpolate(value: str, variables: dict[str, str]) -> str:
    """Compose's interpolation: ``${V}``, ``${V:-default}``, ``${V:?error}``, ``$$``."""
    def one(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        name, op, arg = m.group(1), m.group(2), m.group(3)
        value = variables.get(name)
        if op in (":-", "-"):
            return value if value else arg
        if op in (":?", "?") and not value:
            raise KeyError(f"{name}: {arg}")
        return value or ""
    return _VAR.sub(one, value)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    yaml = pytest.importorskip("yaml")
    return dict(yaml.safe_load((ROOT / "docker-compose.yml").read_text()))


class Fleet:
    """The compose file's ferry services as processes of one node."""

    def __init__(self, compose: dict[str, Any], variables: dict[str, str], local: dict[str, str],
                 workdir: Path) -> None:
        self.services = compose["services"]
        self.variables = variables
        self.local = local  # compose host names -> this machine's services
        self.workdir = workdir
        self.procs: list[subprocess.Popen[bytes]] = []
        self.port = free_port()

    def env(self, service: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FERRY_", "AWS_", "CELERY"))}
        for name, raw in self.services[service]["environment"].items():
            value = interpolate(str(raw), self.variables)
            for old, new in self.local.items():
                value = value.replace(old, new)
            env[name] = value
        if env.get("FERRY_PORT"):
            env["FERRY_PORT"] = str(self.port)
        if env.get("FERRY_FLEET_PORT"):  # the internal endpoint: this machine's free port, reached on loopback
            fleet_port = free_port()
            env.update(FERRY_FLEET_PORT=str(fleet_port), FERRY_FLEET_HOST="127.0.0.1",
                       FERRY_FLEET_ADVERTISE=f"127.0.0.1:{fleet_port}")
        if env.get("FERRY_WORKER_METRICS_PORT"):  # a container's port, not this machine's
            env["FERRY_WORKER_METRICS_PORT"] = str(free_port())
        env["PYTHONPATH"] = str(ROOT)
        return env

    def command(self, service: str) -> list[str]:
        program, *args = [str(c) for c in self.services[service]["command"]]
        # The container's /tmp (beat's schedule file) becomes this test's own directory; the
        # program is ferry / celery of this environment (whose path may itself be under /tmp).
        return [str(BIN / program), *(a.replace("/tmp/", f"{self.workdir}/") for a in args)]

    def in_own_uts(self, service: str) -> list[str]:
        """The command run under its own hostname, as docker gives each container."""
        return ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', f"compose-{service}",
                *self.command(service)]

    def run(self, service: str) -> tuple[int, str, float]:
        return run_bounded(self.in_own_uts(service), self.env(service), timeout=120, cwd=ROOT)

    def start(self, service: str) -> subprocess.Popen[bytes]:
        log = open(self.workdir / f"{service}.log", "ab")  # noqa: SIM115 - owned by the child
        proc = subprocess.Popen(self.in_own_uts(service), env=self.env(service), cwd=ROOT, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.procs.append(proc)
        return proc

    def log(self, service: str) -> str:
        path = self.workdir / f"{service}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def wait_for(self, service: str, ready: Any, timeout: float = 60.0) -> None:
        proc = self.procs[-1]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"{service} exited {proc.returncode}:\n{self.log(service)[-3000:]}"
            if ready():
                return
            time.sleep(0.2)
        raise AssertionError(f"{service} not ready in {timeout}s:\n{self.log(service)[-3000:]}")

    def stop(self) -> None:
        for proc in reversed(self.procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture
def fleet(compose: dict[str, Any], seaweed: Any, fresh_postgres_url: str, redis_url: str,
          tmp_path: Path) -> Iterator[Fleet]:
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is missing")
    redis_base = redis_url.rsplit("/", 1)[0]
    variables = {
        "FERRY_DB_PASSWORD": "unused-local-trust", "FERRY_REMOTE_ACCESS_KEY": seaweed.access_key,
        "FERRY_REMOTE_SECRET_KEY": seaweed.secret_key, "FERRY_ACCESS_KEY": ACCESS_KEY, "FERRY_SECRET_KEY": SECRET_KEY,
        "FERRY_ADMIN_TOKEN": ADMIN_TOKEN, "FERRY_FLEET_SECRET": "compose-fleet-secret-0123456789",
        "FERRY_NODE_ID": f"compose-{uuid.uuid4().hex[:8]}",
    }
    env_block = compose["services"]["gateway"]["environment"]
    local = {
        interpolate(env_block["FERRY_DATABASE_URL"], variables): fresh_postgres_url,
        interpolate(env_block["FERRY_BROKER_URL"], variables): f"{redis_base}/{REDIS_DB}",
        interpolate(env_block["FERRY_REMOTE_ENDPOINT"], variables): seaweed.endpoint,
    }
    data = tmp_path / "ferry-data"  # the `ferry-data` volume, shared by gateway and worker
    data.mkdir()
    assert interpolate(env_block["FERRY_DATA_DIR"], variables) == "/data"
    local["/data"] = str(data)
    f = Fleet(compose, variables, local, tmp_path)
    try:
        yield f
    finally:
        f.stop()


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def test_compose_services_destage_a_write_to_the_remote(fleet: Fleet, seaweed: Any, fresh_postgres_url: str) -> None:
    code, out, _ = fleet.run("migrate")
    assert code == 0, out
    fleet.start("gateway")
    fleet.wait_for("gateway", lambda: _healthy(fleet.port))
    fleet.start("worker")
    fleet.wait_for("worker", lambda: " ready." in fleet.log("worker"))
    fleet.start("beat")
    fleet.wait_for("beat", lambda: "beat: Starting" in fleet.log("beat"))

    gw = GatewayProcess(seaweed, port=fleet.port)  # only its client: the process is the compose one
    s3 = gw.client()
    bucket = f"compose-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=bucket, Key="through/the/fleet", Body=b"destaged by the compose worker")

    remote = seaweed.client()
    deadline = time.monotonic() + 60
    while True:
        try:
            body = remote.get_object(Bucket=bucket, Key="through/the/fleet")["Body"].read()
            break
        except ClientError:
            assert time.monotonic() < deadline, (
                f"the write never reached the remote\nworker:\n{fleet.log('worker')[-2000:]}\n"
                f"beat:\n{fleet.log('beat')[-2000:]}")
            time.sleep(0.5)
    assert body == b"destaged by the compose worker"
    engine = create_engine(fresh_postgres_url)
    try:
        with engine.connect() as conn:
            hosts = conn.execute(text("SELECT node_id, host, address FROM nodes")).all()
    finally:
        engine.dispose()
    [(node_id, host, address)] = hosts
    assert (node_id, host) == (fleet.variables["FERRY_NODE_ID"], "compose-gateway")  # containers' hostnames differ
    assert address.startswith("127.0.0.1:"), "the compose gateway runs in fleet mode (its internal endpoint)"


@pytest.mark.parametrize("service", ["gateway", "worker", "beat"])
def test_fleet_services_refuse_a_hostname_node_id(fleet: Fleet, service: str) -> None:
    """Without FERRY_NODE_ID each container would route by its own hostname: refuse to start."""
    env = fleet.env(service)
    del env["FERRY_NODE_ID"]
    code, out, _ = run_bounded(fleet.in_own_uts(service), env, timeout=30, cwd=ROOT)
    assert code != 0, out
    assert "FERRY_NODE_ID must be set explicitly" in out, out
