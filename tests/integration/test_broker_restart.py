"""A Redis restart while a worker destages (issue 26): the worker lives on and destages.

kombu 5.7's Redis transport made the worker exit ("Unrecoverable error: AttributeError(
"'NoneType' object has no attribute 'hostname'")") when the connection broke while a late-acked
task ran; its node's writes stayed buffered. Here a gateway node and its Celery worker use a
Redis of the test's own (never the machine's), a slow remote keeps a destage in flight, and that
Redis restarts: the worker must stay up, the write in flight and a write after the restart must
reach the remote.

Health of that node's worker (issue 26): the worker and beat write heartbeats into the broker;
with them fresh ``/readyz`` and ``ferry doctor --serving`` pass, and after kill -9 of the
worker both say the node's queue is not consumed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from tests.support.celery_worker import CeleryWorker
from tests.support.counting_proxy import CountingProxy
from tests.support.databases import throwaway_database
from tests.support.gateway import ADMIN_TOKEN, GatewayProcess, readyz
from tests.support.private_redis import PrivateRedis

pytestmark = pytest.mark.fleet


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            assert value, f"timed out after {timeout}s waiting for {what}"
            return value
        time.sleep(0.1)


def state_of(database_url: str, bucket: str, key: str) -> str | None:
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            return conn.execute(text("SELECT state FROM object_versions WHERE bucket = :b AND key = :k "
                                     "ORDER BY seq DESC LIMIT 1"), {"b": bucket, "k": key}).scalar()
    finally:
        engine.dispose()


@pytest.fixture
def node(seaweed: Any, fleet_services: Any, tmp_path: Path) -> Iterator[tuple[GatewayProcess, CeleryWorker,
                                                                               CountingProxy, PrivateRedis, str]]:
    with throwaway_database(fleet_services.postgres_url, "ferry_br") as db, CountingProxy(seaweed) as proxy, \
            PrivateRedis(tmp_path / "redis") as broker:
        env = {"FERRY_NODE_ID": "node-br", "FERRY_DATABASE_URL": db, "FERRY_BROKER_URL": broker.url,
               "FERRY_DESTAGE_BACKOFF_BASE": "0.5", "FERRY_DESTAGE_BACKOFF_CAP": "2",
               "FERRY_SWEEP_INTERVAL": "1", "FERRY_NODE_HEARTBEAT_SECONDS": "1",
               "FERRY_NODE_STALE_SECONDS": "10", "FERRY_READY_CACHE_SECONDS": "0"}
        gw = GatewayProcess(proxy, tmp_path / "node", env=env).start(timeout=90)
        worker = CeleryWorker(gw)
        try:
            worker.start(timeout=90)
            yield gw, worker, proxy, broker, db
        finally:
            worker.stop()
            gw.stop()


def test_worker_survives_a_redis_restart_mid_destage(node: Any, seaweed: Any) -> None:
    gw, worker, proxy, broker, db = node
    bucket = str(seaweed.create_bucket(f"brr-{int(time.time() * 1000) % 10**9}"))
    s3 = gw.client()
    proxy.delay = 3.0  # every remote request takes 3 s: the destage is in flight when Redis goes
    s3.put_object(Bucket=bucket, Key="in-flight", Body=b"x" * 1000)
    wait_for(lambda: state_of(db, bucket, "in-flight") == "destaging", 30, "the destage to start")
    broker.restart(down_for=1.0)
    proxy.delay = 0.0
    s3.put_object(Bucket=bucket, Key="after", Body=b"y" * 1000)
    for key in ("in-flight", "after"):
        wait_for(lambda key=key: state_of(db, bucket, key) == "durable" or not worker.is_running(), 90,
                 f"{key} to be destaged")
        assert worker.is_running(), f"the worker died with the broker restart:\n{worker.log_tail()}"
        assert state_of(db, bucket, key) == "durable"
    assert "Unrecoverable error" not in worker.log_text()


def doctor_serving(gw: GatewayProcess) -> tuple[int, list[str]]:
    ferry = str(Path(sys.executable).with_name("ferry"))
    proc = subprocess.run([ferry, "doctor", "--serving", "--timeout", "3"], env=gw.env(), capture_output=True,
                          text=True, timeout=90)
    return proc.returncode, [line for line in (proc.stdout + proc.stderr).splitlines()
                             if line.startswith(("OK   worker", "OK   beat", "FAIL worker", "FAIL beat"))]


def ferry_cli(gw: GatewayProcess, *args: str) -> subprocess.CompletedProcess[str]:
    ferry = str(Path(sys.executable).with_name("ferry"))
    env = {k: v for k, v in gw.env().items() if not k.startswith("FERRY_")}
    env.update(FERRY_URL=gw.endpoint, FERRY_ADMIN_TOKEN=ADMIN_TOKEN, COLUMNS="200")
    return subprocess.run([ferry, *args], capture_output=True, text=True, env=env, timeout=120,
                          stdin=subprocess.DEVNULL)


def test_readyz_doctor_and_flush_see_the_nodes_worker_and_beat(node: Any, seaweed: Any) -> None:
    gw, worker, _proxy, _broker, _db = node
    _status, body = wait_for(lambda: (r := readyz(gw))[0] == 200 and r, 30, "a ready node with its worker")
    assert body["checks"]["worker"]["ok"], body
    assert "worker of node node-br alive" in body["checks"]["worker"]["detail"]
    code, lines = doctor_serving(gw)
    assert [line.split(":")[0] for line in lines] == ["OK   worker", "OK   beat"], lines
    status = ferry_cli(gw, "status", "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["workers"]["node-br"]["worker"]["alive"] is True
    assert "fleet workers" in ferry_cli(gw, "status").stdout
    stats = json.loads(urllib.request.urlopen(urllib.request.Request(
        f"{gw.endpoint}/admin/stats", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}), timeout=30).read())
    assert [(w["node_id"], w["worker"]["alive"]) for w in stats["workers"]] == [("node-br", True)]  # the status page's

    worker.kill()  # worker and its beat (-B): nothing consumes ferry.node-br any more
    _status, body = wait_for(lambda: (r := readyz(gw))[0] == 503 and "worker of node node-br stale"
                             in r[1]["checks"]["worker"]["detail"] and r, 45, "readyz to see the dead worker")
    assert not body["checks"]["worker"]["ok"]
    assert "worker of node node-br stale" in body["checks"]["worker"]["detail"]
    code, lines = doctor_serving(gw)
    assert code == 1 and any(line.startswith("FAIL worker: worker of node node-br stale") for line in lines), lines

    bucket = str(seaweed.create_bucket(f"brh-{int(time.time() * 1000) % 10**9}"))
    gw.client().put_object(Bucket=bucket, Key="stranded", Body=b"z")
    out = ferry_cli(gw, "flush", f"s3://{bucket}/", "--timeout", "2")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "waiting on node node-br: 1 writes; worker of node node-br stale" in out.stdout, out.stdout
    assert "messages queued" in out.stdout
    status = json.loads(ferry_cli(gw, "status", "--json").stdout)["workers"]["node-br"]
    assert status["worker"]["alive"] is False and status["queue_depth"] >= 1, status  # the stranded destage
