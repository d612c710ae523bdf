"""Multipart uploads behind a load balancer (docs/fleet.md, "Multipart uploads across nodes"):
three ``ferry serve`` nodes sharing PostgreSQL in front of SeaweedFS, boto3 against each node's
endpoint, the parts of one upload spread over the nodes.

- ListParts on any node lists every part; Complete on any node gathers the parts the other
  nodes took, and the object reads back byte-exact on all three and, once destaged, on the
  remote with the multipart ETag; the other nodes drop their copies of the parts.
- kill -9 of a node holding a part before Complete: with ``write_replicas: 1`` the Complete
  answers 503 ServiceUnavailable and commits nothing (the upload stays open, and completes once
  the node is back); with ``write_replicas: 2`` it completes from the part's replica.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from sqlalchemy import create_engine, text

from tests.integration.test_fleet_writes import rows, set_replicas, wait_for, wait_replicating
from tests.integration.test_multipart_claims import mp_etag
from tests.support.databases import throwaway_database
from tests.support.fleet import Fleet

pytestmark = pytest.mark.fleet

MiB = 1024 * 1024
ENV = {"FERRY_POLICY_REFRESH_SECONDS": "0.2", "FERRY_REMOTE_MAX_ATTEMPTS": "1",
       "FERRY_CACHE_REVALIDATE_INTERVAL": "0"}


@pytest.fixture(scope="module")
def mdb(fleet_services: Any) -> Iterator[str]:
    """A database of its own: the nodes table holds only this module's fleet."""
    with throwaway_database(fleet_services.postgres_url, "ferry_fmp") as url:
        yield url


@pytest.fixture(scope="module")
def fleet(seaweed: Any, mdb: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    with Fleet(seaweed, mdb, tmp_path_factory.mktemp("fleetmp"), env=ENV) as f:
        f.wait_live(3)
        yield f


@pytest.fixture(scope="module")
def mbucket(fleet: Fleet, seaweed: Any) -> str:
    return str(seaweed.create_bucket(f"fleetmp-{uuid.uuid4().hex[:10]}"))


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def blob_files(data_dir: Path) -> set[str]:
    """The committed blobs of a node's data directory."""
    return {p.name for p in (data_dir / "blobs").glob("*/*") if p.is_file()}


def part_replicas(fleet: Fleet, upload_id: str) -> dict[int, tuple[str, str | None]]:
    """Part number -> (the node that took it, the node holding its replica), from the catalog."""
    engine = create_engine(fleet.database_url)
    try:
        with engine.connect() as conn:
            found = conn.execute(text("SELECT part_number, node_id, replica_node FROM multipart_parts "
                                      "WHERE upload_id = :u"), {"u": upload_id}).all()
    finally:
        engine.dispose()
    return {r[0]: (r[1], r[2]) for r in found}


def spread(fleet: Fleet, bucket: str, key: str, bodies: list[bytes], nodes: list[int]) -> tuple[str, list[dict]]:
    """Create the upload on ``nodes[0]``'s endpoint, then part n on node ``nodes[n - 1]``."""
    upload_id = fleet.nodes[nodes[0]].client().create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    listed = []
    for number, (body, node) in enumerate(zip(bodies, nodes, strict=True), 1):
        etag = fleet.nodes[node].client().upload_part(Bucket=bucket, Key=key, UploadId=upload_id,
                                                      PartNumber=number, Body=body)["ETag"]
        listed.append({"PartNumber": number, "ETag": etag})
    return upload_id, listed


def test_parts_and_complete_spread_over_three_nodes(fleet: Fleet, mbucket: str, seaweed: Any) -> None:
    key = f"spread-{uuid.uuid4().hex[:8]}/ckpt.bin"
    bodies = [os.urandom(5 * MiB + 11), os.urandom(5 * MiB), os.urandom(5 * MiB + 3), os.urandom(777)]
    before = [blob_files(gw.data_dir) for gw in fleet.nodes]
    upload_id, listed = spread(fleet, mbucket, key, bodies, [0, 1, 2, 0])
    for gw in fleet.nodes:  # ListParts from any node lists all parts
        got = gw.client().list_parts(Bucket=mbucket, Key=key, UploadId=upload_id)["Parts"]
        assert [(p["PartNumber"], p["ETag"], p["Size"]) for p in got] == [
            (d["PartNumber"], d["ETag"], len(b)) for d, b in zip(listed, bodies, strict=True)]
    done = fleet.nodes[1].client().complete_multipart_upload(Bucket=mbucket, Key=key, UploadId=upload_id,
                                                             MultipartUpload={"Parts": listed})
    assert done["ETag"] == mp_etag(bodies)
    whole = b"".join(bodies)
    for gw in fleet.nodes:
        got = gw.client().get_object(Bucket=mbucket, Key=key)
        assert (got["ETag"], sha(got["Body"].read())) == (mp_etag(bodies), sha(whole))
    [row] = rows(fleet, mbucket, key)
    assert row["node_id"] == "node-2"  # its blobs are all on the completing node's disk
    assert fleet.nodes[1].flush(bucket=mbucket, timeout=120)["durable"]
    remote = seaweed.client().get_object(Bucket=mbucket, Key=key)
    assert (remote["ETag"], sha(remote["Body"].read())) == (mp_etag(bodies), sha(whole))
    for i in (0, 2):  # nodes 1 and 3 dropped the part blobs they took
        wait_for(lambda i=i: blob_files(fleet.nodes[i].data_dir) <= before[i], 30, f"node {i + 1}'s drop")
    for gw in fleet.nodes:
        assert sha(gw.client().get_object(Bucket=mbucket, Key=key)["Body"].read()) == sha(whole)


def test_a_part_holder_killed_before_complete_with_one_replica_is_503_and_nothing_committed(
        fleet: Fleet, mbucket: str) -> None:
    key = f"lost-{uuid.uuid4().hex[:8]}.bin"
    bodies = [os.urandom(5 * MiB), os.urandom(2 * MiB)]
    upload_id, listed = spread(fleet, mbucket, key, bodies, [0, 2])
    fleet.kill(2)  # node 3 holds part 2, and only node 3
    try:
        with pytest.raises(ClientError) as info:
            fleet.nodes[0].client().complete_multipart_upload(Bucket=mbucket, Key=key, UploadId=upload_id,
                                                              MultipartUpload={"Parts": listed})
        assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
        assert info.value.response["Error"]["Code"] == "ServiceUnavailable"
        assert "node-3" in info.value.response["Error"]["Message"]
        assert rows(fleet, mbucket, key) == []  # nothing committed
        s3 = fleet.nodes[1].client()
        assert [u["UploadId"] for u in s3.list_multipart_uploads(Bucket=mbucket, Prefix=key)["Uploads"]] == [upload_id]
        assert len(s3.list_parts(Bucket=mbucket, Key=key, UploadId=upload_id)["Parts"]) == 2
    finally:
        fleet.start_node(2)
        fleet.wait_live(3)
    done = fleet.nodes[0].client().complete_multipart_upload(Bucket=mbucket, Key=key, UploadId=upload_id,
                                                             MultipartUpload={"Parts": listed})
    assert done["ETag"] == mp_etag(bodies)  # the node came back with its disk: the retry completes
    assert sha(fleet.nodes[2].client().get_object(Bucket=mbucket, Key=key)["Body"].read()) == sha(b"".join(bodies))


def test_a_part_whose_bytes_changed_on_its_holder_is_refused_by_the_completing_node(
        fleet: Fleet, mbucket: str) -> None:
    """The completing node checks each gathered part's MD5 and size against its row: a part
    damaged on its holder's disk is never committed into the object."""
    key = f"rot-{uuid.uuid4().hex[:8]}.bin"
    bodies = [os.urandom(5 * MiB), os.urandom(64 * 1024)]
    upload_id, listed = spread(fleet, mbucket, key, bodies, [0, 2])
    engine = create_engine(fleet.database_url)
    try:
        with engine.connect() as conn:
            blob = conn.execute(text("SELECT blob FROM multipart_parts WHERE upload_id = :u AND part_number = 2"),
                                {"u": upload_id}).scalar_one()
    finally:
        engine.dispose()
    path = fleet.nodes[2].data_dir / "blobs" / blob[:2] / blob
    damaged = bytearray(path.read_bytes())
    damaged[1000] ^= 0xFF  # same size, one bit pattern changed: only the MD5 tells
    path.write_bytes(bytes(damaged))
    with pytest.raises(ClientError) as info:
        fleet.nodes[0].client().complete_multipart_upload(Bucket=mbucket, Key=key, UploadId=upload_id,
                                                          MultipartUpload={"Parts": listed})
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    assert rows(fleet, mbucket, key) == []
    fleet.nodes[0].client().abort_multipart_upload(Bucket=mbucket, Key=key, UploadId=upload_id)
    wait_for(lambda: not path.exists(), 30, "node 3 dropping the aborted upload's part")

def test_a_part_holder_killed_before_complete_with_two_replicas_completes_from_the_replica(
        fleet: Fleet, mbucket: str, seaweed: Any) -> None:
    prefix = f"rep-{uuid.uuid4().hex[:8]}/"
    set_replicas(fleet, mbucket, prefix, 2)
    wait_replicating(fleet, mbucket, prefix, 3)
    key = f"{prefix}ckpt.bin"
    bodies = [os.urandom(5 * MiB), os.urandom(5 * MiB + 1), os.urandom(1234)]
    upload_id, listed = spread(fleet, mbucket, key, bodies, [0, 2, 1])
    replicas = part_replicas(fleet, upload_id)
    assert {n: took for n, (took, _) in replicas.items()} == {1: "node-1", 2: "node-3", 3: "node-2"}
    assert all(copy is not None and copy != took for took, copy in replicas.values())  # acked with a copy
    # Complete on the survivor that does not hold part 2's copy: it reads part 2 from the copy's node.
    completer = 0 if replicas[2][1] == "node-2" else 1
    fleet.kill(2)  # node 3, which took part 2
    try:
        done = fleet.nodes[completer].client().complete_multipart_upload(
            Bucket=mbucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": listed})
        assert done["ETag"] == mp_etag(bodies)
        whole = b"".join(bodies)
        for gw in fleet.nodes[:2]:
            assert sha(gw.client().get_object(Bucket=mbucket, Key=key)["Body"].read()) == sha(whole)
        [row] = rows(fleet, mbucket, key)
        # The object is acknowledged with its copy too; a copy is let go once the row is durable,
        # which the background destage may already have made it (CI, an idle machine).
        assert row["replicas"] == 1 or row["state"] == "durable", row
        assert fleet.nodes[completer].flush(bucket=mbucket, timeout=120)["durable"]
        remote = seaweed.client().get_object(Bucket=mbucket, Key=key)
        assert (remote["ETag"], sha(remote["Body"].read())) == (mp_etag(bodies), sha(whole))
    finally:
        fleet.start_node(2)
        fleet.wait_live(3)
