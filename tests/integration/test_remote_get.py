"""The lean GetObject (app/adapters/remote/get.py) against SeaweedFS: every answer must be what
botocore's ``get_object`` made of the same request, success and failure alike."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from app import metrics
from app.adapters.remote import RemoteConfig, RemoteStore
from app.domain.errors import S3Error
from tests.support.gateway import free_port


@pytest.fixture(scope="module")
def store(seaweed: Any) -> RemoteStore:
    return RemoteStore(RemoteConfig(seaweed.endpoint, "us-east-1", seaweed.access_key, seaweed.secret_key))


@pytest.fixture(scope="module")
def remote_bucket(seaweed: Any) -> Iterator[str]:
    client = seaweed.client()
    name = f"rg-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    yield name
    for item in client.list_objects_v2(Bucket=name).get("Contents", []):
        client.delete_object(Bucket=name, Key=item["Key"])
    client.delete_bucket(Bucket=name)


def both(store: RemoteStore, *args: Any) -> tuple[Any, Any]:
    """(lean, botocore) answers: (meta, body bytes), or the S3Error raised."""
    bucket, key, byte_range, if_match = (*args, None, None)[:4]
    results = []
    for call in (store.get_object, store.objects._get_object_boto):
        try:
            meta, body = call(bucket, key, byte_range, if_match)
            results.append((meta, body.read()))
        except S3Error as err:
            results.append(err)
    return results[0], results[1]


def same_error(a: Any, b: Any) -> bool:
    return (isinstance(a, S3Error) and isinstance(b, S3Error)
            and (a.code, a.status, a.fields) == (b.code, b.status, b.fields))


@pytest.mark.parametrize("key", ["plain", "dir/sub/file.bin", "with space+plus", "ü/日本?=&#%", "tilde~/x%41;,'"])
def test_answers_match_botocore(seaweed: Any, store: RemoteStore, remote_bucket: str, key: str) -> None:
    body = (key.encode() * 5000)[:70_001]
    store.client.put_object(Bucket=remote_bucket, Key=key, Body=body, ContentType="application/x-test",
                            ContentDisposition='attachment; filename="x"', CacheControl="max-age=5",
                            Metadata={"owner": "team-a", "note": "ünïcode"}, ChecksumAlgorithm="CRC32")
    lean, boto = both(store, remote_bucket, key)
    assert lean == boto
    meta, data = lean
    assert data == body and meta.size == len(body) and meta.checksums.get("CRC32")
    assert meta.metadata["owner"] == "team-a" and meta.content_headers["content-type"] == "application/x-test"

    lean, boto = both(store, remote_bucket, key, "bytes=100-199")
    assert lean == boto and lean[1] == body[100:200] and lean[0].size == len(body)

    lean, boto = both(store, remote_bucket, key, "bytes=0-9", lean[0].etag)
    assert lean == boto and lean[1] == body[:10]


def test_errors_match_botocore(store: RemoteStore, remote_bucket: str) -> None:
    store.client.put_object(Bucket=remote_bucket, Key="e", Body=b"0123456789")
    cases = [
        (remote_bucket, "missing"),                      # NoSuchKey
        (f"nb-{uuid.uuid4().hex[:12]}", "k"),            # NoSuchBucket
        (remote_bucket, "e", "bytes=0-3", "0" * 32),     # If-Match mismatch: PreconditionFailed
        (remote_bucket, "e", "bytes=100-200"),           # InvalidRange
    ]
    codes = []
    for case in cases:
        lean, boto = both(store, *case)
        assert same_error(lean, boto), (case, lean, boto)
        codes.append(lean.code)
    assert codes == ["NoSuchKey", "NoSuchBucket", "PreconditionFailed", "InvalidRange"]


def test_unreachable_remote_is_service_unavailable_and_counted() -> None:
    dead = RemoteStore(RemoteConfig(f"http://127.0.0.1:{free_port()}", "us-east-1", "k", "s", connect_timeout=1))
    dead.lean.max_attempts = 2
    before = metrics.REMOTE_REQUESTS.labels("GetObject", "network")._value.get()
    with pytest.raises(S3Error) as info:
        dead.get_object("bucket", "key")
    assert info.value.code == "ServiceUnavailable" and info.value.status == 503
    assert metrics.REMOTE_REQUESTS.labels("GetObject", "network")._value.get() == before + 1


def test_addressing_this_path_cannot_map_falls_back_to_botocore(seaweed: Any) -> None:
    auto = RemoteStore(RemoteConfig(seaweed.endpoint, "us-east-1", seaweed.access_key, seaweed.secret_key,
                                    addressing_style="auto"))
    assert auto.lean.request_url("bucket", "key") is None
    virtual = RemoteStore(RemoteConfig("https://s3.example.test", "eu-west-1", "k", "s", addressing_style="virtual"))
    assert virtual.lean.request_url("my-bucket", "a b") == "https://my-bucket.s3.example.test/a%20b"
    assert virtual.lean.request_url("dotted.bucket", "k") is None
