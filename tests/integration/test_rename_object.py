"""RenameObject (issue 30's rename): within a bucket, one journal commit, through a real
``ferry serve`` in front of SeaweedFS. Readers racing a rename see the old name or the new one
with the whole bytes, never neither; the remote gets the new object before the old one's delete;
a retried rename whose answer was lost still succeeds; write-through refuses it. The source
(``x-amz-rename-source``) is ``/bucket/key`` or a key of the target's bucket."""

from __future__ import annotations

import hashlib
import os
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.support.gateway import GatewayProcess, remote_client
from tests.support.seaweed import SeaweedServer

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def gw(seaweed: SeaweedServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(seaweed, tmp_path_factory.mktemp("rename")) as g:
        yield g


@pytest.fixture
def bucket(gw: GatewayProcess) -> str:
    name = f"rn-{uuid.uuid4().hex[:12]}"
    gw.client().create_bucket(Bucket=name)
    return name


def _error(exc: ClientError) -> str:
    return str(exc.response["Error"]["Code"])


def test_a_buffered_object_is_renamed_and_destaged_as_the_new_name(gw: GatewayProcess, seaweed: SeaweedServer,
                                                                    bucket: str) -> None:
    s3 = gw.client()
    body = os.urandom(3 * MiB + 17)
    s3.put_object(Bucket=bucket, Key="ckpt/tmp-1", Body=body, ContentType="application/x-ckpt",
                  Metadata={"step": "7"})
    s3.rename_object(Bucket=bucket, Key="ckpt/latest", RenameSource=f"/{bucket}/ckpt/tmp-1")
    got = s3.get_object(Bucket=bucket, Key="ckpt/latest")
    assert got["Body"].read() == body
    assert got["ContentType"] == "application/x-ckpt" and got["Metadata"] == {"step": "7"}
    with pytest.raises(ClientError) as gone:
        s3.head_object(Bucket=bucket, Key="ckpt/tmp-1")
    assert gone.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert keys == ["ckpt/latest"]
    gw.flush(bucket)
    remote = remote_client(seaweed)
    assert remote.get_object(Bucket=bucket, Key="ckpt/latest")["Body"].read() == body
    assert [o["Key"] for o in remote.list_objects_v2(Bucket=bucket).get("Contents", [])] == ["ckpt/latest"]


def test_a_clean_object_only_on_the_remote_is_renamed(gw: GatewayProcess, seaweed: SeaweedServer,
                                                      bucket: str) -> None:
    remote = remote_client(seaweed)
    remote.put_object(Bucket=bucket, Key="old", Body=b"clean bytes")
    s3 = gw.client()
    s3.rename_object(Bucket=bucket, Key="new", RenameSource="old")  # a bare key: the same bucket
    assert s3.get_object(Bucket=bucket, Key="new")["Body"].read() == b"clean bytes"
    gw.flush(bucket)
    assert [o["Key"] for o in remote.list_objects_v2(Bucket=bucket).get("Contents", [])] == ["new"]


def test_a_rename_retried_after_its_answer_was_lost_succeeds(gw: GatewayProcess, bucket: str) -> None:
    s3 = gw.client()
    s3.put_object(Bucket=bucket, Key="a", Body=b"x")
    s3.rename_object(Bucket=bucket, Key="b", RenameSource="a")
    s3.rename_object(Bucket=bucket, Key="b", RenameSource="a")  # the SDK's retry: the same success
    with pytest.raises(ClientError) as missing:
        s3.rename_object(Bucket=bucket, Key="c", RenameSource="a")  # another target: the source is gone
    assert _error(missing.value) == "NoSuchKey"
    assert s3.get_object(Bucket=bucket, Key="b")["Body"].read() == b"x"


def test_rename_conditions_and_refusals(gw: GatewayProcess, bucket: str) -> None:
    s3 = gw.client()
    s3.put_object(Bucket=bucket, Key="src", Body=b"one")
    s3.put_object(Bucket=bucket, Key="dst", Body=b"two")
    with pytest.raises(ClientError) as taken:
        s3.rename_object(Bucket=bucket, Key="dst", RenameSource="src", DestinationIfNoneMatch="*")
    assert _error(taken.value) == "PreconditionFailed"
    with pytest.raises(ClientError) as stale:
        s3.rename_object(Bucket=bucket, Key="dst", RenameSource="src", SourceIfMatch='"0123"')
    assert _error(stale.value) == "PreconditionFailed"
    with pytest.raises(ClientError) as other:  # a source is always in the target's bucket
        s3.rename_object(Bucket=bucket, Key="dst", RenameSource="/another-bucket/src")
    assert _error(other.value) == "NoSuchKey"
    with pytest.raises(ClientError) as nothing:
        s3.rename_object(Bucket=bucket, Key="dst", RenameSource="absent")
    assert _error(nothing.value) == "NoSuchKey"
    s3.rename_object(Bucket=bucket, Key="dst", RenameSource="src")  # over an existing object
    assert s3.get_object(Bucket=bucket, Key="dst")["Body"].read() == b"one"


def test_readers_racing_renames_see_one_name_whole(gw: GatewayProcess, bucket: str) -> None:
    """The checkpoint pattern, 12 times: write a temp name, rename it over ``latest``; readers of
    ``latest`` in threads never miss it after the first rename, never read a partial body."""
    s3 = gw.client()
    bodies = {}
    first = os.urandom(MiB)
    s3.put_object(Bucket=bucket, Key="latest", Body=first)
    bodies[hashlib.md5(first).hexdigest()] = len(first)
    stop = threading.Event()
    seen: list[str] = []
    problems: list[Any] = []

    def reader() -> None:
        client = gw.client()
        while not stop.is_set():
            try:
                data = client.get_object(Bucket=bucket, Key="latest")["Body"].read()
            except ClientError as exc:
                problems.append(_error(exc))
                continue
            digest = hashlib.md5(data).hexdigest()
            seen.append(digest)
            if digest not in bodies:
                time.sleep(0.05)  # a body put just before its rename may not be in ``bodies`` yet
                if digest not in bodies:
                    problems.append(f"unknown body of {len(data)} bytes")

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for step in range(12):
            body = os.urandom(MiB + step)
            bodies[hashlib.md5(body).hexdigest()] = len(body)
            s3.put_object(Bucket=bucket, Key=f"tmp-{step}", Body=body)
            s3.rename_object(Bucket=bucket, Key="latest", RenameSource=f"tmp-{step}")
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert problems == []
    assert len(set(seen)) > 1
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert keys == ["latest"]


def test_write_through_refuses_a_rename(seaweed: SeaweedServer, tmp_path_factory: pytest.TempPathFactory) -> None:
    with GatewayProcess(seaweed, tmp_path_factory.mktemp("rename-wt"),
                        env={"FERRY_DEFAULT_MODE": "write-through"}) as g:
        s3 = g.client()
        name = f"rn-{uuid.uuid4().hex[:12]}"
        s3.create_bucket(Bucket=name)
        s3.put_object(Bucket=name, Key="a", Body=b"x")
        with pytest.raises(ClientError) as refused:
            s3.rename_object(Bucket=name, Key="b", RenameSource="a")
        assert _error(refused.value) == "NotImplemented"
        assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 501
