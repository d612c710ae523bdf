"""Two more real clients against ``ferry serve`` in front of SeaweedFS, with their own defaults:
minio-py (its own SigV4 signer, no botocore) and s3fs (fsspec over aiobotocore, in its own venv
under .tools/s3fs because aiobotocore pins botocore). Each writes a multipart object and a small
one, reads them back, lists, fetches a presigned GET (s3fs's ``url()`` is SigV2 by default) and
deletes; the remote must end empty.

A client that is not installed skips; in CI (CI=true or FERRY_REQUIRE_SERVICES=1) it fails.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import urllib.error
import urllib.request
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.support.clients import ROOT, clients_required
from tests.support.gateway import ACCESS_KEY, SECRET_KEY, GatewayProcess, remote_client

pytestmark = pytest.mark.clients

MIB = 1024 * 1024
S3FS_PYTHON = ROOT / ".tools" / "s3fs" / "bin" / "python"


def _missing(what: str) -> None:
    message = f"{what} is not installed (scripts/install.sh installs it)"
    if clients_required():
        pytest.fail(message)
    pytest.skip(message)


def _fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as resp:
        return resp.read()


def _assert_remote_empty(seaweed: Any, bucket: str, prefix: str) -> None:
    listed = remote_client(seaweed).list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    assert [o["Key"] for o in listed] == []


def test_minio_py(gateway: GatewayProcess, seaweed: Any, bucket: str) -> None:
    try:
        from minio import Minio
    except ImportError:
        _missing("minio")
    client = Minio(urlsplit(gateway.endpoint).netloc, access_key=ACCESS_KEY, secret_key=SECRET_KEY, secure=False,
                   region="us-east-1")
    prefix = f"minio/{uuid.uuid4().hex}/"
    big = os.urandom(12 * MIB)
    client.put_object(bucket, prefix + "big.bin", io.BytesIO(big), len(big), part_size=5 * MIB)
    client.put_object(bucket, prefix + "small é+.txt", io.BytesIO(b"hello minio"), 11, content_type="text/plain")
    stat = client.stat_object(bucket, prefix + "big.bin")
    assert stat.size == len(big) and stat.etag.endswith("-3")
    response = client.get_object(bucket, prefix + "big.bin")
    try:
        assert hashlib.sha256(response.read()).digest() == hashlib.sha256(big).digest()
    finally:
        response.close()
        response.release_conn()
    names = sorted(o.object_name for o in client.list_objects(bucket, prefix=prefix, recursive=True))
    assert names == [prefix + "big.bin", prefix + "small é+.txt"]
    url = client.presigned_get_object(bucket, prefix + "small é+.txt", expires=timedelta(minutes=5))
    assert "X-Amz-Signature=" in url and _fetch(url) == b"hello minio"
    for name in names:
        client.remove_object(bucket, name)
    assert list(client.list_objects(bucket, prefix=prefix, recursive=True)) == []
    gateway.flush(bucket)
    _assert_remote_empty(seaweed, bucket, prefix)


S3FS_SCRIPT = r"""
import hashlib, json, os, sys, urllib.request
import s3fs
endpoint, key, secret, bucket, prefix = sys.argv[1:6]
fs = s3fs.S3FileSystem(key=key, secret=secret, endpoint_url=endpoint, client_kwargs={"region_name": "us-east-1"},
                       default_block_size=5 * 1024 * 1024)
big = os.urandom(12 * 1024 * 1024)
with fs.open(f"{bucket}/{prefix}big.bin", "wb") as fh:   # multipart: 5 MiB blocks
    fh.write(big)
fs.pipe(f"{bucket}/{prefix}small.txt", b"hello s3fs")
out = {
    "big_ok": hashlib.sha256(fs.cat(f"{bucket}/{prefix}big.bin")).hexdigest() == hashlib.sha256(big).hexdigest(),
    "etag": fs.info(f"{bucket}/{prefix}big.bin")["ETag"],
    "listed": sorted(fs.find(f"{bucket}/{prefix}")),
    "url": fs.url(f"{bucket}/{prefix}small.txt", expires=300),
}
out["url_body"] = urllib.request.urlopen(out["url"], timeout=60).read().decode()
fs.rm(f"{bucket}/{prefix}", recursive=True)
fs.invalidate_cache()
out["after"] = fs.find(f"{bucket}/{prefix}")
print(json.dumps(out))
"""


def test_s3fs(gateway: GatewayProcess, seaweed: Any, bucket: str, tmp_path: Path) -> None:
    if not os.access(S3FS_PYTHON, os.X_OK):
        _missing("s3fs (.tools/s3fs)")
    prefix = f"s3fs/{uuid.uuid4().hex}/"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "FERRY_", "PYTHONPATH"))}
    env.update(HOME=str(tmp_path), AWS_EC2_METADATA_DISABLED="true")
    proc = subprocess.run([str(S3FS_PYTHON), "-c", S3FS_SCRIPT, gateway.endpoint, ACCESS_KEY, SECRET_KEY, bucket,
                           prefix], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["big_ok"] and "-" in out["etag"]  # s3fs wrote it as a multipart upload
    assert out["listed"] == [f"{bucket}/{prefix}big.bin", f"{bucket}/{prefix}small.txt"]
    assert "AWSAccessKeyId=" in out["url"], out["url"]  # s3fs's default presigner: SigV2
    assert out["url_body"] == "hello s3fs"
    # SeaweedFS lists the emptied directory itself as a "prefix/" entry (a filesystem-backed
    # remote's quirk, passed through): no file is left, which is what counts.
    assert set(out["after"]) <= {f"{bucket}/{prefix.rstrip('/')}"}, out["after"]
    gateway.flush(bucket)
    _assert_remote_empty(seaweed, bucket, prefix)
    # The URL was made before the delete: it now answers NoSuchKey, signed and all.
    with pytest.raises(urllib.error.HTTPError) as info:
        _fetch(out["url"])
    assert info.value.code == 404
