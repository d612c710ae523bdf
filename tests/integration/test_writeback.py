"""Write-back behaviour: acknowledged locally, readable and listable at once, destaged later.

The remote here is a dedicated SeaweedFS that the tests pause (SIGSTOP) to hold writes in the
buffer, so "served locally" is proven rather than assumed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.support.gateway import ADMIN_TOKEN, GatewayProcess
from tests.support.seaweed import SeaweedServer

FERRY = str(Path(sys.executable).with_name("ferry"))


@pytest.fixture(scope="module")
def remote() -> Iterator[SeaweedServer]:
    with SeaweedServer() as server:
        yield server


@pytest.fixture(scope="module")
def gw(remote: SeaweedServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    # A failed destage waits 10-20 s before its retry: long enough to list while rows are held.
    env = {"FERRY_DESTAGE_BACKOFF_BASE": "20", "FERRY_DESTAGE_BACKOFF_CAP": "20", "FERRY_REMOTE_READ_TIMEOUT": "2",
           "FERRY_REMOTE_CONNECT_TIMEOUT": "2", "FERRY_REMOTE_CIRCUIT_COOLDOWN": "1"}
    with GatewayProcess(remote, tmp_path_factory.mktemp("wb"), env=env) as g:
        g.client().create_bucket(Bucket="wbuf")
        yield g


@contextlib.contextmanager
def held(gw: GatewayProcess, remote: SeaweedServer, prefix: str) -> Iterator[None]:
    """Writes inside are acknowledged with the remote down; on exit the remote is back (the
    gateway's circuit breaker has closed again) but the rows are still buffered (their first
    destage failed and waits for its retry)."""
    remote.pause()
    try:
        yield
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            states = _states(gw, "wbuf", prefix)
            if all(s["state"] == "buffered" and s["attempts"] >= 1 for s in states
                   if s["state"] not in ("durable", "superseded")):
                break
            time.sleep(0.2)
    finally:
        remote.resume()
    _until_remote_answers(gw)


def _until_remote_answers(gw: GatewayProcess, timeout: float = 30.0) -> None:
    """The circuit opened while the remote was paused: it lets a probe through after its
    cooldown, and answers 503 until then."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            gw.client().head_bucket(Bucket="wbuf")
            return
        except ClientError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _states(gw: GatewayProcess, bucket: str, prefix: str = "") -> list[dict[str, Any]]:
    req = urllib.request.Request(f"{gw.endpoint}/admin/objects?bucket={bucket}&prefix={prefix}",
                                 headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return list(json.loads(r.read())["versions"])


def _clear(gw: GatewayProcess, remote: SeaweedServer, prefix: str) -> None:
    s3 = gw.client()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket="wbuf", Prefix=prefix):
        for obj in page.get("Contents", []):
            s3.delete_object(Bucket="wbuf", Key=obj["Key"])
    gw.flush("wbuf", prefix)


def test_read_your_writes_while_the_remote_is_unreachable(gw: GatewayProcess, remote: SeaweedServer) -> None:
    s3 = gw.client()
    body = os.urandom(300_000)
    remote.pause()
    try:
        put = s3.put_object(Bucket="wbuf", Key="ryw/a.bin", Body=body, ContentType="application/x-test",
                            Metadata={"step": "42"}, CacheControl="no-cache")
        assert put["ETag"] == f'"{hashlib.md5(body).hexdigest()}"'
        got = s3.get_object(Bucket="wbuf", Key="ryw/a.bin")
        assert got["Body"].read() == body
        assert got["ETag"] == put["ETag"]
        assert got["ContentType"] == "application/x-test"
        assert got["Metadata"] == {"step": "42"}
        assert got["CacheControl"] == "no-cache"
        part = s3.get_object(Bucket="wbuf", Key="ryw/a.bin", Range="bytes=1000-1999")
        assert part["Body"].read() == body[1000:2000]
        assert part["ContentRange"] == f"bytes 1000-1999/{len(body)}"
        head = s3.head_object(Bucket="wbuf", Key="ryw/a.bin")
        assert head["ContentLength"] == len(body)
        assert [s["state"] for s in _states(gw, "wbuf", "ryw/")] in (["buffered"], ["destaging"])
    finally:
        remote.resume()
    result = gw.flush("wbuf", "ryw/")
    assert result["durable"]
    direct = remote.client().get_object(Bucket="wbuf", Key="ryw/a.bin")
    assert direct["Body"].read() == body
    assert direct["ETag"] == put["ETag"]
    assert direct["Metadata"] == {"step": "42"}
    assert [s["state"] for s in _states(gw, "wbuf", "ryw/")] == ["durable"]
    # Durable: now served from the remote, same answer.
    assert s3.get_object(Bucket="wbuf", Key="ryw/a.bin")["Body"].read() == body
    _clear(gw, remote, "ryw/")


def test_delete_is_visible_at_once_and_reaches_the_remote(gw: GatewayProcess, remote: SeaweedServer) -> None:
    s3 = gw.client()
    s3.put_object(Bucket="wbuf", Key="del/x", Body=b"x")
    gw.flush("wbuf", "del/")
    with held(gw, remote, "del/"):
        s3.delete_object(Bucket="wbuf", Key="del/x")
        with pytest.raises(s3.exceptions.NoSuchKey):
            s3.get_object(Bucket="wbuf", Key="del/x")
    assert s3.list_objects_v2(Bucket="wbuf", Prefix="del/")["KeyCount"] == 0
    gw.flush("wbuf", "del/")
    assert remote.client().list_objects_v2(Bucket="wbuf", Prefix="del/")["KeyCount"] == 0


def test_listing_merges_buffered_writes_and_hides_pending_deletes(gw: GatewayProcess,
                                                                  remote: SeaweedServer) -> None:
    s3 = gw.client()
    remote_keys = [f"ls/r{i:02d}" for i in range(10)] + ["ls/dir/r1", "ls/dir/r2"]
    for key in remote_keys:
        s3.put_object(Bucket="wbuf", Key=key, Body=key.encode())
    gw.flush("wbuf", "ls/")
    with held(gw, remote, "ls/"):
        local_new = ["ls/a0", "ls/r03x", "ls/z9", "ls/dir2/n1", "ls/r05"]  # r05 overwritten
        for key in local_new:
            s3.put_object(Bucket="wbuf", Key=key, Body=b"new-" + key.encode())
        for key in ("ls/r01", "ls/r07", "ls/dir/r1"):
            s3.delete_object(Bucket="wbuf", Key=key)
    if True:
        expected = sorted((set(remote_keys) | set(local_new)) - {"ls/r01", "ls/r07", "ls/dir/r1"})
        for page_size in (1, 2, 3, 5, 1000):
            keys: list[str] = []
            for page in s3.get_paginator("list_objects_v2").paginate(
                    Bucket="wbuf", Prefix="ls/", PaginationConfig={"PageSize": page_size}):
                keys += [o["Key"] for o in page.get("Contents", [])]
            assert keys == expected, page_size
        sizes = {o["Key"]: o["Size"] for o in s3.list_objects_v2(Bucket="wbuf", Prefix="ls/")["Contents"]}
        assert sizes["ls/r05"] == len(b"new-ls/r05")
        # With a delimiter: buffered keys roll up into common prefixes, no repeats across pages.
        for page_size in (1, 2, 1000):
            names: list[str] = []
            for page in s3.get_paginator("list_objects_v2").paginate(
                    Bucket="wbuf", Prefix="ls/", Delimiter="/", PaginationConfig={"PageSize": page_size}):
                names += [o["Key"] for o in page.get("Contents", [])]
                names += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
            top = sorted({k if k.count("/") == 1 else k[: k.index("/", 3) + 1] for k in expected})
            assert sorted(names) == top and len(names) == len(set(names)), page_size
    assert any(s["state"] == "buffered" for s in _states(gw, "wbuf", "ls/")), "rows were destaged too early"
    gw.flush("wbuf", "ls/")
    direct = sorted(o["Key"] for o in remote.client().list_objects_v2(Bucket="wbuf", Prefix="ls/")["Contents"])
    assert direct == expected
    _clear(gw, remote, "ls/")


def test_multipart_complete_is_local_and_destaged_with_the_same_etag(gw: GatewayProcess,
                                                                     remote: SeaweedServer) -> None:
    s3 = gw.client()
    parts = [os.urandom(5 * 1024 * 1024), os.urandom(5 * 1024 * 1024), os.urandom(1234)]
    with_remote_paused = remote.pause
    with_remote_paused()
    try:
        up = s3.create_multipart_upload(Bucket="wbuf", Key="mp/obj", ContentType="application/x-ckpt")
        etags = [s3.upload_part(Bucket="wbuf", Key="mp/obj", UploadId=up["UploadId"], PartNumber=n,
                                Body=data)["ETag"] for n, data in enumerate(parts, start=1)]
        done = s3.complete_multipart_upload(
            Bucket="wbuf", Key="mp/obj", UploadId=up["UploadId"],
            MultipartUpload={"Parts": [{"PartNumber": n, "ETag": e} for n, e in enumerate(etags, start=1)]})
        whole = b"".join(parts)
        got = s3.get_object(Bucket="wbuf", Key="mp/obj")
        assert got["Body"].read() == whole
        assert got["ETag"] == done["ETag"]
        edge = s3.get_object(Bucket="wbuf", Key="mp/obj", Range=f"bytes={5 * 1024 * 1024 - 10}-{5 * 1024 * 1024 + 9}")
        assert edge["Body"].read() == whole[5 * 1024 * 1024 - 10: 5 * 1024 * 1024 + 10]
    finally:
        remote.resume()
    gw.flush("wbuf", "mp/")
    head = remote.client().head_object(Bucket="wbuf", Key="mp/obj")
    assert head["ETag"] == done["ETag"] and done["ETag"].endswith('-3"')
    assert head["ContentType"] == "application/x-ckpt"
    assert hashlib.sha256(remote.client().get_object(Bucket="wbuf", Key="mp/obj")["Body"].read()).digest() == \
        hashlib.sha256(whole).digest()
    _clear(gw, remote, "mp/")


def test_copy_of_a_buffered_object(gw: GatewayProcess, remote: SeaweedServer) -> None:
    s3 = gw.client()
    remote.pause()
    try:
        s3.put_object(Bucket="wbuf", Key="cp/src", Body=b"copy me", Metadata={"a": "1"})
        s3.copy_object(Bucket="wbuf", Key="cp/dst", CopySource={"Bucket": "wbuf", "Key": "cp/src"})
        got = s3.get_object(Bucket="wbuf", Key="cp/dst")
        assert got["Body"].read() == b"copy me"
        assert got["Metadata"] == {"a": "1"}
    finally:
        remote.resume()
    gw.flush("wbuf", "cp/")
    assert remote.client().get_object(Bucket="wbuf", Key="cp/dst")["Body"].read() == b"copy me"
    _clear(gw, remote, "cp/")


def test_flush_cli_waits_for_the_remote(gw: GatewayProcess, remote: SeaweedServer) -> None:
    s3 = gw.client()
    remote.pause()
    try:
        for i in range(5):
            s3.put_object(Bucket="wbuf", Key=f"cli/{i}", Body=b"x" * i)
    finally:
        remote.resume()
    env = dict(os.environ, FERRY_ADMIN_TOKEN=ADMIN_TOKEN, FERRY_ENDPOINT=gw.endpoint)
    out = subprocess.run([FERRY, "flush", "--prefix", "s3://wb/cli/", "--wait"], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "durable=True" in out.stdout
    assert remote.client().list_objects_v2(Bucket="wbuf", Prefix="cli/")["KeyCount"] == 5
    _clear(gw, remote, "cli/")


def test_admin_endpoints_need_the_token(gw: GatewayProcess) -> None:
    req = urllib.request.Request(f"{gw.endpoint}/admin/flush", method="POST")
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(req, timeout=10)
    assert err.value.code == 401


def test_write_through_mode_puts_to_the_remote_before_answering(remote: SeaweedServer, tmp_path: Path) -> None:
    with GatewayProcess(remote, tmp_path / "wt", env={"FERRY_DEFAULT_MODE": "write-through"}) as wt:
        s3 = wt.client()
        s3.create_bucket(Bucket="wthrough")
        s3.put_object(Bucket="wthrough", Key="k", Body=b"now")
        assert remote.client().get_object(Bucket="wthrough", Key="k")["Body"].read() == b"now"
        s3.delete_object(Bucket="wthrough", Key="k")
        assert remote.client().list_objects_v2(Bucket="wthrough")["KeyCount"] == 0
        s3.delete_bucket(Bucket="wthrough")


def test_writes_go_on_after_a_restart_during_an_outage(gw: GatewayProcess, remote: SeaweedServer) -> None:
    s3 = gw.client()
    s3.put_object(Bucket="wbuf", Key="rs/a", Body=b"before")
    gw.flush("wbuf", "rs/")
    remote.pause()
    try:
        gw.stop()
        gw.start()  # a fresh process: it has never asked the remote about this bucket
        s3 = gw.client()
        s3.put_object(Bucket="wbuf", Key="rs/b", Body=b"during")
        assert s3.get_object(Bucket="wbuf", Key="rs/b")["Body"].read() == b"during"
    finally:
        remote.resume()
    gw.flush("wbuf", "rs/")
    assert remote.client().get_object(Bucket="wbuf", Key="rs/b")["Body"].read() == b"during"
    _clear(gw, remote, "rs/")
