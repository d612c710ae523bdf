"""Writes across the nodes of a fleet and write replicas (docs/fleet.md, "Writes across nodes"):
three ``ferry serve`` nodes with their Celery workers, sharing PostgreSQL and Redis, in front of
SeaweedFS through a CountingProxy whose ``fail_with`` stands for a stopped remote.

- A write acknowledged by one node is read (right sha256), HEAD-ed and listed at once on the
  others, streamed from the node that holds it, with no remote request, while the remote is down;
  that node's worker destages it when the remote returns.
- Overwrites of one key from two nodes at once keep one order: every node reads the same newest
  version, and the remote ends with it.
- A duplicate PUT in flight on two nodes; a flip of ``write_replicas`` 1 -> 2 while writes go on.
- With ``write_replicas: 2``, kill -9 of a node (gateway and worker) under a write load during an
  outage loses no acknowledged write: the survivors holding its replicas take its rows over.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError
from sqlalchemy import create_engine, text

from tests.support.counting_proxy import CountingProxy
from tests.support.databases import throwaway_database
from tests.support.fleet import STALE, Fleet
from tests.support.gateway import ADMIN_TOKEN, GatewayProcess

pytestmark = pytest.mark.fleet

MiB = 1024 * 1024
ENV = {
    "FERRY_DESTAGE_BACKOFF_BASE": "0.5",
    "FERRY_DESTAGE_BACKOFF_CAP": "2",
    "FERRY_DESTAGE_LEASE_SECONDS": "5",
    "FERRY_POLICY_REFRESH_SECONDS": "0.2",
    "FERRY_REMOTE_MAX_ATTEMPTS": "1",
    "FERRY_CACHE_REVALIDATE_INTERVAL": "0",
}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def wdb(fleet_services: Any) -> Iterator[str]:
    """A database of its own: the nodes and journal tables hold only this module's fleet."""
    with throwaway_database(fleet_services.postgres_url, "ferry_fw") as url:
        yield url


@pytest.fixture(scope="module")
def wproxy(seaweed: Any) -> Iterator[CountingProxy]:
    with CountingProxy(seaweed) as p:
        yield p


@pytest.fixture(scope="module")
def fleet(wproxy: CountingProxy, wdb: str, fleet_services: Any,
          tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    # Redis db 13: the node ids (node-1..3) are those of other fleet tests, their queues must not be shared.
    broker = fleet_services.redis_url.rsplit("/", 1)[0] + "/13"
    with Fleet(wproxy, wdb, tmp_path_factory.mktemp("fleetw"), broker_url=broker, env=ENV) as f:
        f.wait_live(3)
        yield f
    import redis

    with redis.Redis.from_url(broker) as r:
        for name in r.scan_iter(match="*node-*"):
            r.delete(name)


@pytest.fixture(scope="module")
def wbucket(fleet: Fleet, seaweed: Any) -> str:
    return str(seaweed.create_bucket(f"fleetw-{uuid.uuid4().hex[:10]}"))


@pytest.fixture
def remote_up(wproxy: CountingProxy) -> Iterator[CountingProxy]:
    wproxy.fail_with = None
    yield wproxy
    wproxy.fail_with = None


def admin(gw: GatewayProcess, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"{gw.endpoint}{path}", data=data, method=method,
                                 headers={"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read() or b"null")


def rows(fleet: Fleet, bucket: str, prefix: str) -> list[dict[str, Any]]:
    """The journal rows under a prefix, as the shared catalog has them."""
    engine = create_engine(fleet.database_url)
    try:
        with engine.connect() as conn:
            found = conn.execute(text(
                "SELECT v.seq, v.key, v.state, v.node_id, v.etag, "
                "(SELECT count(*) FROM journal_replicas r WHERE r.seq = v.seq) AS replicas "
                "FROM object_versions v WHERE v.bucket = :b AND v.key LIKE :p ORDER BY v.seq"),
                {"b": bucket, "p": prefix + "%"}).mappings().all()
    finally:
        engine.dispose()
    return [dict(r) for r in found]


def settled(fleet: Fleet, bucket: str, prefix: str) -> bool:
    return all(r["state"] in ("durable", "superseded") for r in rows(fleet, bucket, prefix))


def remote_sha(seaweed: Any, bucket: str, key: str) -> str | None:
    try:
        return sha(seaweed.client().get_object(Bucket=bucket, Key=key)["Body"].read())
    except ClientError as err:
        if err.response["ResponseMetadata"]["HTTPStatusCode"] == 404:
            return None
        raise


def down(proxy: CountingProxy, gw: GatewayProcess, bucket: str) -> None:
    """Stop the remote (every request answers 503), once the node trusts the bucket."""
    gw.client().head_bucket(Bucket=bucket)
    proxy.fail_with = 503


# ------------------------------------------------------------------ 1. a checkpoint written on node 2


def test_a_checkpoint_written_on_node_2_is_read_on_1_and_3_during_an_outage_then_destaged_by_node_2(
        fleet: Fleet, wbucket: str, remote_up: CountingProxy, seaweed: Any) -> None:
    key = f"ckpt-{uuid.uuid4().hex[:8]}/model.pt"
    parts = [os.urandom(8 * MiB) for _ in range(8)]  # 64 MiB
    whole = b"".join(parts)
    node1, node2, node3 = (gw.client() for gw in fleet.nodes)
    down(remote_up, fleet.nodes[1], wbucket)
    up = node2.create_multipart_upload(Bucket=wbucket, Key=key)["UploadId"]
    done = [{"PartNumber": n, "ETag": node2.upload_part(Bucket=wbucket, Key=key, UploadId=up, PartNumber=n,
                                                        Body=p)["ETag"]} for n, p in enumerate(parts, 1)]
    etag = node2.complete_multipart_upload(Bucket=wbucket, Key=key, UploadId=up,
                                           MultipartUpload={"Parts": done})["ETag"]
    gets_before = len(remote_up.gets(key))

    def read(client: Any) -> str:
        return sha(client.get_object(Bucket=wbucket, Key=key)["Body"].read())

    with concurrent.futures.ThreadPoolExecutor(4) as pool:  # nodes 1 and 3 at once, twice each
        shas = list(pool.map(read, [node1, node3, node1, node3]))
    assert shas == [sha(whole)] * 4
    ranged = node3.get_object(Bucket=wbucket, Key=key, Range=f"bytes={20 * MiB}-{36 * MiB - 1}")["Body"].read()
    assert ranged == whole[20 * MiB:36 * MiB]
    for client in (node1, node3):
        head = client.head_object(Bucket=wbucket, Key=key)
        assert (head["ContentLength"], head["ETag"]) == (len(whole), etag)
    assert len(remote_up.gets(key)) == gets_before  # not one remote GET: the bytes came from node 2
    [row] = rows(fleet, wbucket, key)
    # Node 2's worker retries during the outage: a snapshot may catch an attempt in progress.
    assert row["node_id"] == "node-2" and row["state"] in ("buffered", "destaging"), row
    remote_up.fail_with = None  # the remote returns: node 2's worker destages it
    for client in (node1, node3):  # a listing needs the remote's page; node 2's row is merged in
        listed = client.list_objects_v2(Bucket=wbucket, Prefix=key.split("/")[0] + "/")["Contents"]
        assert [(o["Key"], o["Size"]) for o in listed] == [(key, len(whole))]
    wait_for(lambda: settled(fleet, wbucket, key), 180, "the checkpoint's destage")
    assert remote_sha(seaweed, wbucket, key) == sha(whole)
    worker2 = fleet.celery[1]
    assert worker2 is not None and "Task ferry.destage[" in worker2.log_text()
    assert read(node1) == sha(whole)  # durable now: from the remote or the cache, same bytes


# ------------------------------------------------------------------ 2. overwrites from two nodes


def test_overwrites_of_one_key_from_two_nodes_keep_one_order_everywhere_and_remotely(
        fleet: Fleet, wbucket: str, remote_up: CountingProxy, seaweed: Any) -> None:
    key = f"race-{uuid.uuid4().hex[:8]}"
    clients = [gw.client() for gw in fleet.nodes]
    bodies: dict[str, bytes] = {}
    lock = threading.Lock()

    def writer(node: int) -> None:
        for i in range(12):
            body = f"node{node}-{i}-".encode() + os.urandom(64 * 1024 + node * 1000 + i)
            etag = clients[node].put_object(Bucket=wbucket, Key=key, Body=body)["ETag"].strip('"')
            with lock:
                bodies[etag] = body

    threads = [threading.Thread(target=writer, args=(n,)) for n in (0, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    newest = rows(fleet, wbucket, key)[-1]
    expected = bodies[newest["etag"]]
    for client in clients:  # one newest version on every node: the journal's highest seq
        assert client.get_object(Bucket=wbucket, Key=key)["Body"].read() == expected
    wait_for(lambda: settled(fleet, wbucket, key), 180, "the overwrites' destage")
    assert remote_sha(seaweed, wbucket, key) == sha(expected)
    states = [r["state"] for r in rows(fleet, wbucket, key)]
    assert states[-1] == "durable"
    for client in clients:
        assert client.get_object(Bucket=wbucket, Key=key)["Body"].read() == expected


# ------------------------------------------------------------------ 3. duplicates and a policy flip


def set_replicas(fleet: Fleet, bucket: str, prefix: str, replicas: int) -> None:
    admin(fleet.nodes[0], "POST", "/admin/policies", {"bucket": bucket, "prefix": prefix, "write_replicas": replicas})


def wait_replicating(fleet: Fleet, bucket: str, prefix: str, nodes: int) -> None:
    """Until each of the first ``nodes`` nodes writes with a replica under ``prefix``: each process
    re-reads the rules every 0.2 s, later when the machine is busy (1 s once was not enough)."""
    for i, gw in enumerate(fleet.nodes[:nodes]):
        client, probe = gw.client(), f"{prefix}probe-{i}"

        def replicated(client: Any = client, probe: str = probe) -> bool:
            client.put_object(Bucket=bucket, Key=probe, Body=b"probe")
            return rows(fleet, bucket, probe)[-1]["replicas"] == 1

        wait_for(replicated, 30, f"node {i + 1} writing with a replica")


def test_a_duplicate_put_in_flight_on_two_nodes_with_replicas(fleet: Fleet, wbucket: str,
                                                            remote_up: CountingProxy, seaweed: Any) -> None:
    prefix = f"dup-{uuid.uuid4().hex[:8]}/"
    set_replicas(fleet, wbucket, prefix, 2)
    wait_replicating(fleet, wbucket, prefix, 2)
    key, body = f"{prefix}k", os.urandom(3 * MiB)
    clients = [fleet.nodes[0].client(), fleet.nodes[1].client()]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        etags = list(pool.map(lambda c: c.put_object(Bucket=wbucket, Key=key, Body=body)["ETag"], clients))
    assert etags[0] == etags[1] == f'"{hashlib.md5(body).hexdigest()}"'
    found = rows(fleet, wbucket, key)
    assert len(found) == 2 and {r["node_id"] for r in found} == {"node-1", "node-2"}
    assert all(r["replicas"] == 1 for r in found)  # each acknowledged with its copy elsewhere
    for gw in fleet.nodes:
        assert sha(gw.client().get_object(Bucket=wbucket, Key=key)["Body"].read()) == sha(body)
    wait_for(lambda: settled(fleet, wbucket, prefix), 180, "the duplicates' destage")
    assert remote_sha(seaweed, wbucket, key) == sha(body)


def test_flipping_write_replicas_from_1_to_2_mid_stream(fleet: Fleet, wbucket: str, remote_up: CountingProxy,
                                                        seaweed: Any) -> None:
    prefix = f"flip-{uuid.uuid4().hex[:8]}/"
    set_replicas(fleet, wbucket, prefix, 1)
    client = fleet.nodes[0].client()
    acked: dict[str, bytes] = {}
    flipped = threading.Event()
    flip_seq: list[int] = []

    def writer() -> None:
        i = after_flip = 0
        while i < 20 or after_flip < 12:  # enough writes on each side of the flip, however fast they go
            key, body = f"{prefix}{i:03d}", os.urandom(32 * 1024 + i)
            started_after = flipped.is_set()
            client.put_object(Bucket=wbucket, Key=key, Body=body)
            acked[key] = body
            after_flip += started_after
            i += 1

    down(remote_up, fleet.nodes[0], wbucket)  # rows stay buffered: replica records are kept until durable
    t = threading.Thread(target=writer)
    t.start()
    wait_for(lambda: len(acked) >= 10, 30, "the first writes")
    pre_seq = max(r["seq"] for r in rows(fleet, wbucket, prefix))  # rows up to here: write_replicas 1
    set_replicas(fleet, wbucket, prefix, 2)
    time.sleep(1.0)  # past every process's refresh: writes from here on are replicated
    flip_seq.append(max(r["seq"] for r in rows(fleet, wbucket, prefix)))
    flipped.set()
    t.join(120)
    assert not t.is_alive()
    found = rows(fleet, wbucket, prefix)
    before = [r for r in found if r["seq"] <= pre_seq]
    after = [r for r in found if r["seq"] > flip_seq[0]]
    assert before and all(r["replicas"] == 0 for r in before), before[:3]
    assert len(after) >= 10 and all(r["replicas"] == 1 for r in after), after[:3]
    remote_up.fail_with = None
    wait_for(lambda: settled(fleet, wbucket, prefix), 180, "the stream's destage")
    for key, body in acked.items():
        assert remote_sha(seaweed, wbucket, key) == sha(body), key


# ------------------------------------------------------------------ 4. kill -9 of node 3 with replicas


@pytest.mark.slow  # ~90 s: the node must be seen as lost (3 s), then its rows taken over and destaged
def test_kill_9_of_node_3_under_load_with_two_replicas_loses_no_acknowledged_write(
        fleet: Fleet, wbucket: str, remote_up: CountingProxy, seaweed: Any) -> None:
    prefix = f"kill-{uuid.uuid4().hex[:8]}/"
    set_replicas(fleet, wbucket, prefix, 2)
    time.sleep(1.0)
    for gw in fleet.nodes[:2]:
        gw.client().head_bucket(Bucket=wbucket)  # trusted during the outage
    down(remote_up, fleet.nodes[2], wbucket)  # nothing destages: every acked write is only buffered
    acked: dict[str, bytes] = {}
    lock = threading.Lock()
    stop = threading.Event()

    def writer(node: int, name: str) -> None:
        client = fleet.nodes[node].client()
        i = 0
        while not stop.is_set():
            key, body = f"{prefix}{name}-{i:04d}", os.urandom(16 * 1024 + (i % 7) * 50_000)
            i += 1
            try:
                client.put_object(Bucket=wbucket, Key=key, Body=body)
            except Exception:  # node 3 killed mid-request, or no second node: not acknowledged
                if node == 2:
                    return
                continue
            with lock:
                acked[key] = body

    threads = [threading.Thread(target=writer, args=(n, f"w{n}{j}")) for n in (0, 1, 2) for j in range(2)]
    for t in threads:
        t.start()
    wait_for(lambda: sum(k.split("/")[1].startswith("w2") for k in list(acked)) >= 20, 60, "writes on node 3")
    fleet.kill(2)  # kill -9 of node 3's gateway and worker, mid-write
    time.sleep(1.0)
    stop.set()
    for t in threads:
        t.join(60)
    on_node3 = [k for k in acked if k.split("/")[1].startswith("w2")]
    assert len(on_node3) >= 20
    remote_up.fail_with = None
    try:
        wait_for(lambda: settled(fleet, wbucket, prefix), STALE + 120, "every acknowledged write's destage")
        taken = [r for r in rows(fleet, wbucket, prefix) if r["key"] in on_node3]
        assert all(r["node_id"] != "node-3" for r in taken)  # destaged by the survivors
        missing = [k for k, body in acked.items() if remote_sha(seaweed, wbucket, k) != sha(body)]
        assert not missing, f"{len(missing)} acknowledged writes did not reach the remote: {missing[:5]}"
    finally:
        fleet.start_node(2)
        fleet.wait_live(3)
