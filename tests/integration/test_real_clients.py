"""Real S3 clients (AWS CLI, s3cmd, s5cmd, rclone) against ``ferry serve`` in front of SeaweedFS.

Per client: a 64 MiB file goes up as a multipart upload (checked by its ``-N`` ETag), comes back
byte-identical, is copied server-side, fetched through a presigned URL (where the client makes
SigV4 ones), listed and deleted; a tree of 200 small files (nested dirs, spaces, unicode,
reserved characters) is synced up (twice: the second must transfer nothing) and back into a
fresh dir, compared byte for byte, listed and deleted. After each test the bucket must be empty
through the gateway and directly on SeaweedFS. The AWS CLI also runs over HTTPS, where botocore
sends aws-chunked bodies with trailing checksums.

A client that is not installed skips its tests; in CI (CI=true or FERRY_REQUIRE_SERVICES=1) it
fails them instead.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import os
import random
import ssl
import time
import urllib.request
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.clients import AwsCli, Rclone, make_client, tree_files
from tests.support.gateway import GatewayProcess, remote_client

pytestmark = pytest.mark.clients

BIG_SIZE = 64 * 1024 * 1024
TREE_FILES = 200
TREE_PREFIX = "tree/"
CLIENT_NAMES = ("aws", "s3cmd", "s5cmd", "rclone")


@dataclass(frozen=True)
class BigFile:
    path: Path
    sha256: str
    md5: str
    size: int


@pytest.fixture(scope="module")
def big_file(tmp_path_factory: pytest.TempPathFactory) -> BigFile:
    path = tmp_path_factory.mktemp("big") / "big.bin"
    sha, md5 = hashlib.sha256(), hashlib.md5()
    with open(path, "wb") as fh:
        for _ in range(BIG_SIZE // (4 * 1024 * 1024)):
            chunk = os.urandom(4 * 1024 * 1024)
            sha.update(chunk)
            md5.update(chunk)
            fh.write(chunk)
    return BigFile(path, sha.hexdigest(), md5.hexdigest(), BIG_SIZE)


# Names that exercise URL encoding in every client: spaces, unicode (NFC), nesting, a plus sign.
# (Tabs and backslashes are left out: s3cmd and rclone rewrite those names themselves.)
SPECIAL_NAMES = (
    "with space.txt",
    " leading and trailing space .txt",
    "dir with space/inner file.bin",
    "ünïcödé/日本語のファイル.txt",
    "nested/deeper/still deeper/é à ç.dat",
    "emoji/rocket 🚀.bin",
    "plus+sign/a+b c+d.txt",
    "reserved/amp&and=eq;semi,comma.txt",
    "reserved/percent%20literal %2F.txt",
    "reserved/hash#question?.txt",
    "reserved/tilde~brackets [1] (2) quote's.txt",
    "empty/zero.bin",
)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tree") / "src"
    rng = random.Random(20240229)
    dirs = ["", "a", "a/b", "a/b/c", "logs/2024/01", "data"]
    paths = list(SPECIAL_NAMES)
    while len(paths) < TREE_FILES:
        d = rng.choice(dirs)
        name = f"f{len(paths):03d}.{rng.choice(['txt', 'bin', 'json'])}"
        paths.append(f"{d}/{name}" if d else name)
    for rel in paths:
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(rng.randbytes(0 if rel.endswith("zero.bin") else rng.randint(0, 20 * 1024)))
        # Sync tools re-send files modified after the remote's LastModified, which has
        # one-second precision: files written in the upload's own second would look newer.
        os.utime(p, (time.time() - 3600, time.time() - 3600))
    assert len(tree_files(root)) == TREE_FILES
    return root


@contextlib.contextmanager
def new_bucket(gw: GatewayProcess, seaweed: Any) -> Iterator[str]:
    """A bucket created through ``gw``; removed afterwards directly on SeaweedFS, whatever is left."""
    name = f"rc-{uuid.uuid4().hex[:16]}"
    gw.client().create_bucket(Bucket=name)
    try:
        yield name
    finally:
        s3 = remote_client(seaweed)
        with contextlib.suppress(Exception):
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
                for item in page.get("Contents", []):
                    s3.delete_object(Bucket=name, Key=item["Key"])
            s3.delete_bucket(Bucket=name)


@pytest.fixture
def fresh_bucket(gateway: GatewayProcess, seaweed: Any) -> Iterator[str]:
    with new_bucket(gateway, seaweed) as name:
        yield name


def assert_empty(gateway: GatewayProcess, seaweed: Any, bucket: str) -> None:
    via_gateway = gateway.client().list_objects_v2(Bucket=bucket)
    assert via_gateway.get("KeyCount", 0) == 0, [c["Key"] for c in via_gateway.get("Contents", [])]
    on_remote = remote_client(seaweed).list_objects_v2(Bucket=bucket)
    assert on_remote.get("KeyCount", 0) == 0, [c["Key"] for c in on_remote.get("Contents", [])]
    uploads = gateway.client().list_multipart_uploads(Bucket=bucket)
    assert not uploads.get("Uploads"), uploads.get("Uploads")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(4 * 1024 * 1024):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_of_object(gw: GatewayProcess, bucket: str, key: str) -> str:
    digest = hashlib.sha256()
    for chunk in gw.client().get_object(Bucket=bucket, Key=key)["Body"].iter_chunks(1024 * 1024):
        digest.update(chunk)
    return digest.hexdigest()


def big_roundtrip(cli: Any, gw: GatewayProcess, seaweed: Any, bucket: str, big: BigFile, tmp: Path) -> None:
    key = "big/64MiB object+1.bin"
    cli.put(big.path, bucket, key)
    head = gw.client().head_object(Bucket=bucket, Key=key)
    etag = head["ETag"].strip('"')
    assert "-" in etag and int(etag.rsplit("-", 1)[1]) > 1, f"{cli.name} did not upload multipart: {etag}"
    assert head["ContentLength"] == big.size
    assert remote_client(seaweed).head_object(Bucket=bucket, Key=key)["ContentLength"] == big.size

    out = tmp / "down" / "big.bin"
    out.parent.mkdir(parents=True, exist_ok=True)
    cli.get(bucket, key, out)
    assert out.stat().st_size == big.size
    assert sha256_file(out) == big.sha256
    if isinstance(cli, Rclone):  # rclone keeps the MD5 of multipart uploads in X-Amz-Meta-Md5chksum
        assert cli.md5sum(bucket, key) == big.md5

    # Server-side copy: CopyObject (s3cmd, s5cmd) or UploadPartCopy by ranges (aws, rclone); the
    # names carry a space and a '+' through x-amz-copy-source.
    copy_key = "big/copy of a+b.bin"
    cli.copy(bucket, key, copy_key)
    assert sha256_of_object(gw, bucket, copy_key) == big.sha256

    url = cli.presign(bucket, key)
    if url is not None:  # query-string SigV4, or SigV2 (s3cmd signurl)
        ctx = ssl.create_default_context(cafile=cli.ca_bundle) if cli.ca_bundle else None
        with urllib.request.urlopen(url, timeout=60, context=ctx) as resp:
            digest = hashlib.sha256()
            while chunk := resp.read(1024 * 1024):
                digest.update(chunk)
        assert digest.hexdigest() == big.sha256

    assert bucket in cli.buckets()
    assert cli.ls(bucket) == {key: big.size, copy_key: big.size}
    cli.rm(bucket, key)
    cli.rm(bucket, copy_key)
    assert cli.ls(bucket) == {}
    assert_empty(gw, seaweed, bucket)


def tree_roundtrip(cli: Any, gw: GatewayProcess, seaweed: Any, bucket: str, src: Path, tmp: Path) -> None:
    expected = tree_files(src)
    assert cli.sync_up(src, bucket, TREE_PREFIX) == len(expected)
    listed = cli.ls(bucket)
    assert listed == {TREE_PREFIX + k: len(v) for k, v in expected.items()}
    remote = {}
    for page in remote_client(seaweed).get_paginator("list_objects_v2").paginate(Bucket=bucket):
        remote.update({c["Key"]: c["Size"] for c in page.get("Contents", [])})
    assert remote == listed

    if isinstance(cli, Rclone):
        cli.check(src, bucket, TREE_PREFIX)
    # A second sync must find nothing to do (sizes, dates or ETags as listed match) and change nothing.
    assert cli.sync_up(src, bucket, TREE_PREFIX) == 0
    assert cli.ls(bucket) == listed

    dst = tmp / "back"
    cli.sync_down(bucket, TREE_PREFIX, dst)
    got = tree_files(dst)
    assert sorted(got) == sorted(expected)
    mismatched = [k for k in expected if got[k] != expected[k]]
    assert not mismatched, mismatched

    cli.rm_all(bucket)
    assert cli.ls(bucket) == {}
    assert_empty(gw, seaweed, bucket)


@pytest.mark.parametrize("client_name", CLIENT_NAMES)
def test_multipart_file_roundtrip(client_name: str, gateway: GatewayProcess, seaweed: Any, fresh_bucket: str,
                                  big_file: BigFile, tmp_path: Path) -> None:
    cli = make_client(client_name, gateway, tmp_path)
    big_roundtrip(cli, gateway, seaweed, fresh_bucket, big_file, tmp_path)


# The tree sync of every client on demand; the quick profile syncs with rclone
# (each client's multipart file round trip stays in the quick profile).
@pytest.mark.parametrize("client_name", [n if n == "rclone" else pytest.param(n, marks=pytest.mark.slow)
                                         for n in CLIENT_NAMES])
def test_tree_sync_roundtrip(client_name: str, gateway: GatewayProcess, seaweed: Any, fresh_bucket: str,
                             tree: Path, tmp_path: Path) -> None:
    cli = make_client(client_name, gateway, tmp_path)
    tree_roundtrip(cli, gateway, seaweed, fresh_bucket, tree, tmp_path)


def test_aws_s3api(gateway: GatewayProcess, seaweed: Any, fresh_bucket: str, tmp_path: Path) -> None:
    cli: AwsCli = make_client("aws", gateway, tmp_path)
    body = tmp_path / "small.txt"
    body.write_bytes(b"hello from the aws cli\n")
    put = cli.s3api("put-object", "--bucket", fresh_bucket, "--key", "dir/ü file.txt", "--body", str(body),
                    "--content-type", "text/plain", "--metadata", "origin=awscli")
    assert put["ETag"].strip('"') == hashlib.md5(body.read_bytes()).hexdigest()

    head = cli.s3api("head-object", "--bucket", fresh_bucket, "--key", "dir/ü file.txt")
    assert head["ContentLength"] == body.stat().st_size
    assert head["ContentType"] == "text/plain"
    assert head["Metadata"] == {"origin": "awscli"}
    assert head["ETag"] == put["ETag"]

    for i in range(3):
        cli.s3api("put-object", "--bucket", fresh_bucket, "--key", f"many/{i:02d}", "--body", str(body))
    # --page-size 2: the CLI follows continuation tokens and merges the pages.
    listed = cli.s3api("list-objects-v2", "--bucket", fresh_bucket, "--prefix", "many/", "--page-size", "2")
    assert [c["Key"] for c in listed["Contents"]] == [f"many/{i:02d}" for i in range(3)]
    delimited = cli.s3api("list-objects-v2", "--bucket", fresh_bucket, "--delimiter", "/")
    assert sorted(p["Prefix"] for p in delimited["CommonPrefixes"]) == ["dir/", "many/"]

    cli.rm_all(fresh_bucket)
    assert cli.s3api("list-objects-v2", "--bucket", fresh_bucket).get("KeyCount", 0) == 0
    assert_empty(gateway, seaweed, fresh_bucket)


def test_aws_cli_over_https(gateway_tls: GatewayProcess, seaweed: Any, big_file: BigFile, tree: Path,
                            tmp_path: Path) -> None:
    """Over HTTPS botocore sends aws-chunked bodies with trailing checksums (checked in --debug)."""
    cli: AwsCli = make_client("aws", gateway_tls, tmp_path)
    assert cli.env["AWS_CA_BUNDLE"] == str(gateway_tls.tls.ca_bundle)
    with new_bucket(gateway_tls, seaweed) as bucket:
        small = tmp_path / "small.bin"
        small.write_bytes(b"trailer" * 100)
        proc = cli.run("s3api", "put-object", "--bucket", bucket, "--key", "small", "--body", str(small),
                       "--output", "json", "--debug")
        assert "STREAMING-UNSIGNED-PAYLOAD-TRAILER" in proc.stderr, "botocore did not send aws-chunked"
        put = json.loads(proc.stdout)
        data = small.read_bytes()
        assert put["ETag"].strip('"') == hashlib.md5(data).hexdigest()
        assert put["ChecksumCRC32"] == base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()
        cli.rm(bucket, "small")

        big_roundtrip(cli, gateway_tls, seaweed, bucket, big_file, tmp_path / "big")
        tree_roundtrip(cli, gateway_tls, seaweed, bucket, tree, tmp_path / "tree")
