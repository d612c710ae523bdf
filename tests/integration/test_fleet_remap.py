"""A bucket remapped to another region on a 3-node fleet (issue 26, docs/fleet.md "Moving a
bucket"): once the admin call has answered, every node's next request and every destage go to
the new remote, even on a node idle past FERRY_REMOTE_REFRESH_SECONDS, and a destage in flight
at the remap ends on the new remote. Region A is the session's SeaweedFS (registered too, behind
a CountingProxy whose ``delay`` holds a destage's PutObject at the remote), region B another one.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.support.counting_proxy import CountingProxy
from tests.support.databases import throwaway_database
from tests.support.fleet import Fleet
from tests.support.gateway import admin_call as admin
from tests.support.seaweed import SeaweedServer

pytestmark = [pytest.mark.fleet, pytest.mark.timeout(300)]

REFRESH = 0.5  # FERRY_REMOTE_REFRESH_SECONDS
IDLE = 3 * REFRESH  # every node quiet longer than the interval: the case the issue saw


def keys(client: Any, bucket: str) -> list[str]:
    return sorted(o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", []))


@pytest.fixture(scope="module")
def region_b() -> Iterator[SeaweedServer]:
    with SeaweedServer() as server:
        yield server


@pytest.fixture(scope="module")
def proxy_a(seaweed: SeaweedServer) -> Iterator[CountingProxy]:
    with CountingProxy(seaweed) as p:
        yield p


@pytest.fixture(scope="module")
def fleet(seaweed: SeaweedServer, fleet_services: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    with throwaway_database(fleet_services.postgres_url, "ferry_remap") as url, \
            Fleet(seaweed, url, tmp_path_factory.mktemp("remap"),
                  env={"FERRY_REMOTE_REFRESH_SECONDS": str(REFRESH), "FERRY_DESTAGE_BACKOFF_CAP": "1",
                       "FERRY_DESTAGE_MAX_ATTEMPTS": "1000"}) as f:
        f.wait_live(3)
        yield f


@pytest.fixture(scope="module")
def remotes(fleet: Fleet, proxy_a: CountingProxy, region_b: SeaweedServer) -> dict[str, int]:
    """Region A (through its proxy) and region B, registered through node 1."""
    tag = uuid.uuid4().hex[:6]
    a = admin(fleet.nodes[0], "POST", "/admin/remotes", {"name": f"a-{tag}", "endpoint": proxy_a.endpoint,
                                                          "access_key": proxy_a.access_key,
                                                          "secret_key": proxy_a.secret_key})
    b = admin(fleet.nodes[0], "POST", "/admin/remotes", {"name": f"b-{tag}", "endpoint": region_b.endpoint,
                                                          "access_key": region_b.access_key,
                                                          "secret_key": region_b.secret_key})
    return {"a": a["id"], "b": b["id"]}


def remap(fleet: Fleet, bucket: str, remote_id: int, remote_bucket: str) -> None:
    admin(fleet.nodes[0], "PUT", f"/admin/bucket-mappings/{bucket}", {"remote_id": remote_id,
                                                                      "remote_bucket": remote_bucket})


def test_after_a_remap_the_first_requests_of_idle_nodes_go_to_the_new_remote(
        fleet: Fleet, remotes: dict[str, int], seaweed: SeaweedServer, region_b: SeaweedServer) -> None:
    tag = uuid.uuid4().hex[:8]
    existing, created = f"ex-{tag}", f"new-{tag}"
    region_b.client().create_bucket(Bucket=f"far-{existing}")
    for node in fleet.nodes:  # every node routed these buckets (to the default remote, A) before
        for bucket in (existing, created):
            with pytest.raises(ClientError):
                node.client().head_bucket(Bucket=bucket)
    time.sleep(IDLE)
    remap(fleet, existing, remotes["b"], f"far-{existing}")
    remap(fleet, created, remotes["b"], f"far-{created}")
    for node in fleet.nodes:  # at once, the first request of each node: HeadBucket finds B's bucket
        node.client().head_bucket(Bucket=existing)
    fleet.nodes[2].client().create_bucket(Bucket=created)
    assert f"far-{created}" in {b["Name"] for b in region_b.client().list_buckets()["Buckets"]}
    assert created not in {b["Name"] for b in seaweed.client().list_buckets()["Buckets"]}
    time.sleep(IDLE)
    remap(fleet, existing, remotes["b"], f"far-{existing}")  # the same mapping again: nothing moves
    for i, node in enumerate(fleet.nodes):
        node.client().put_object(Bucket=existing, Key=f"k{i}", Body=f"node {i}".encode())
        node.client().put_object(Bucket=created, Key=f"k{i}", Body=f"node {i}".encode())
        node.flush()
    assert keys(region_b.client(), f"far-{existing}") == ["k0", "k1", "k2"]
    assert keys(region_b.client(), f"far-{created}") == ["k0", "k1", "k2"]


def test_writes_acknowledged_after_a_move_are_destaged_to_the_new_remote_only(
        fleet: Fleet, remotes: dict[str, int], seaweed: SeaweedServer, region_b: SeaweedServer) -> None:
    tag = uuid.uuid4().hex[:8]
    bucket, near, far = f"mv-{tag}", f"near-{tag}", f"far-{tag}"
    seaweed.client().create_bucket(Bucket=near)
    region_b.client().create_bucket(Bucket=far)
    remap(fleet, bucket, remotes["a"], near)
    for i, node in enumerate(fleet.nodes):
        node.client().put_object(Bucket=bucket, Key=f"before{i}", Body=b"on A")
        node.flush()
    time.sleep(IDLE)
    remap(fleet, bucket, remotes["b"], far)
    for i, node in enumerate(fleet.nodes):  # acknowledged after the move, on an idle node each
        node.client().put_object(Bucket=bucket, Key=f"after{i}", Body=f"on B {i}".encode())
    for node in fleet.nodes:
        node.flush()
    assert keys(region_b.client(), far) == ["after0", "after1", "after2"]
    assert keys(seaweed.client(), near) == ["before0", "before1", "before2"], "a write went to the old region"
    for i, node in enumerate(fleet.nodes):
        got = node.client().get_object(Bucket=bucket, Key=f"after{(i + 1) % 3}")["Body"].read()
        assert got == f"on B {(i + 1) % 3}".encode()


def test_a_remap_racing_a_destage_in_flight_ends_with_the_object_on_the_new_remote(
        fleet: Fleet, remotes: dict[str, int], seaweed: SeaweedServer, region_b: SeaweedServer,
        proxy_a: CountingProxy) -> None:
    tag = uuid.uuid4().hex[:8]
    bucket, near, far = f"race-{tag}", f"near-{tag}", f"far-{tag}"
    seaweed.client().create_bucket(Bucket=near)
    region_b.client().create_bucket(Bucket=far)
    remap(fleet, bucket, remotes["a"], near)
    proxy_a.reset()
    proxy_a.delay = 3.0  # a long-haul link: the destage's PutObject is at A for 3 s
    try:
        fleet.nodes[1].client().put_object(Bucket=bucket, Key="k", Body=b"acknowledged before the move")
        deadline = time.monotonic() + 30
        while not any(a.startswith(f"PUT /{near}/k") for a in proxy_a.arrived):
            assert time.monotonic() < deadline, "the destage never reached region A"
            time.sleep(0.05)
        remap(fleet, bucket, remotes["b"], far)  # while that PutObject is in flight
    finally:
        proxy_a.delay = 0.0
    fleet.nodes[1].flush()
    assert region_b.client().get_object(Bucket=far, Key="k")["Body"].read() == b"acknowledged before the move"
    for node in fleet.nodes:
        assert node.client().get_object(Bucket=bucket, Key="k")["Body"].read() == b"acknowledged before the move"
