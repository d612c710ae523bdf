"""Multipart uploads split across the nodes of a fleet, with kill -9 of a node under load
(issue 26; docs/fleet.md, "Multipart uploads behind a load balancer").

Three ``ferry serve`` nodes share PostgreSQL in front of SeaweedFS, ``write_replicas: 2`` on the
load's prefix. Writers run uploads whose Create, parts and Complete each go to a random node, as
behind a load balancer; mid-load node 3's gateway is killed with SIGKILL. A request that fails
is retried on another node, as an SDK would. Verdict: every upload whose parts were all
acknowledged completes (an acknowledged part is never lost), and every completed object reads
back byte-exact through the survivors and, after the flush, from the remote with the multipart
ETag the client got.

Quick: 2 writers, 5 uploads each. Soak: ``FERRY_RELIABILITY_ROUNDS`` uploads per writer.
"""

from __future__ import annotations

import hashlib
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.integration.test_fleet_writes import set_replicas, wait_replicating
from tests.reliability.conftest import soak_rounds
from tests.reliability.record import Record
from tests.support.fleet import Fleet

pytestmark = pytest.mark.fleet
MiB = 1024 * 1024
ENV = {"FERRY_POLICY_REFRESH_SECONDS": "0.2", "FERRY_CACHE_REVALIDATE_INTERVAL": "0"}


@pytest.fixture
def fleet(seaweed: Any, fresh_postgres_url: str, tmp_path: Any) -> Iterator[Fleet]:
    with Fleet(seaweed, fresh_postgres_url, tmp_path / "fleet", env=ENV) as f:
        f.wait_live(3)
        yield f


def mp_etag(parts: list[bytes]) -> str:
    return '"' + hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest() + f'-{len(parts)}"'


def retried(rec: Record, nodes: Callable[[], list[Any]], call: Callable[[Any], Any], seconds: float = 60.0) -> Any:
    """``call(client)`` on a random live node, again on another one until it succeeds."""
    deadline = time.monotonic() + seconds
    while True:
        rec.add(operations=1)
        try:
            return call(random.choice(nodes()))
        except Exception as exc:  # a killed node, or a 503 while the fleet sees it gone: retry
            if isinstance(exc, ClientError) and exc.response["ResponseMetadata"]["HTTPStatusCode"] < 500:
                raise
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def test_split_uploads_survive_kill9_of_a_node(fleet: Fleet, seaweed: Any, recorder: Callable[[str, str], Record]
                                               ) -> None:
    rec = recorder("faults", "kill9-split-upload")
    bucket = seaweed.create_bucket(f"split-{uuid.uuid4().hex[:10]}")
    prefix = "split/"
    set_replicas(fleet, bucket, prefix, 2)
    wait_replicating(fleet, bucket, prefix, 3)
    alive = [True, True, True]
    clients = [gw.client() for gw in fleet.nodes]

    def nodes() -> list[Any]:
        return [c for c, up in zip(clients, alive, strict=True) if up]

    completed: dict[str, tuple[str, bytes]] = {}
    lock = threading.Lock()
    per_writer = soak_rounds(5)

    def writer(name: str) -> None:
        rnd = random.Random()
        for i in range(per_writer):
            key = f"{prefix}{name}-{i}"
            parts = [rnd.randbytes(5 * MiB), rnd.randbytes(rnd.randint(1, 300_000))]
            try:
                upload_id = retried(rec, nodes, lambda c, k=key: c.create_multipart_upload(
                    Bucket=bucket, Key=k))["UploadId"]
                listed = [{"PartNumber": n, "ETag": retried(rec, nodes, lambda c, k=key, u=upload_id, n=n, b=body:
                                                            c.upload_part(Bucket=bucket, Key=k, UploadId=u,
                                                                          PartNumber=n, Body=b))["ETag"]}
                          for n, body in enumerate(parts, 1)]
            except Exception as exc:  # nothing acknowledged depends on this upload yet
                rec.odd(f"{key}: a part was never acknowledged: {exc}")
                continue
            try:  # every part acknowledged: the Complete must succeed on some node
                done = retried(rec, nodes, lambda c, k=key, u=upload_id, p=listed: c.complete_multipart_upload(
                    Bucket=bucket, Key=k, UploadId=u, MultipartUpload={"Parts": p}))
            except Exception as exc:
                rec.add(lost=1)
                rec.odd(f"{key}: Complete of acknowledged parts failed: {exc}")
                continue
            if done["ETag"] != mp_etag(parts):
                rec.add(corrupted=1)
            with lock:
                completed[key] = (done["ETag"], b"".join(parts))

    threads = [threading.Thread(target=writer, args=(f"w{j}",)) for j in range(2)]
    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 120
        while len(completed) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        alive[2] = False
        fleet.kill(2)  # kill -9 of node 3 while uploads are spread over all three
        rec.add(faults_injected=1)
        for t in threads:
            t.join(600)
        for gw in fleet.nodes[:2]:
            if not gw.flush(bucket=bucket, timeout=300).get("durable"):
                rec.odd(f"flush on {gw.endpoint} did not complete")
        remote = seaweed.client()
        for key, (etag, whole) in completed.items():
            for client in clients[:2]:
                got = client.get_object(Bucket=bucket, Key=key)["Body"].read()
                rec.add(operations=1, bytes_verified=len(got))
                if got != whole:
                    rec.add(corrupted=1)
            try:
                obj = remote.get_object(Bucket=bucket, Key=key)
            except ClientError:
                rec.add(lost=1)
                continue
            body = obj["Body"].read()
            rec.add(bytes_verified=len(body))
            if (obj["ETag"], hashlib.sha256(body).digest()) != (etag, hashlib.sha256(whole).digest()):
                rec.add(corrupted=1)
    finally:
        fleet.start_node(2)
    print(f"{len(completed)} split uploads completed; {rec.as_json()}")
    assert len(completed) == 2 * per_writer
    rec.assert_clean()
