"""A Redis restart while a worker destages (issue 26): the worker lives on and destages.

kombu 5.7's Redis transport made the worker exit ("Unrecoverable error: AttributeError(
"'NoneType' object has no attribute 'hostname'")") when the connection broke while a late-acked
task ran; its node's writes stayed buffered. Here a gateway node and its Celery worker use a
Redis of the test's own (never the machine's), a slow remote keeps a destage in flight, and that
Redis restarts: the worker must stay up, the write in flight and a write after the restart must
reach the remote.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from tests.support.celery_worker import CeleryWorker
from tests.support.counting_proxy import CountingProxy
from tests.support.databases import throwaway_database
from tests.support.gateway import GatewayProcess
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
               "FERRY_SWEEP_INTERVAL": "1"}
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
