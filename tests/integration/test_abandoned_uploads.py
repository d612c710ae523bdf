"""Abandoned multipart uploads (issue 14): DeleteBucket of a bucket whose only contents are
uploads in progress deletes it and them; expiry and the sweep of leaked remote uploads abort
the remote multipart uploads that eager part copies started. The remote's own
ListMultipartUploads on SeaweedFS is the proof."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.support.gateway import GatewayProcess
from tests.support.seaweed import SeaweedServer

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def remote() -> Iterator[SeaweedServer]:
    with SeaweedServer() as server:  # the sweep looks at every bucket: not the session's server
        yield server


@pytest.fixture(scope="module")
def gw(remote: SeaweedServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(remote, tmp_path_factory.mktemp("abandoned")) as g:
        yield g


def new_bucket(gw: GatewayProcess) -> str:
    name = f"ab-{uuid.uuid4().hex[:12]}"
    gw.client().create_bucket(Bucket=name)
    return name


def remote_uploads(remote: SeaweedServer, bucket: str) -> list[str]:
    return [u["UploadId"] for u in remote.client().list_multipart_uploads(Bucket=bucket).get("Uploads", [])]


def until(check: Callable[[], bool], timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def started(gw: GatewayProcess, remote: SeaweedServer, bucket: str, key: str) -> str:
    """An upload with one part, whose eager copy has created its remote upload."""
    s3 = gw.client()
    upload = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    s3.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=1, Body=b"p" * (5 * MiB))
    until(lambda: len(remote_uploads(remote, bucket)) >= 1, what="the eager copy's remote upload")
    return upload


def code(call: Callable[[], Any]) -> str:
    try:
        call()
    except ClientError as exc:
        return str(exc.response["Error"]["Code"])
    raise AssertionError("the request succeeded")


def test_delete_bucket_with_only_uploads_deletes_them(gw: GatewayProcess, remote: SeaweedServer) -> None:
    bucket = new_bucket(gw)
    s3 = gw.client()
    started(gw, remote, bucket, "a")
    s3.create_multipart_upload(Bucket=bucket, Key="b")  # no part: nothing on the remote yet
    s3.delete_bucket(Bucket=bucket)
    assert code(lambda: remote.client().head_bucket(Bucket=bucket)) in ("404", "NoSuchBucket")
    assert code(lambda: s3.list_multipart_uploads(Bucket=bucket)) == "NoSuchBucket"
    # A bucket of the same name starts empty: no upload of the old one comes back.
    s3.create_bucket(Bucket=bucket)
    assert s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []
    assert remote_uploads(remote, bucket) == []
    s3.delete_bucket(Bucket=bucket)


def test_delete_bucket_with_an_object_keeps_its_uploads(gw: GatewayProcess, remote: SeaweedServer) -> None:
    bucket = new_bucket(gw)
    s3 = gw.client()
    upload = started(gw, remote, bucket, "a")
    s3.put_object(Bucket=bucket, Key="object", Body=b"x")
    gw.flush(bucket)
    assert code(lambda: s3.delete_bucket(Bucket=bucket)) == "BucketNotEmpty"
    assert [u["UploadId"] for u in s3.list_multipart_uploads(Bucket=bucket)["Uploads"]] == [upload]
    assert len(remote_uploads(remote, bucket)) == 1


def test_abort_aborts_the_remote_upload(gw: GatewayProcess, remote: SeaweedServer) -> None:
    bucket = new_bucket(gw)
    upload = started(gw, remote, bucket, "a")
    gw.client().abort_multipart_upload(Bucket=bucket, Key="a", UploadId=upload)
    assert remote_uploads(remote, bucket) == []


def test_expired_upload_aborts_the_remote_upload(remote: SeaweedServer, tmp_path: Any) -> None:
    with GatewayProcess(remote, tmp_path / "expiry", env={"FERRY_MULTIPART_EXPIRY": "3"}) as g:
        bucket = new_bucket(g)
        started(g, remote, bucket, "forgotten")
        until(lambda: remote_uploads(remote, bucket) == [], what="the expiry to abort the remote upload")
        assert g.client().list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_sweep_aborts_remote_uploads_nothing_owns(remote: SeaweedServer, tmp_path: Any) -> None:
    env = {"FERRY_REMOTE_UPLOAD_SWEEP_INTERVAL": "1", "FERRY_REMOTE_UPLOAD_GRACE": "6"}
    with GatewayProcess(remote, tmp_path / "sweeper", env=env) as g:
        bucket = new_bucket(g)
        upload = started(g, remote, bucket, "owned")  # in progress through Ferry: its remote upload is owned
        [owned] = remote_uploads(remote, bucket)
        orphan = remote.client().create_multipart_upload(Bucket=bucket, Key="orphan")["UploadId"]  # id lost
        time.sleep(3)  # younger than the grace: left alone
        assert set(remote_uploads(remote, bucket)) == {owned, orphan}
        until(lambda: orphan not in remote_uploads(remote, bucket), what="the sweep to abort the orphan")
        time.sleep(2.5)  # more sweeps, all past the grace: the owned one stays
        assert remote_uploads(remote, bucket) == [owned]
        s3 = g.client()
        s3.upload_part(Bucket=bucket, Key="owned", UploadId=upload, PartNumber=2, Body=b"end")
        parts = [{"PartNumber": p["PartNumber"], "ETag": p["ETag"]}
                 for p in s3.list_parts(Bucket=bucket, Key="owned", UploadId=upload)["Parts"]]
        s3.complete_multipart_upload(Bucket=bucket, Key="owned", UploadId=upload, MultipartUpload={"Parts": parts})
        g.flush(bucket)
        assert remote.client().head_object(Bucket=bucket, Key="owned")["ContentLength"] == 5 * MiB + 3
        assert remote_uploads(remote, bucket) == []
