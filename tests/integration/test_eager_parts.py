"""Multipart parts are copied to a remote upload as they arrive; the destage only completes it.

Counted through tests/support/counting_proxy.py against a real SeaweedFS.
"""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.counting_proxy import CountingProxy
from tests.support.gateway import GatewayProcess

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def egw(proxy: CountingProxy, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(proxy, tmp_path_factory.mktemp("eager-gw")) as gw:
        yield gw


@pytest.fixture(scope="module")
def ebucket(seaweed: Any, egw: GatewayProcess) -> str:
    name = f"ep-{uuid.uuid4().hex[:12]}"
    egw.client().create_bucket(Bucket=name)
    return name


@pytest.fixture(autouse=True)
def _healthy(proxy: CountingProxy) -> Iterator[None]:
    proxy.fail_with = None
    proxy.reset()
    yield
    proxy.fail_with = None


def part_puts(proxy: CountingProxy, key: str) -> list[Any]:
    return [r for r in proxy.requests("PUT", key) if "partNumber=" in r.query]


def wait_for(predicate: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def multipart_etag(parts: list[bytes]) -> str:
    return hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest() + f"-{len(parts)}"


def test_parts_reach_the_remote_before_complete(egw: GatewayProcess, proxy: CountingProxy, ebucket: str,
                                                seaweed: Any) -> None:
    client = egw.client()
    parts = [os.urandom(5 * MiB), os.urandom(5 * MiB), os.urandom(MiB)]
    upload = client.create_multipart_upload(Bucket=ebucket, Key="ckpt/model.bin")["UploadId"]
    done = [client.upload_part(Bucket=ebucket, Key="ckpt/model.bin", UploadId=upload, PartNumber=n,
                               Body=body)["ETag"] for n, body in enumerate(parts, start=1)]
    wait_for(lambda: len(part_puts(proxy, "ckpt/model.bin")) == 3)
    client.complete_multipart_upload(Bucket=ebucket, Key="ckpt/model.bin", UploadId=upload, MultipartUpload={
        "Parts": [{"PartNumber": n, "ETag": etag} for n, etag in enumerate(done, start=1)]})
    assert egw.flush()["durable"]
    assert len(part_puts(proxy, "ckpt/model.bin")) == 3, "the destage sent a part again"
    remote = seaweed.client()
    got = remote.get_object(Bucket=ebucket, Key="ckpt/model.bin")
    assert got["Body"].read() == b"".join(parts)
    assert got["ETag"].strip('"') == multipart_etag(parts)
    assert remote.list_multipart_uploads(Bucket=ebucket).get("Uploads", []) == []
    client.close()


def test_a_replaced_part_is_corrected_before_complete(egw: GatewayProcess, proxy: CountingProxy, ebucket: str,
                                                      seaweed: Any) -> None:
    client = egw.client()
    first, old, new = os.urandom(5 * MiB), os.urandom(2 * MiB), os.urandom(3 * MiB)
    upload = client.create_multipart_upload(Bucket=ebucket, Key="ckpt/replaced")["UploadId"]
    e1 = client.upload_part(Bucket=ebucket, Key="ckpt/replaced", UploadId=upload, PartNumber=1, Body=first)["ETag"]
    client.upload_part(Bucket=ebucket, Key="ckpt/replaced", UploadId=upload, PartNumber=2, Body=old)
    e2 = client.upload_part(Bucket=ebucket, Key="ckpt/replaced", UploadId=upload, PartNumber=2, Body=new)["ETag"]
    client.complete_multipart_upload(Bucket=ebucket, Key="ckpt/replaced", UploadId=upload, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]})
    assert egw.flush()["durable"]
    assert seaweed.client().get_object(Bucket=ebucket, Key="ckpt/replaced")["Body"].read() == first + new
    client.close()


def test_parts_written_during_an_outage_are_sent_by_the_destage(egw: GatewayProcess, proxy: CountingProxy,
                                                                ebucket: str, seaweed: Any) -> None:
    client = egw.client()
    client.put_object(Bucket=ebucket, Key="ckpt/known", Body=b"the gateway knows the bucket")
    parts = [os.urandom(5 * MiB), os.urandom(MiB)]
    upload = client.create_multipart_upload(Bucket=ebucket, Key="ckpt/outage")["UploadId"]
    proxy.fail_with = 503
    done = [client.upload_part(Bucket=ebucket, Key="ckpt/outage", UploadId=upload, PartNumber=n,
                               Body=body)["ETag"] for n, body in enumerate(parts, start=1)]
    client.complete_multipart_upload(Bucket=ebucket, Key="ckpt/outage", UploadId=upload, MultipartUpload={
        "Parts": [{"PartNumber": n, "ETag": etag} for n, etag in enumerate(done, start=1)]})
    assert client.get_object(Bucket=ebucket, Key="ckpt/outage")["Body"].read() == b"".join(parts)
    proxy.fail_with = None
    assert egw.flush()["durable"]
    got = seaweed.client().get_object(Bucket=ebucket, Key="ckpt/outage")
    assert got["Body"].read() == b"".join(parts)
    assert got["ETag"].strip('"') == multipart_etag(parts)
    client.close()


def test_abort_aborts_the_remote_upload(egw: GatewayProcess, proxy: CountingProxy, ebucket: str,
                                        seaweed: Any) -> None:
    client = egw.client()
    upload = client.create_multipart_upload(Bucket=ebucket, Key="ckpt/aborted")["UploadId"]
    client.upload_part(Bucket=ebucket, Key="ckpt/aborted", UploadId=upload, PartNumber=1, Body=os.urandom(MiB))
    wait_for(lambda: len(part_puts(proxy, "ckpt/aborted")) == 1)
    client.abort_multipart_upload(Bucket=ebucket, Key="ckpt/aborted", UploadId=upload)
    uploads = seaweed.client().list_multipart_uploads(Bucket=ebucket).get("Uploads", [])
    assert [u for u in uploads if u["Key"] == "ckpt/aborted"] == []
    client.close()


def creates(proxy: CountingProxy, key: str) -> list[Any]:
    proxy.idle()
    return [r for r in list(proxy.seen) if r.method == "POST" and r.key == key and r.query == "uploads"]


def remote_uploads_of(seaweed: Any, bucket: str, key: str) -> list[Any]:
    uploads = seaweed.client().list_multipart_uploads(Bucket=bucket).get("Uploads", [])
    return [u for u in uploads if u["Key"] == key]


def test_copies_of_one_upload_open_one_remote_upload(egw: GatewayProcess, proxy: CountingProxy, ebucket: str,
                                                    seaweed: Any) -> None:
    """Issue 15: with a slow CreateMultipartUpload (here: every remote request held 0.4 s), the
    copies of the later parts found no remote upload recorded yet and each opened one; the
    Complete, reading none either, left the destage to open yet another. One is opened now (the
    opener is recorded first), its id reaches the destage, and no two writes of the key meet."""
    client = egw.client()
    key = "ckpt/raced"
    parts = [os.urandom(5 * MiB), os.urandom(5 * MiB), os.urandom(MiB)]
    proxy.max_concurrent_writes = 0
    proxy.overlaps.clear()
    proxy.delay = 0.4
    try:
        upload = client.create_multipart_upload(Bucket=ebucket, Key=key)["UploadId"]
        done = [client.upload_part(Bucket=ebucket, Key=key, UploadId=upload, PartNumber=n, Body=body)["ETag"]
                for n, body in enumerate(parts, start=1)]
        client.complete_multipart_upload(Bucket=ebucket, Key=key, UploadId=upload, MultipartUpload={
            "Parts": [{"PartNumber": n, "ETag": etag} for n, etag in enumerate(done, start=1)]})
        assert egw.flush()["durable"]
    finally:
        proxy.delay = 0.0
    assert len(creates(proxy, key)) == 1, f"remote uploads opened: {creates(proxy, key)}"
    assert proxy.max_concurrent_writes == 1, proxy.overlaps
    assert len(part_puts(proxy, key)) == 3, "a part was sent twice"
    got = seaweed.client().get_object(Bucket=ebucket, Key=key)
    assert got["Body"].read() == b"".join(parts)
    assert remote_uploads_of(seaweed, ebucket, key) == []
    client.close()


def test_an_abort_while_the_remote_upload_is_being_opened_leaks_nothing(
        egw: GatewayProcess, proxy: CountingProxy, ebucket: str, seaweed: Any) -> None:
    """The client aborts while the first copy's CreateMultipartUpload is on its way: the Abort
    waits for the opener's record and aborts that remote upload, so none is left when it answers."""
    client = egw.client()
    key = "ckpt/aborted-while-opening"
    proxy.delay = 0.4
    try:
        upload = client.create_multipart_upload(Bucket=ebucket, Key=key)["UploadId"]
        client.upload_part(Bucket=ebucket, Key=key, UploadId=upload, PartNumber=1, Body=os.urandom(MiB))
        wait_for(lambda: f"POST /{ebucket}/{key}?uploads" in proxy.arrived)  # held 0.4 s by the proxy
        client.abort_multipart_upload(Bucket=ebucket, Key=key, UploadId=upload)
        # Once the remote has opened it, it is already aborted (not 0.4 s later by its opener).
        wait_for(lambda: any(r.method == "POST" and r.key == key and r.query == "uploads" for r in list(proxy.seen)))
        assert remote_uploads_of(seaweed, ebucket, key) == []
    finally:
        proxy.delay = 0.0
    assert len(creates(proxy, key)) == 1
    client.close()


def test_an_abort_while_a_part_is_on_its_way_leaks_nothing(
        egw: GatewayProcess, proxy: CountingProxy, ebucket: str, seaweed: Any) -> None:
    """The client aborts while a part's copy is still on its way to the remote (held 1 s by the
    proxy): a part that lands after the remote's abort re-creates the upload on SeaweedFS (S3
    allows the same: "it might be necessary to abort a given multipart upload multiple times"),
    so the Abort waits for the copies in flight and aborts again; none is left when it answers."""
    client = egw.client()
    key = "ckpt/aborted-mid-part"
    upload = client.create_multipart_upload(Bucket=ebucket, Key=key)["UploadId"]
    client.upload_part(Bucket=ebucket, Key=key, UploadId=upload, PartNumber=1, Body=os.urandom(MiB))
    wait_for(lambda: remote_uploads_of(seaweed, ebucket, key) != [])  # the copy opened it
    proxy.part_delay = 1.0
    try:
        client.upload_part(Bucket=ebucket, Key=key, UploadId=upload, PartNumber=2, Body=os.urandom(MiB))
        wait_for(lambda: any("partNumber=2" in r for r in proxy.arrived if key in r))  # held by the proxy
        client.abort_multipart_upload(Bucket=ebucket, Key=key, UploadId=upload)
        assert remote_uploads_of(seaweed, ebucket, key) == []
        time.sleep(1.5)  # the held part has landed (or been refused) by now
        assert remote_uploads_of(seaweed, ebucket, key) == []
    finally:
        proxy.part_delay = 0.0
    client.close()
