"""Regions: two SeaweedFS instances stand for two remotes; one node serves a bucket on each.

Each bucket's reads, writes (write-back) and destages go to its own remote, under the remote
bucket's name; a remote's capability profile decides which keys the gateway refuses; a remote's
keys rotate through the admin API without restarting the gateway or its Celery worker; a worker
serves its own destage counters. The same two regions behind the 3-node fleet (read and written
through one node, cross-node reads, remote request counts per region) are in
``tests/integration/test_fleet_reads.py``, which reuses that module's running fleet.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import io
import json
import os
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

from tests.support.gateway import ADMIN_TOKEN, GatewayProcess, free_port
from tests.support.seaweed import SeaweedServer

pytestmark = pytest.mark.timeout(240)

REFRESH = "0.5"  # FERRY_REMOTE_REFRESH_SECONDS: how soon every process sees an admin change
KEY_B1 = ("REGIONB0ACCESS0000001", "region-b-secret-one-0123456789")
KEY_B2 = ("REGIONB0ACCESS0000002", "region-b-secret-two-0123456789")


def admin(gw: GatewayProcess, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"{gw.endpoint}{path}", data=data, method=method,
                                 headers={"Authorization": f"Bearer {ADMIN_TOKEN}",
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        raw = r.read()
    return json.loads(raw) if raw else None


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = predicate()
            if got:
                return got
        except (ClientError, OSError):
            if time.monotonic() >= deadline:
                raise
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def body_of(client: Any, bucket: str, key: str) -> bytes:
    data: bytes = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    return data


def keys_of(client: Any, bucket: str) -> list[str]:
    return sorted(o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", []))


@pytest.fixture(scope="module")
def region_a() -> Iterator[SeaweedServer]:
    server = SeaweedServer().start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def region_b() -> Iterator[SeaweedServer]:
    """The second region, with two identities (one per key of a rotation)."""
    server = SeaweedServer(access_key=KEY_B1[0], secret_key=KEY_B1[1], extra_credentials=(KEY_B2,)).start()
    try:
        yield server
    finally:
        server.close()


@contextlib.contextmanager
def node(region_a: SeaweedServer, data_dir: Path, fleet: dict[str, str] | None,
         worker_env: dict[str, str] | None = None) -> Iterator[tuple[GatewayProcess, Any]]:
    """A gateway on region A (its default remote) and, in fleet mode, its Celery worker."""
    env = {"FERRY_REMOTE_REFRESH_SECONDS": REFRESH, "FERRY_DESTAGE_MAX_ATTEMPTS": "1000",
           "FERRY_DESTAGE_BACKOFF_CAP": "1", **(fleet or {})}
    worker = None
    # Generous start timeouts: the machine running the suite may be busy (a cold start is slow).
    with GatewayProcess(region_a, data_dir, env=env).start(timeout=120) as gw:
        try:
            if fleet:
                from tests.support.celery_worker import CeleryWorker

                worker = CeleryWorker(gw, env=worker_env).start(timeout=120)
            yield gw, worker
        finally:
            if worker is not None:
                worker.stop()


@contextlib.contextmanager
def fleet_env(request: pytest.FixtureRequest, fleet: bool) -> Iterator[dict[str, str] | None]:
    if not fleet:
        yield None
        return
    import redis

    url = request.getfixturevalue("fresh_postgres_url")
    broker = request.getfixturevalue("redis_url")
    node_id = f"reg-{uuid.uuid4().hex[:10]}"
    try:
        yield {"FERRY_DATABASE_URL": url, "FERRY_BROKER_URL": broker, "FERRY_NODE_ID": node_id}
    finally:
        with contextlib.suppress(redis.RedisError), redis.Redis.from_url(broker) as r:
            for key in r.scan_iter(match=f"*{node_id}*"):
                r.delete(key)


def register_b(gw: GatewayProcess, region_b: SeaweedServer, key: tuple[str, str], **extra: Any) -> dict[str, Any]:
    remote: dict[str, Any] = admin(gw, "POST", "/admin/remotes", {
        "name": f"region-b-{uuid.uuid4().hex[:6]}", "endpoint": region_b.endpoint, "region": "eu-west-1",
        "access_key": key[0], "secret_key": key[1], **extra})
    return remote


@pytest.mark.parametrize("fleet", [False, pytest.param(True, marks=pytest.mark.fleet)], ids=["embedded", "celery"])
def test_two_buckets_on_two_remotes_through_one_node(request: pytest.FixtureRequest, fleet: bool,
                                                     region_a: SeaweedServer, region_b: SeaweedServer,
                                                     tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    bucket_a, bucket_b, remote_bucket_b = f"ra-{tag}", f"rb-{tag}", f"far-{tag}"
    bucket_m, remote_bucket_m = f"rm-{tag}", f"near-{tag}"
    direct_a, direct_b = region_a.client(), region_b.client()
    direct_a.create_bucket(Bucket=bucket_a)
    direct_a.create_bucket(Bucket=remote_bucket_m)
    direct_b.create_bucket(Bucket=remote_bucket_b)
    direct_b.put_object(Bucket=remote_bucket_b, Key="cold/b.txt", Body=b"only in region B")
    with fleet_env(request, fleet) as env, node(region_a, tmp_path / "gw", env) as (gw, _worker):
        remote = register_b(gw, region_b, KEY_B1)
        mapping = admin(gw, "PUT", f"/admin/bucket-mappings/{bucket_b}",
                        {"remote_id": remote["id"], "remote_bucket": remote_bucket_b})
        assert mapping["remote_name"] == remote["name"]
        # A third bucket mapped to region A registered as a remote of its own (another name there).
        near = admin(gw, "POST", "/admin/remotes", {"name": f"region-a-{tag}", "endpoint": region_a.endpoint,
                                                    "access_key": region_a.access_key,
                                                    "secret_key": region_a.secret_key})
        admin(gw, "PUT", f"/admin/bucket-mappings/{bucket_m}", {"remote_id": near["id"],
                                                               "remote_bucket": remote_bucket_m})
        s3 = gw.client()
        s3.put_object(Bucket=bucket_m, Key="m.txt", Body=b"mapped in region A")
        body_a, body_b = os.urandom(70_000), os.urandom(90_000)
        s3.put_object(Bucket=bucket_a, Key="w/a.bin", Body=body_a)
        s3.put_object(Bucket=bucket_b, Key="w/b.bin", Body=body_b)
        big = os.urandom(11 * 1024 * 1024)
        s3.upload_fileobj(io.BytesIO(big), bucket_b, "w/multi.bin",
                          Config=TransferConfig(multipart_threshold=5 * 1024 * 1024, multipart_chunksize=5 * 1024 * 1024))
        # A duplicate request in flight: the same PUT twice at once; the remote ends with it.
        dup = os.urandom(50_000)
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            etags = {f.result()["ETag"] for f in [pool.submit(s3.put_object, Bucket=bucket_b, Key="w/dup.bin",
                                                              Body=dup) for _ in range(2)]}
        assert etags == {f'"{hashlib.md5(dup).hexdigest()}"'}
        # Read-your-writes on both, then the cold object only region B holds, listing included.
        assert body_of(s3, bucket_a, "w/a.bin") == body_a
        assert body_of(s3, bucket_b, "w/b.bin") == body_b
        assert body_of(s3, bucket_b, "cold/b.txt") == b"only in region B"
        assert keys_of(s3, bucket_b) == ["cold/b.txt", "w/b.bin", "w/dup.bin", "w/multi.bin"]
        with pytest.raises(ClientError) as info:
            s3.head_bucket(Bucket=f"far-{tag}")  # the remote's name is not a gateway bucket
        assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] in (403, 404)

        gw.flush()  # destage: the embedded executor, or the node's Celery worker
        assert keys_of(direct_a, bucket_a) == ["w/a.bin"]
        assert body_of(direct_a, remote_bucket_m, "m.txt") == b"mapped in region A"
        assert body_of(s3, bucket_m, "m.txt") == b"mapped in region A"
        assert keys_of(direct_b, remote_bucket_b) == ["cold/b.txt", "w/b.bin", "w/dup.bin", "w/multi.bin"]
        assert body_of(direct_b, remote_bucket_b, "w/b.bin") == body_b
        assert hashlib.sha256(body_of(direct_b, remote_bucket_b, "w/multi.bin")).digest() == \
            hashlib.sha256(big).digest()
        assert body_of(direct_b, remote_bucket_b, "w/dup.bin") == dup
        names_a = {b["Name"] for b in direct_a.list_buckets()["Buckets"]}
        assert bucket_b not in names_a and remote_bucket_b not in names_a, "region B's data reached region A"
        assert bucket_m not in names_a  # only its remote name exists there
        listed = {b["Name"] for b in s3.list_buckets()["Buckets"]}
        assert {bucket_a, bucket_b, bucket_m} <= listed and remote_bucket_b not in listed

        # Write-through on region B: at once there, and a DeleteObjects goes there too.
        admin(gw, "POST", "/admin/policies", {"bucket": bucket_b, "prefix": "wt/", "mode": "write-through"})
        s3.put_object(Bucket=bucket_b, Key="wt/now.txt", Body=b"through to B")
        assert body_of(direct_b, remote_bucket_b, "wt/now.txt") == b"through to B"
        deleted = s3.delete_objects(Bucket=bucket_b, Delete={"Objects": [{"Key": "wt/now.txt"}]})
        assert [d["Key"] for d in deleted.get("Deleted", [])] == ["wt/now.txt"] and not deleted.get("Errors")
        assert "wt/now.txt" not in keys_of(direct_b, remote_bucket_b)

        # Profiles: region B turns "aws"; its bucket stops refusing keys a filesystem would
        # rename (a read of one is a plain NoSuchKey), region A's (seaweedfs) still refuses.
        admin(gw, "PATCH", f"/admin/remotes/{remote['id']}", {"profile": "aws"})
        with pytest.raises(ClientError) as info:
            s3.get_object(Bucket=bucket_a, Key="a//b")
        assert info.value.response["Error"]["Code"] == "InvalidArgument"
        with pytest.raises(ClientError) as info:
            s3.get_object(Bucket=bucket_b, Key="a//b")
        assert info.value.response["Error"]["Code"] == "NoSuchKey"
        with pytest.raises(ClientError) as info:
            s3.put_object(Bucket=bucket_a, Key="folder/", Body=b"bytes a filesystem would drop")
        assert info.value.response["Error"]["Code"] == "InvalidArgument"
        s3.close()


@pytest.mark.fleet
def test_rotated_keys_apply_on_gateway_and_worker_without_restart(request: pytest.FixtureRequest,
                                                                  region_a: SeaweedServer,
                                                                  region_b: SeaweedServer, tmp_path: Path) -> None:
    """Region B revokes the first key; the admin API gives the second; the gateway's reads and
    the worker's destages use it within the refresh interval, no process restarted. The worker
    then shows its destage counters on its own metrics port."""
    tag = uuid.uuid4().hex[:8]
    bucket_b, remote_bucket_b = f"rot-{tag}", f"rotfar-{tag}"
    region_b.client().create_bucket(Bucket=remote_bucket_b)
    metrics_port = free_port()
    with fleet_env(request, True) as env, node(region_a, tmp_path / "gw", env,
                                              {"FERRY_WORKER_METRICS_PORT": str(metrics_port)}) as (gw, worker):
        remote = register_b(gw, region_b, KEY_B1)
        admin(gw, "PUT", f"/admin/bucket-mappings/{bucket_b}", {"remote_id": remote["id"],
                                                                "remote_bucket": remote_bucket_b})
        s3 = gw.client()
        s3.put_object(Bucket=bucket_b, Key="before", Body=b"with key one")
        gw.flush(bucket_b)
        assert body_of(region_b.client(), remote_bucket_b, "before") == b"with key one"

        # Region B revokes key one (its s3 config now holds key two only).
        region_b.stop()
        region_b.access_key, region_b.secret_key = KEY_B2
        region_b.extra_credentials = ()
        region_b.start()
        region_b.client().put_object(Bucket=remote_bucket_b, Key="cold", Body=b"cold after rotation")
        with pytest.raises(ClientError) as info:
            s3.get_object(Bucket=bucket_b, Key="cold")
        assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
        s3.put_object(Bucket=bucket_b, Key="during", Body=b"acknowledged while the key was revoked")
        rows = wait_for(lambda: [e for e in admin(gw, "GET", f"/admin/journal?bucket={bucket_b}&prefix=during")
                                 ["entries"] if e.get("last_error")], 30, "the worker's destage to fail with key one")
        assert rows[0]["status"] in ("pending", "inflight"), rows

        admin(gw, "PATCH", f"/admin/remotes/{remote['id']}", {"access_key": KEY_B2[0], "secret_key": KEY_B2[1]})
        assert wait_for(lambda: body_of(s3, bucket_b, "cold"), 10, "the gateway to use key two") == \
            b"cold after rotation"
        gw.flush(bucket_b, timeout=60)  # the worker, never restarted, destages with key two
        assert body_of(region_b.client(), remote_bucket_b, "during") == b"acknowledged while the key was revoked"
        assert worker.proc is not None and worker.proc.poll() is None

        scraped = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
        durable = [line for line in scraped.splitlines()
                   if line.startswith("ferry_destage_attempts_total") and 'outcome="durable"' in line]
        assert durable and float(durable[0].split()[-1]) >= 2, scraped[-3000:]
        s3.close()


def test_admin_api_reports_profiles(gateway: GatewayProcess) -> None:
    """The default remote's profile, and a registered remote's (default seaweedfs; unknown refused)."""
    assert admin(gateway, "GET", "/admin/remote")["profile"] == "seaweedfs"
    created = admin(gateway, "POST", "/admin/remotes", {"name": f"p-{uuid.uuid4().hex[:6]}",
                                                       "endpoint": "http://127.0.0.1:9"})
    try:
        assert created["profile"] == "seaweedfs"
        with pytest.raises(urllib.error.HTTPError) as info:
            admin(gateway, "PATCH", f"/admin/remotes/{created['id']}", {"profile": "ntfs"})
        assert info.value.code == 422
        assert admin(gateway, "PATCH", f"/admin/remotes/{created['id']}", {"profile": "aws"})["profile"] == "aws"
    finally:
        admin(gateway, "DELETE", f"/admin/remotes/{created['id']}")
