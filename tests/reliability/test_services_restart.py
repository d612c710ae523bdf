"""The machine's PostgreSQL (the catalog) or Redis (the broker) restarted under a mixed load in
fleet mode. Marked ``restarts_services``: these disturb every other user of those services, so
FERRY_SKIP_SERVICE_RESTARTS=1 skips them; each restart is short (a few seconds).

Checked: while the service is away, clients get clear answers (503 with Retry-After, or a write
that succeeds), never a 500; the gateway and the Celery worker recover by themselves (no process
is restarted by the test); every acknowledged write reaches the remote; no two writes of one key
are at the remote at once (a proxy in front of it counts writes of a key in flight, as
tests/support/counting_proxy.py defines them: destages and the openings of remote uploads by
eager part copies alike); no blob or block file leaks. The service is running again at the end, even on failure.
"""

from __future__ import annotations

import os
import random
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.reliability.fleet import FleetNode, check_leaks, verify_keys
from tests.reliability.ledger import Ledger
from tests.reliability.load import MixedLoad
from tests.reliability.record import Record
from tests.support.counting_proxy import CountingProxy


def _pg_cluster() -> str:
    return sorted(os.listdir("/etc/postgresql"))[-1]


SERVICES: dict[str, dict[str, Any]] = {
    "postgres": {"port": 5432,
                 "restart": lambda: [["pg_ctlcluster", "--skip-systemctl-redirect", _pg_cluster(), "main", "restart"]],
                 "start": lambda: ["pg_ctlcluster", "--skip-systemctl-redirect", _pg_cluster(), "main", "start"]},
    "redis": {"port": 6379,
              "restart": lambda: [["redis-cli", "-p", "6379", "shutdown", "nosave"],
                                  ["redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "-::1", "--port", "6379",
                                   "--save", "", "--appendonly", "no", "--dir", "/var/lib/redis",
                                   "--logfile", "/var/log/redis/ci.log"]],
              "start": lambda: ["redis-server", "--daemonize", "yes", "--bind", "127.0.0.1", "-::1", "--port", "6379",
                                "--save", "", "--appendonly", "no", "--dir", "/var/lib/redis",
                                "--logfile", "/var/log/redis/ci.log"]},
}


def reachable(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def wait_reachable(port: int, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if reachable(port):
            return True
        time.sleep(0.2)
    return False


@pytest.fixture
def service(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    """The service to restart; started again after the test if it is not answering."""
    spec = SERVICES[request.param]
    try:
        yield spec
    finally:
        if not wait_reachable(spec["port"], 10):
            subprocess.run(spec["start"](), check=False, timeout=60)
            assert wait_reachable(spec["port"], 30), f"{request.param} did not come back"


@pytest.mark.fleet
@pytest.mark.restarts_services
@pytest.mark.parametrize("service", list(SERVICES), indirect=True)
def test_service_restart_under_load(service: dict[str, Any], fleet_node: Callable[..., FleetNode], seaweed: Any,
                                    recorder: Callable[[str, str], Record], request: pytest.FixtureRequest) -> None:
    name = request.node.callspec.params["service"]
    rec = recorder("faults", f"{name}-restart")
    ledger = Ledger(rec)
    rnd = random.Random()
    bucket = seaweed.create_bucket(f"sr-{uuid.uuid4().hex[:10]}")
    remote = seaweed.client()
    cold = [f"cold/{i}" for i in range(3)]
    for key in cold:
        body = rnd.randbytes(rnd.randint(100_000, 900_000))
        remote.put_object(Bucket=bucket, Key=key, Body=body)
        ledger.seed(key, body)
    with CountingProxy(seaweed) as proxy:
        node = fleet_node(remote=proxy)
        node.client().head_bucket(Bucket=bucket)
        load = MixedLoad(node.client, bucket, ledger, prefix="w/", cold_keys=cold, threads=3).start()
        try:
            time.sleep(2)
            started = time.monotonic()
            for cmd in service["restart"]():
                subprocess.run(cmd, check=True, timeout=60, stdout=subprocess.DEVNULL)
            rec.add(faults_injected=1)
            back = wait_reachable(service["port"])
            print(f"{name} restarted in {time.monotonic() - started:.1f}s")
            time.sleep(4)  # the load goes on while the gateway and worker reconnect
        finally:
            load.stop()
        assert back, f"{name} did not come back"
        for proc, what in ((node.gw.proc, "gateway"), (node.worker.proc, "worker"), (node.beat.proc, "beat")):
            if proc is None or proc.poll() is not None:
                rec.odd(f"the {what} died when {name} restarted")
        node.ensure_running()
        result = node.gw.flush(bucket, timeout=180)
        if not result.get("durable"):
            rec.odd(f"flush after the {name} restart did not complete: {result}; worker log: "
                    f"{node.worker.log_tail(600)!r}; beat log: {node.beat.log_tail(300)!r}")
        verify_keys(ledger, node.client(), remote, bucket, load.all_keys() + cold)
        leaks = check_leaks(rec, node, bucket)
        if proxy.max_concurrent_writes > 1:
            rec.odd(f"{proxy.max_concurrent_writes} writes of one key were at the remote at once")
            print("overlapping writes:", *proxy.overlaps[:5], sep="\n  ")
            if os.environ.get("FERRY_DEBUG_OVERLAPS"):
                print("WORKER LOG", node.worker.log_tail(20000), "GATEWAY LOG", node.gw.log_tail(20000))
    print(f"{name}: {rec.as_json()}; leaks {leaks}; most writes of a key at once: {proxy.max_concurrent_writes}")
    rec.assert_clean()
