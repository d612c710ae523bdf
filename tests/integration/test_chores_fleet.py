"""Fleet mode: the node's own Celery worker and beat run its chores where its data directory is;
shared chores go to ``ferry.shared`` and any node's worker runs them. Real processes: a gateway,
two Celery workers (Redis broker), PostgreSQL, SeaweedFS."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.celery_worker import CeleryWorker
from tests.support.gateway import ADMIN_TOKEN, GatewayProcess

pytestmark = pytest.mark.fleet


def _wait(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _blocks(data_dir: Path) -> set[str]:
    return {p.name for p in (data_dir / "cache" / "blocks").glob("*/*")}


def test_node_chores_run_on_the_nodes_worker_and_shared_chores_on_the_shared_queue(
        seaweed: Any, tmp_path: Path, fresh_postgres_url: str, redis_url: str) -> None:
    """Node A's worker (its beat, its own queue only) removes the blocks of an invalidated cache
    entry in A's data directory; node B's worker (no beat, B's queue and the shared one) runs A's
    beat's compaction of the shared journal, and none of A's node chores."""
    import redis

    node_a, node_b = f"cha-{uuid.uuid4().hex[:8]}", f"chb-{uuid.uuid4().hex[:8]}"
    common = {"FERRY_DATABASE_URL": fresh_postgres_url, "FERRY_BROKER_URL": redis_url,
              "FERRY_SWEEP_INTERVAL": "0.5", "FERRY_JOURNAL_RETENTION_SECONDS": "1"}
    try:
        with GatewayProcess(seaweed, tmp_path / "a", env={**common, "FERRY_NODE_ID": node_a}) as gw:
            worker_a = CeleryWorker(gw, queues=[f"ferry.{node_a}"]).start()
            worker_b = CeleryWorker(GatewayProcess(seaweed, tmp_path / "b", env={**common, "FERRY_NODE_ID": node_b}),
                                    beat=False).start()
            try:
                s3 = gw.client()
                bucket = f"chores-{uuid.uuid4().hex[:8]}"
                s3.create_bucket(Bucket=bucket)
                s3.put_object(Bucket=bucket, Key="k", Body=b"v1" * 1000)
                gw.flush(bucket)  # destaged by A's worker
                assert s3.get_object(Bucket=bucket, Key="k")["Body"].read() == b"v1" * 1000
                cached = _blocks(gw.data_dir)
                assert cached, "the read did not cache the object"

                # A write invalidates the entry; no process of the gateway removes its blocks:
                # A's janitor chore, on A's queue, does.
                s3.put_object(Bucket=bucket, Key="k", Body=b"v2" * 1000)
                _wait(lambda: not (cached & _blocks(gw.data_dir)), "A's janitor to remove the old blocks")

                # Compaction (shared): v1's durable row goes once v2 is durable, past the retention.
                gw.flush(bucket)
                api = httpx.Client(base_url=gw.endpoint, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})

                def versions() -> list[dict[str, Any]]:
                    rows: list[dict[str, Any]] = api.get("/admin/objects", params={"bucket": bucket}).json()["versions"]
                    return rows

                _wait(lambda: len(versions()) == 1, "compaction of the superseded history")
                api.close()
                s3.close()
                time.sleep(1.0)  # let the logs catch up
                log_a, log_b = worker_a.log_text(), worker_b.log_text()
                assert "ferry.cache-janitor[" in log_a and "ferry.sweep[" in log_a
                assert "ferry.compact[" in log_b and "succeeded" in log_b, log_b[-3000:]
                assert "ferry.compact[" not in log_a, "A's worker consumed the shared queue it was not given"
                for node_chore in ("ferry.cache-janitor[", "ferry.sweep[", "ferry.cache-eviction[", "ferry.destage["):
                    assert node_chore not in log_b, f"B's worker ran A's {node_chore}"
            finally:
                worker_a.stop()
                worker_b.stop()
    finally:
        with contextlib.suppress(redis.RedisError), redis.Redis.from_url(redis_url) as r:
            for node in (node_a, node_b):
                for redis_key in r.scan_iter(match=f"*{node}*"):
                    r.delete(redis_key)


@pytest.mark.slow  # two worker starts (~75 s here on a shared machine)
def test_a_staging_job_runs_in_the_nodes_worker_and_waits_for_it_while_it_is_down(
        seaweed: Any, tmp_path: Path, fresh_postgres_url: str, redis_url: str) -> None:
    """Fleet mode: POST /admin/staging hands the job to the node's Celery worker (``ferry.staging``
    on the node's queue), which warms the prefix into the node's data directory, with progress in
    the row as in embedded mode. A job posted while the worker is down stays queued in the broker
    and runs once the worker is back."""
    import redis

    node = f"stg-{uuid.uuid4().hex[:8]}"
    env = {"FERRY_DATABASE_URL": fresh_postgres_url, "FERRY_BROKER_URL": redis_url, "FERRY_NODE_ID": node}
    bucket = seaweed.create_bucket(f"stage-{uuid.uuid4().hex[:8]}")
    remote = seaweed.client()
    for i in range(6):
        remote.put_object(Bucket=bucket, Key=f"data/{i}", Body=bytes([i]) * 3000)
    try:
        with GatewayProcess(seaweed, tmp_path / "a", env=env) as gw:
            api = httpx.Client(base_url=gw.endpoint, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=30)
            worker = CeleryWorker(gw).start()
            try:
                job = api.post("/admin/staging", json={"bucket": bucket, "prefix": "data/"}).json()
                done: dict[str, Any] = {}
                _wait(lambda: done.update(api.get(f"/admin/staging/{job['id']}").json()) or  # type: ignore[func-returns-value]
                      done["state"] not in ("queued", "running"), "the staging job to finish")
                assert done["state"] == "done", done
                assert (done["objects_done"], done["bytes_done"], done["objects_skipped"]) == (6, 6 * 3000, 0)
                assert _blocks(gw.data_dir), "the worker warmed nothing into the node's data directory"
                _wait(lambda: "ferry.staging[" in worker.log_text(), "the worker's log of the job")

                worker.stop()
                remote.put_object(Bucket=bucket, Key="data/late", Body=b"late" * 100)
                late = api.post("/admin/staging", json={"bucket": bucket, "prefix": "data/"}).json()
                time.sleep(1.0)
                assert api.get(f"/admin/staging/{late['id']}").json()["state"] == "queued"
                worker.start()
                _wait(lambda: api.get(f"/admin/staging/{late['id']}").json()["state"] == "done",
                      "the queued job to run once the worker is back")
                after = api.get(f"/admin/staging/{late['id']}").json()
                assert (after["objects_done"], after["objects_skipped"]) == (7, 6), after
            finally:
                worker.stop()
                api.close()
    finally:
        remote.close()
        with contextlib.suppress(redis.RedisError), redis.Redis.from_url(redis_url) as r:
            for redis_key in r.scan_iter(match=f"*{node}*"):
                r.delete(redis_key)
