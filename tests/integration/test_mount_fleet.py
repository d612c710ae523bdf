"""``ferry mount`` on one fleet node sees what the other nodes do (issue 30): a file written on
another node (still buffered there: the remote is out) reads whole through this node's mount, a
cached object of another node reads through it, a file written or renamed through the mount reads
on the other node at once, and changes made on the other node show within the mount's cache time.
Two real
``ferry serve`` nodes sharing one PostgreSQL catalog, SeaweedFS behind a counting proxy."""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.support.counting_proxy import CountingProxy
from tests.support.databases import throwaway_database
from tests.support.fleet import Fleet
from tests.support.mount import MountProcess, require_fuse

pytestmark = pytest.mark.fleet

MiB = 1024 * 1024


@pytest.fixture(scope="module", autouse=True)
def _fuse() -> None:
    require_fuse()


@pytest.fixture(scope="module")
def fleet(proxy: CountingProxy, fleet_services: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    with throwaway_database(fleet_services.postgres_url, "ferry_mount_fleet") as url, \
            Fleet(proxy, url, tmp_path_factory.mktemp("mount-fleet"), size=2,
                  env={"FERRY_CACHE_PREFETCH": "off"}) as f:
        f.wait_live(2)
        yield f


@pytest.fixture(scope="module")
def mnt(fleet: Fleet) -> Iterator[MountProcess]:
    """The mount is a client of node 2; the objects below are written on node 1."""
    with MountProcess(fleet.nodes[1]) as m:
        yield m


@pytest.fixture
def bucket(fleet: Fleet) -> str:
    name = f"mntf-{uuid.uuid4().hex[:10]}"
    fleet.nodes[0].client().create_bucket(Bucket=name)
    return name


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _eventually(check: Any, timeout: float = 5.0) -> Any:
    """The mount's entry and attribute cache holds a name up to 1 s (docs/posix.md)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return check()
        except (AssertionError, FileNotFoundError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_a_file_buffered_on_another_node_reads_whole_through_the_mount(fleet: Fleet, mnt: MountProcess,
                                                                       bucket: str, proxy: CountingProxy) -> None:
    data = os.urandom(6 * MiB + 123)
    assert bucket in os.listdir(mnt.path)  # seen before the outage (ListBuckets is the remote's)
    proxy.fail_with = 503  # the remote is out: node 1 buffers the write, nothing reaches the remote
    try:
        fleet.nodes[0].client().put_object(Bucket=bucket, Key="step-1.pt", Body=data)
        path = mnt.path / bucket / "step-1.pt"  # a HEAD and GETs of node 2 (a listing would wait for the remote)

        def whole() -> bytes:
            assert os.stat(path).st_size == len(data)
            return path.read_bytes()

        assert _sha(_eventually(whole)) == _sha(data)
    finally:
        proxy.fail_with = None
    assert "step-1.pt" in os.listdir(mnt.path / bucket)


def test_an_object_cached_on_another_node_reads_through_the_mount(fleet: Fleet, mnt: MountProcess, bucket: str,
                                                                  seaweed: Any) -> None:
    data = os.urandom(3 * MiB)
    seaweed.client().put_object(Bucket=bucket, Key="data/shard-0", Body=data)
    assert _sha(fleet.nodes[0].client().get_object(Bucket=bucket, Key="data/shard-0")["Body"].read()) == _sha(data)
    assert _sha((mnt.path / bucket / "data" / "shard-0").read_bytes()) == _sha(data)


def test_a_file_written_through_the_mount_reads_on_the_other_node_at_close(fleet: Fleet, mnt: MountProcess,
                                                                           bucket: str) -> None:
    data = os.urandom(2 * MiB + 7)
    path = mnt.path / bucket / "out.bin"
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    got = fleet.nodes[0].client().get_object(Bucket=bucket, Key="out.bin")["Body"].read()
    assert _sha(got) == _sha(data)


def test_a_rename_through_the_mount_is_seen_on_the_other_node(fleet: Fleet, mnt: MountProcess, bucket: str) -> None:
    data = os.urandom(MiB)
    tmp, final = mnt.path / bucket / "model.tmp", mnt.path / bucket / "model.pt"
    with open(tmp, "wb") as f:
        f.write(data)
        os.fsync(f.fileno())
    os.replace(tmp, final)
    s3 = fleet.nodes[0].client()
    assert _sha(s3.get_object(Bucket=bucket, Key="model.pt")["Body"].read()) == _sha(data)
    with pytest.raises(ClientError) as err:
        s3.head_object(Bucket=bucket, Key="model.tmp")
    assert err.value.response["Error"]["Code"] in ("404", "NoSuchKey")


def test_a_change_on_the_other_node_shows_in_the_mount(fleet: Fleet, mnt: MountProcess, bucket: str) -> None:
    s3 = fleet.nodes[0].client()
    s3.put_object(Bucket=bucket, Key="notes.txt", Body=b"first")
    path: Path = mnt.path / bucket / "notes.txt"
    _eventually(lambda: _check(path.read_bytes() == b"first"))
    s3.put_object(Bucket=bucket, Key="notes.txt", Body=b"second, longer")
    _eventually(lambda: _check(path.read_bytes() == b"second, longer"))
    s3.delete_object(Bucket=bucket, Key="notes.txt")
    _eventually(lambda: _check(not path.exists()))


def _check(ok: bool) -> None:
    assert ok
