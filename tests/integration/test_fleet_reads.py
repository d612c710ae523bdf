"""Three ``ferry serve`` nodes sharing one cache (docs/fleet.md): peer reads, fleet-wide
single-flight, node loss, and the internal endpoint's signatures. Remote requests are counted by
a CountingProxy in front of SeaweedFS."""

from __future__ import annotations

import hashlib
import os
import threading
import time
import urllib.parse
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from app.domain.cache import block_name
from app.domain.ownership import block_key, owner
from app.fleet.wire import BLOCK_PATH, OWNED_PATH, PING_PATH
from tests.integration.test_zerocopy import metric, zerocopy_bytes
from tests.support.counting_proxy import CountingProxy
from tests.support.databases import throwaway_database
from tests.support.fleet import Fleet
from tests.support.gateway import admin_call as _admin
from tests.support.seaweed import SeaweedServer

pytestmark = pytest.mark.fleet

BLOCK = 4 * 1024 * 1024
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def fleet_db(fleet_services: Any) -> Iterator[str]:
    """A database of its own: the nodes table holds only this module's fleet."""
    with throwaway_database(fleet_services.postgres_url, "ferry_fleet") as url:
        yield url


@pytest.fixture(scope="module")
def fleet(proxy: CountingProxy, fleet_db: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    proxy.record_cut = True  # count the whole-object discovery GETs a fill closes after its block
    with Fleet(proxy, fleet_db, tmp_path_factory.mktemp("fleet"),
               env={"FERRY_CACHE_BLOCK_BYTES": str(BLOCK), "FERRY_REMOTE_REFRESH_SECONDS": "0.5",
                    "FERRY_CACHE_PREFETCH": "off"}) as f:  # these tests count every remote GET
        f.wait_live(3)
        yield f


@pytest.fixture(scope="module")
def fleet_bucket(fleet: Fleet, seaweed: Any) -> str:
    return seaweed.create_bucket(f"fleet-{uuid.uuid4().hex[:10]}")


def _put(seaweed: Any, bucket: str, size: int,
         owned_by: tuple[str, list[str]] | None = None) -> tuple[str, str, bytes]:
    """A cold object written straight to the remote: (key, sha256, bytes). ``owned_by`` (a node
    id and the fleet's ids): a key one of whose blocks that node owns."""
    while True:
        key = f"obj-{uuid.uuid4().hex[:10]}.bin"
        if owned_by is None or any(owner(block_key(bucket, key, i), owned_by[1]) == owned_by[0]
                                   for i in range(-(-size // BLOCK))):
            break
    data = os.urandom(size)
    seaweed.client().put_object(Bucket=bucket, Key=key, Body=data)
    return key, hashlib.sha256(data).hexdigest(), data


def _sha(client: Any, bucket: str, key: str, **kw: Any) -> str:
    body = client.get_object(Bucket=bucket, Key=key, **kw)["Body"]
    digest = hashlib.sha256()
    for chunk in iter(lambda: body.read(MiB), b""):
        digest.update(chunk)
    return digest.hexdigest()


def _blocks_fetched(proxy: CountingProxy, key: str) -> Counter[int]:
    """Remote GETs of ``key`` by the block their first byte is in (an unranged GET is block 0)."""
    firsts = Counter[int]()
    for seen in proxy.gets(key):
        first = int(seen.range[6:].split("-")[0]) if seen.range else 0
        firsts[first // BLOCK] += 1
    return firsts


def test_an_object_read_on_one_node_is_then_served_by_the_others_without_the_remote(
        fleet: Fleet, proxy: CountingProxy, fleet_bucket: str, seaweed: Any) -> None:
    key, sha, data = _put(seaweed, fleet_bucket, 5 * BLOCK + 123)
    while len({owner(block_key(fleet_bucket, key, i), fleet.node_ids()) for i in range(6)}) < 2:
        key, sha, data = _put(seaweed, fleet_bucket, 5 * BLOCK + 123)  # one node owns all six (0.4 %): another key
    proxy.reset()
    assert _sha(fleet.nodes[0].client(), fleet_bucket, key) == sha
    fetched = _blocks_fetched(proxy, key)
    assert fetched == Counter(range(6)), f"each block once from the remote, got {fetched}"
    proxy.reset()
    for node in fleet.nodes[1:]:
        assert _sha(node.client(), fleet_bucket, key) == sha
        part = _sha(node.client(), fleet_bucket, key, Range=f"bytes={BLOCK - 10}-{3 * BLOCK + 9}")
        assert part == hashlib.sha256(data[BLOCK - 10:3 * BLOCK + 10]).hexdigest()
    assert proxy.gets(key) == [], "nodes 2 and 3 must read node 1's object from the fleet, not the remote"


def _ready_rows(fleet_db: str, bucket: str, key: str) -> set[str]:
    """The nodes holding a ready cache entry of the key."""
    import sqlalchemy as sa

    engine = sa.create_engine(fleet_db)
    try:
        with engine.connect() as c:
            return set(c.execute(sa.text("SELECT node_id FROM cache_entries WHERE bucket = :b AND key = :k"
                                         " AND state = 'ready'"), {"b": bucket, "k": key}).scalars())
    finally:
        engine.dispose()


def test_a_first_peer_read_is_relayed_the_second_read_by_name_and_the_third_keeps_a_copy(
        fleet: Fleet, proxy: CountingProxy, fleet_bucket: str, fleet_db: str, seaweed: Any) -> None:
    """FERRY_FLEET_COPY_READS (3): a node's first read of a cold object another node owns whole
    is the owner's bytes relayed (no entry, no copy; the owner fills); the second reads the
    owner's block by name (still no copy); the third keeps a copy (the node has room), so the
    fourth is a local hit. The remote is asked once in all."""
    ids = fleet.node_ids()
    while True:
        key, sha, data = _put(seaweed, fleet_bucket, 512 * 1024)
        if owner(block_key(fleet_bucket, key, 0), ids) == ids[0]:
            break
    reader = fleet.nodes[1]
    proxy.reset()
    relayed, peer_reads = (metric(reader, "ferry_fleet_peer_relayed_total"),
                           metric(reader, "ferry_fleet_peer_reads_total", 'result="peer"'))
    assert _sha(reader.client(), fleet_bucket, key) == sha
    assert metric(reader, "ferry_fleet_peer_relayed_total") == relayed + 1
    rows = _ready_rows(fleet_db, fleet_bucket, key)
    assert ids[1] not in rows, "the first read relays: the reader keeps no entry"
    _wait_ready(fleet_db, fleet_bucket, key, ids[0])
    owned = _owned(reader)
    assert _sha(reader.client(), fleet_bucket, key) == sha
    assert _owned(reader) == owned + 1, "the second read asks the owner's block by name"
    assert ids[1] not in _ready_rows(fleet_db, fleet_bucket, key)
    assert _sha(reader.client(), fleet_bucket, key) == sha  # the third keeps its copy
    deadline = time.monotonic() + 10
    while ids[1] not in _ready_rows(fleet_db, fleet_bucket, key):
        assert time.monotonic() < deadline, "the third read never kept a copy"
        time.sleep(0.1)
    assert metric(reader, "ferry_fleet_peer_relayed_total") == relayed + 1
    before = metric(reader, "ferry_fleet_peer_reads_total", 'result="peer"')
    assert before == peer_reads + 2, "the relay and the copy asked the owner's block endpoint"
    part = _sha(reader.client(), fleet_bucket, key, Range="bytes=10-99")
    assert part == hashlib.sha256(data[10:100]).hexdigest()
    assert metric(reader, "ferry_fleet_peer_reads_total", 'result="peer"') == before, "the fourth is a local hit"
    assert _owned(reader) == owned + 1
    assert len(proxy.gets(key)) == 1, "only the owner's fill asked the remote"


def _owned_by(seaweed: Any, bucket: str, ids: list[str], node: int, size: int) -> tuple[str, str, bytes]:
    """A cold one-block object whose block node ``node`` owns."""
    while True:
        key, sha, data = _put(seaweed, bucket, size)
        if owner(block_key(bucket, key, 0), ids) == ids[node]:
            return key, sha, data


def _owned(node: Any, result: str = "owned") -> float:
    return metric(node, "ferry_fleet_peer_reads_total", f'result="{result}"')


def _wait_ready(fleet_db: str, bucket: str, key: str, node_id: str) -> None:
    deadline = time.monotonic() + 10
    while node_id not in _ready_rows(fleet_db, bucket, key):
        assert time.monotonic() < deadline, f"{node_id} never recorded its entry of {key}"
        time.sleep(0.05)


def test_a_read_of_a_block_its_owner_holds_is_answered_from_the_owners_file_by_name(
        fleet: Fleet, proxy: CountingProxy, fleet_bucket: str, fleet_db: str, seaweed: Any) -> None:
    """Once the owner's row is ready, another node's first read of the object asks the owner for
    the block file by name (no lookup, no discovery there; no relay, no entry here): the right
    bytes, whole or a range, conditions judged on the owner's row, and the remote never asked."""
    ids = fleet.node_ids()
    key, sha, data = _owned_by(seaweed, fleet_bucket, ids, 0, 256 * 1024)
    assert _sha(fleet.nodes[0].client(), fleet_bucket, key) == sha
    _wait_ready(fleet_db, fleet_bucket, key, ids[0])
    proxy.reset()
    reader, other = fleet.nodes[1], fleet.nodes[2]
    owned, relayed = _owned(reader), metric(reader, "ferry_fleet_peer_relayed_total")
    assert _sha(reader.client(), fleet_bucket, key) == sha
    assert _owned(reader) == owned + 1
    assert metric(reader, "ferry_fleet_peer_relayed_total") == relayed, "by name: not a relay"
    assert ids[1] not in _ready_rows(fleet_db, fleet_bucket, key), "a first read keeps no copy"
    owned = _owned(other)
    part = _sha(other.client(), fleet_bucket, key, Range="bytes=1000-99999")
    assert part == hashlib.sha256(data[1000:100000]).hexdigest()
    assert _owned(other) == owned + 1
    assert proxy.gets(key) == [], "the owner's block answered every read"
    key2, _, _ = _owned_by(seaweed, fleet_bucket, ids, 0, 100 * 1024)
    etag = fleet.nodes[0].client().get_object(Bucket=fleet_bucket, Key=key2)["ETag"]
    _wait_ready(fleet_db, fleet_bucket, key2, ids[0])
    from botocore.exceptions import ClientError

    with pytest.raises(ClientError) as failed:
        reader.client().get_object(Bucket=fleet_bucket, Key=key2, IfMatch='"0123456789abcdef0123456789abcdef"')
    assert failed.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412
    with pytest.raises(ClientError) as failed:
        other.client().get_object(Bucket=fleet_bucket, Key=key2, IfNoneMatch=etag)
    assert failed.value.response["ResponseMetadata"]["HTTPStatusCode"] == 304


def test_a_read_by_name_never_answers_an_older_version_than_an_acknowledged_write(
        fleet: Fleet, fleet_bucket: str, fleet_db: str, seaweed: Any) -> None:
    """A write through any node invalidates the owner's row in the write's transaction: a read
    that follows its acknowledgement, on a node that would have read the owner's block by name,
    gets the new bytes; and so does every read after it, on every node."""
    ids = fleet.node_ids()
    key, sha, _ = _owned_by(seaweed, fleet_bucket, ids, 0, 200 * 1024)
    by_name = 0.0
    for round_ in range(3):
        deadline = time.monotonic() + 30
        while ids[0] not in _ready_rows(fleet_db, fleet_bucket, key):  # destaged, then read into the owner's cache
            assert _sha(fleet.nodes[0].client(), fleet_bucket, key) == sha
            assert time.monotonic() < deadline, f"round {round_}: the owner never cached the object"
            time.sleep(0.1)
        owned = _owned(fleet.nodes[1])
        assert _sha(fleet.nodes[1].client(), fleet_bucket, key) == sha
        by_name += _owned(fleet.nodes[1]) - owned
        new = os.urandom(200 * 1024 + round_)
        fleet.nodes[2].client().put_object(Bucket=fleet_bucket, Key=key, Body=new)
        sha = hashlib.sha256(new).hexdigest()
        for node in fleet.nodes:
            assert _sha(node.client(), fleet_bucket, key) == sha, f"round {round_}: an older version served"
    assert by_name >= 1, "node 2 read the owner's block by name before a write"


def test_a_read_by_name_the_owner_cannot_answer_goes_the_usual_way(
        fleet: Fleet, proxy: CountingProxy, fleet_bucket: str, fleet_db: str, seaweed: Any) -> None:
    """The owner's block file gone behind its row (a damaged or swept disk): the owner answers
    404 to the read by name, the asking node counts it refused and reads the usual way (the
    owner's block endpoint fills the block again), with the right bytes."""
    ids = fleet.node_ids()
    key, sha, data = _owned_by(seaweed, fleet_bucket, ids, 0, 300 * 1024)
    assert _sha(fleet.nodes[0].client(), fleet_bucket, key) == sha
    _wait_ready(fleet_db, fleet_bucket, key, ids[0])
    etag = fleet.nodes[0].client().head_object(Bucket=fleet_bucket, Key=key)["ETag"].strip('"')
    name = block_name(fleet_bucket, key, etag, 0, BLOCK)
    block = fleet.nodes[0].data_dir / "cache" / "blocks" / name[:2] / name
    assert block.exists()
    block.unlink()
    reader = fleet.nodes[1]
    refused = _owned(reader, "owned-refused")
    proxy.reset()
    assert _sha(reader.client(), fleet_bucket, key) == sha
    assert _owned(reader, "owned-refused") == refused + 1
    assert len(proxy.gets(key)) == 1, "the owner fetched its block again, once"
    query = urllib.parse.urlencode({"bucket": fleet_bucket, "key": key, "etag": etag, "size": str(len(data)),
                                    "block_size": str(BLOCK), "entry": "1"})
    status, body = fleet.internal_get(0, OWNED_PATH, query, {"Range": "bytes=5-104"})
    assert status == 206 and body == data[5:105], "the refilled block is answered by name again"
    assert fleet.internal_get(0, OWNED_PATH, query, {"Range": "bytes=5-104"}, sign=False)[0] == 403
    bad = query.replace(f"etag={etag}", "etag=0000")
    assert fleet.internal_get(0, OWNED_PATH, bad, {"Range": "bytes=5-104"})[0] == 404, "another version's name"
    assert fleet.internal_get(0, OWNED_PATH, query, {"Range": f"bytes=0-{BLOCK}"})[0] == 404, "beyond the object"


def test_a_first_read_of_an_object_with_a_block_the_reader_owns_keeps_it_at_once(
        fleet: Fleet, proxy: CountingProxy, fleet_bucket: str, fleet_db: str, seaweed: Any) -> None:
    """Blocks the reader owns come from the remote and are the fleet's copy: never relayed."""
    ids = fleet.node_ids()
    key, sha, _ = _put(seaweed, fleet_bucket, 3 * BLOCK + 5, owned_by=(ids[2], ids))
    while {owner(block_key(fleet_bucket, key, i), ids) for i in range(4)} == {ids[2]}:
        key, sha, _ = _put(seaweed, fleet_bucket, 3 * BLOCK + 5, owned_by=(ids[2], ids))
    proxy.reset()
    reader = fleet.nodes[2]
    relayed = metric(reader, "ferry_fleet_peer_relayed_total")
    assert _sha(reader.client(), fleet_bucket, key) == sha
    assert metric(reader, "ferry_fleet_peer_relayed_total") == relayed
    assert ids[2] in _ready_rows(fleet_db, fleet_bucket, key)
    assert _blocks_fetched(proxy, key) == Counter(range(4)), "each block once from the remote"


def test_entries_a_node_fills_for_a_peer_belong_to_the_tenant_whose_read_caused_them(
        fleet: Fleet, fleet_bucket: str, fleet_db: str, seaweed: Any) -> None:
    import sqlalchemy as sa

    ids = fleet.node_ids()
    key, sha, _ = _put(seaweed, fleet_bucket, 5 * BLOCK + 7)
    while not {owner(block_key(fleet_bucket, key, i), ids) for i in range(6)} - {ids[1]}:
        key, sha, _ = _put(seaweed, fleet_bucket, 5 * BLOCK + 7)  # every block node 2's: try another key
    assert _sha(fleet.nodes[1].client(), fleet_bucket, key) == sha
    engine = sa.create_engine(fleet_db)
    try:
        def entries() -> dict[str, Any] | None:
            with engine.connect() as c:
                rows = c.execute(sa.text("SELECT node_id, tenant_id FROM cache_entries WHERE bucket = :b AND key = :k"
                                         " AND state = 'ready'"), {"b": fleet_bucket, "k": key}).all()
                default = c.execute(sa.text("SELECT id FROM tenants WHERE name = 'default'")).scalar()
            # the reader's node and at least one owner of a block (rows are written as blocks land)
            return {"rows": dict(rows), "default": default} if len(rows) >= 2 else None

        deadline, seen = time.monotonic() + 10, entries()
        while seen is None and time.monotonic() < deadline:
            time.sleep(0.2)
            seen = entries()
    finally:
        engine.dispose()
    assert seen is not None and seen["default"] is not None, seen
    assert seen["rows"] == {n: seen["default"] for n in seen["rows"]}, \
        f"every node's entry is the reader's tenant's ({seen['default']}), got {seen['rows']}"


def test_the_owner_sends_a_cached_block_to_a_peer_by_the_kernel(fleet: Fleet, fleet_bucket: str,
                                                               seaweed: Any) -> None:
    """The internal endpoint runs the S3 port's protocol: a block the owner holds goes to the
    asking node by sendfile (counted in ferry_http_zerocopy_bytes_total), byte for byte."""
    key, sha, data = _put(seaweed, fleet_bucket, BLOCK)
    i = fleet.node_ids().index(owner(block_key(fleet_bucket, key, 0), fleet.node_ids()))
    assert _sha(fleet.nodes[i].client(), fleet_bucket, key) == sha  # now in the owner's cache
    query = urllib.parse.urlencode({"bucket": fleet_bucket, "key": key})
    deadline = time.monotonic() + 10
    while True:  # until the block is published (the fill's row and rename follow its last byte)
        before = zerocopy_bytes(fleet.nodes[i])
        status, body = fleet.internal_get(i, BLOCK_PATH, query, {"Range": f"bytes=0-{BLOCK - 1}"})
        assert status == 206 and body == data
        if zerocopy_bytes(fleet.nodes[i]) - before >= BLOCK:
            break
        assert time.monotonic() < deadline, "the owner never sent its cached block zero-copy"
        time.sleep(0.2)


def test_the_internal_endpoint_refuses_unsigned_wrongly_signed_and_stale_requests(fleet: Fleet) -> None:
    query = "bucket=b&key=k"
    assert fleet.ping(0) == 200
    assert fleet.internal_get(0, PING_PATH, sign=False)[0] == 403
    assert fleet.internal_get(0, BLOCK_PATH, query, {"Range": "bytes=0-9"}, sign=False)[0] == 403
    assert fleet.internal_get(0, BLOCK_PATH, query, {"Range": "bytes=0-9"},
                              secret="not-the-fleet-secret-0000")[0] == 403
    assert fleet.internal_get(0, BLOCK_PATH, query, {"Range": "bytes=0-9"}, now=time.time() - 120)[0] == 403
    assert fleet.internal_get(0, BLOCK_PATH, query, {"Range": "bytes=0-9"}, now=time.time() + 120)[0] == 403
    status, _ = fleet.internal_get(0, "/admin/status", sign=False)
    assert status == 403  # nothing of the S3/admin port is reachable here either


def test_thirty_clients_on_three_nodes_fetch_each_block_of_a_cold_object_once(
        fleet: Fleet, proxy: CountingProxy, fleet_bucket: str, seaweed: Any) -> None:
    key, sha, _ = _put(seaweed, fleet_bucket, 64 * MiB)
    clients = [node.client(max_pool_connections=20) for node in fleet.nodes]
    proxy.reset()
    start = threading.Barrier(30)

    def read(i: int) -> str:
        start.wait()
        return _sha(clients[i % 3], fleet_bucket, key)

    with ThreadPoolExecutor(30) as pool:
        results = list(pool.map(read, range(30)))
    assert results == [sha] * 30
    fetched = _blocks_fetched(proxy, key)
    assert fetched == Counter(range(16)), f"one remote fetch per block fleet-wide, got {sorted(fetched.items())}"


def _wait_mapped(fleet: Fleet, bucket: str) -> None:
    """Every node has re-read the mappings (FERRY_REMOTE_REFRESH_SECONDS): HeadBucket answers."""
    deadline = time.monotonic() + 15
    for node in fleet.nodes:
        while True:
            try:
                node.client().head_bucket(Bucket=bucket)
                break
            except Exception:
                assert time.monotonic() < deadline, f"{node.extra_env['FERRY_NODE_ID']} never saw the mapping"
                time.sleep(0.2)


def test_two_regions_read_and_written_through_one_node_of_the_fleet(
        fleet: Fleet, proxy: CountingProxy, fleet_bucket: str, seaweed: Any) -> None:
    """Two SeaweedFS instances are two regions: ``fleet_bucket`` on the default remote (A), a
    bucket mapped to a remote registered through the admin API (B). Node 1 reads and writes
    both; every request reaches the right remote (a CountingProxy each), a cold object of B is
    then served by nodes 2 and 3 with no remote GET, and a write to B is read on nodes 2 and 3
    before, and in B after, its destage."""
    tag = uuid.uuid4().hex[:8]
    bucket_b, far = f"fb-{tag}", f"far-{tag}"
    with SeaweedServer() as region_b, CountingProxy(region_b) as proxy_b:
        proxy_b.record_cut = True
        region_b.client().create_bucket(Bucket=far)
        cold_a, sha_cold_a, _ = _put(seaweed, fleet_bucket, BLOCK + 5)
        cold_b, sha_cold_b, _ = _put(region_b, far, 2 * BLOCK + 5)
        node1 = fleet.nodes[0]
        remote = _admin(node1, "POST", "/admin/remotes", {
            "name": f"region-b-{tag}", "endpoint": proxy_b.endpoint, "region": "eu-west-1",
            "access_key": region_b.access_key, "secret_key": region_b.secret_key})
        _admin(node1, "PUT", f"/admin/bucket-mappings/{bucket_b}", {"remote_id": remote["id"], "remote_bucket": far})
        _wait_mapped(fleet, bucket_b)
        proxy.reset()
        proxy_b.reset()
        s3 = node1.client()
        assert _sha(s3, fleet_bucket, cold_a) == sha_cold_a
        assert _sha(s3, bucket_b, cold_b) == sha_cold_b
        assert {s.key for s in proxy.gets()} == {cold_a} and {s.key for s in proxy_b.gets()} == {cold_b}
        assert len(proxy.gets()) == 2 and len(proxy_b.gets()) == 3, "each block once, from its own region"
        assert all(s.path.startswith(f"/{far}/") for s in proxy_b.requests()), "B is asked under its own name"

        written = {fleet_bucket: os.urandom(BLOCK + 11), bucket_b: os.urandom(BLOCK + 13)}
        for bucket, data in written.items():
            s3.put_object(Bucket=bucket, Key=f"w-{tag}", Body=data)
        for node in fleet.nodes[1:]:  # the other nodes read node 1's buffered writes and B's cold object
            for bucket, data in written.items():
                assert _sha(node.client(), bucket, f"w-{tag}") == hashlib.sha256(data).hexdigest()
            assert _sha(node.client(), bucket_b, cold_b) == sha_cold_b
        assert len(proxy_b.gets(cold_b)) == 3, "nodes 2 and 3 served B's object from the fleet, not from B"
        node1.flush()
        assert region_b.client().get_object(Bucket=far, Key=f"w-{tag}")["Body"].read() == written[bucket_b]
        assert seaweed.client().get_object(Bucket=fleet_bucket, Key=f"w-{tag}")["Body"].read() == written[fleet_bucket]
        puts_a = {s.path for s in proxy.requests("PUT") if "/.ferry-probe/" not in s.path}  # the writability probe
        puts_b = {s.path for s in proxy_b.requests("PUT") if "/.ferry-probe/" not in s.path}
        assert puts_b == {f"/{far}/w-{tag}"} and puts_a == {f"/{fleet_bucket}/w-{tag}"}, (puts_a, puts_b)
        _admin(node1, "DELETE", f"/admin/bucket-mappings/{bucket_b}")
        _admin(node1, "DELETE", f"/admin/remotes/{remote['id']}")


def test_kill_9_of_a_node_under_load_the_others_keep_serving_everything(
        fleet: Fleet, proxy: CountingProxy, fleet_bucket: str, seaweed: Any) -> None:
    """Readers keep going on nodes 1 and 2 while node 3 is killed (kill -9). ``warm`` objects
    were read on every node; ``only3`` objects were read through node 3 alone, so for the blocks
    node 3 owns it held the fleet's only copy: the survivors read those from the remote, and
    nothing else; no read fails or returns wrong bytes."""
    warm = [_put(seaweed, fleet_bucket, 2 * BLOCK + 77) for _ in range(2)]
    only3 = [_put(seaweed, fleet_bucket, 3 * BLOCK + 77) for _ in range(3)]
    # and one with a block node 3 owns, whatever the hashing of the others gave (none of 16: 0.2%)
    only3.append(_put(seaweed, fleet_bucket, 3 * BLOCK + 77, owned_by=("node-3", fleet.node_ids())))
    for key, sha, _ in warm:
        for node in fleet.nodes:
            assert _sha(node.client(), fleet_bucket, key) == sha
    for key, sha, _ in only3:
        assert _sha(fleet.nodes[2].client(), fleet_bucket, key) == sha
    proxy.reset()
    survivors = [fleet.nodes[0].client(), fleet.nodes[1].client()]
    load = list(warm)  # what the readers read; only3 joins once node 3 is dead
    stop = threading.Event()
    failures: list[str] = []
    reads = Counter[int]()

    def reader(worker: int) -> None:
        n = worker
        while not stop.is_set():
            key, sha, _ = load[n % len(load)]
            try:
                if _sha(survivors[worker % 2], fleet_bucket, key) != sha:
                    failures.append(f"{key}: wrong bytes")
            except Exception as exc:  # every failure is reported below
                failures.append(f"{key}: {exc!r}")
            reads[worker] += 1
            n += 1

    threads = [threading.Thread(target=reader, args=(w,)) for w in range(6)]
    for t in threads:
        t.start()
    try:
        time.sleep(1.0)
        fleet.kill(2)
        load.extend(only3)
        time.sleep(4.0)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert failures == [], failures[:5]
    assert sum(reads.values()) > 12
    for key, sha, _ in only3:  # every object, whole, from both survivors (after node 3 aged out too)
        for client in survivors:
            assert _sha(client, fleet_bucket, key) == sha
    node_ids = fleet.node_ids()
    held_by_3 = {(key, i) for key, _, _ in only3 for i in range(4)
                 if owner(block_key(fleet_bucket, key, i), node_ids) == "node-3"}
    refetched = {(seen.key, (int(seen.range[6:].split("-")[0]) if seen.range else 0) // BLOCK)
                 for seen in proxy.gets()}
    assert held_by_3 and refetched == held_by_3, "exactly node 3's blocks were read from the remote again"
