"""UploadPart as a raw signed UNSIGNED-PAYLOAD request (app/adapters/remote/put.py) against
SeaweedFS: the signature is accepted, a part arrives byte for byte (keys that need encoding
included), a body that does not match its Content-MD5 (or its checksum) is refused by the remote
and leaves no part, and failures are the errors botocore's call raised."""

from __future__ import annotations

import base64
import hashlib
import os
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.adapters.remote import RemoteConfig, RemoteStore
from app.domain.errors import S3Error


@pytest.fixture(scope="module")
def store(seaweed: Any) -> RemoteStore:
    store = RemoteStore(RemoteConfig(seaweed.endpoint, "us-east-1", seaweed.access_key, seaweed.secret_key))
    assert store.putter.enabled  # plain HTTP, no proxy: parts go the raw way
    return store


@pytest.fixture(scope="module")
def remote_bucket(seaweed: Any) -> Iterator[str]:
    client = seaweed.client()
    name = f"rp-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=name)
    yield name
    for upload in client.list_multipart_uploads(Bucket=name).get("Uploads", []):
        client.abort_multipart_upload(Bucket=name, Key=upload["Key"], UploadId=upload["UploadId"])
    for item in client.list_objects_v2(Bucket=name).get("Contents", []):
        client.delete_object(Bucket=name, Key=item["Key"])
    client.delete_bucket(Bucket=name)


def staged(tmp_path: Path, data: bytes, name: str = "part") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def b64md5(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


def b64crc32(data: bytes) -> str:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


@pytest.mark.parametrize("key", ["plain", "dir/sub/part.bin", "with space+plus", "ü/日本?=&#%", "tilde~/x%41;,'"])
def test_parts_sent_raw_arrive_byte_exact(seaweed: Any, store: RemoteStore, remote_bucket: str, tmp_path: Path,
                                          key: str) -> None:
    first, last = os.urandom(5 * 1024 * 1024 + 11), os.urandom(70_001)
    upload = store.create_multipart(remote_bucket, key, {"content-type": "application/x-test"}, {}, None)
    etags = []
    for number, data in ((1, first), (2, last)):
        with open(staged(tmp_path, data, f"p{number}"), "rb") as fh:
            etags.append(store.upload_part(remote_bucket, key, upload, number, fh, len(data), b64md5(data), {}))
    assert etags == [hashlib.md5(first).hexdigest(), hashlib.md5(last).hexdigest()]
    assert store.list_parts(remote_bucket, key, upload) == {1: etags[0], 2: etags[1]}
    store.complete_multipart(remote_bucket, key, upload, [(1, etags[0], {}), (2, etags[1], {})])
    got = seaweed.client().get_object(Bucket=remote_bucket, Key=key)
    assert got["Body"].read() == first + last
    assert got["ContentType"] == "application/x-test"


def test_parts_with_a_checksum_are_verified_by_the_remote(seaweed: Any, store: RemoteStore, remote_bucket: str,
                                                          tmp_path: Path) -> None:
    data = os.urandom(1024 * 1024 + 3)
    key = "crc"
    upload = store.create_multipart(remote_bucket, key, {}, {}, "CRC32")
    with open(staged(tmp_path, data), "rb") as fh:
        etag = store.upload_part(remote_bucket, key, upload, 1, fh, len(data), b64md5(data),
                                 {"CRC32": b64crc32(data)})
    with open(staged(tmp_path, data), "rb") as fh, pytest.raises(S3Error) as caught:
        store.upload_part(remote_bucket, key, upload, 2, fh, len(data), b64md5(data),
                          {"CRC32": b64crc32(data + b"x")})
    assert caught.value.status == 400, caught.value
    assert store.list_parts(remote_bucket, key, upload) == {1: etag}
    store.complete_multipart(remote_bucket, key, upload, [(1, etag, {"CRC32": b64crc32(data)})])
    assert seaweed.client().get_object(Bucket=remote_bucket, Key=key)["Body"].read() == data


def test_a_corrupt_body_is_refused_by_its_content_md5(store: RemoteStore, remote_bucket: str, tmp_path: Path) -> None:
    data = os.urandom(3 * 1024 * 1024)
    key = "corrupt"
    upload = store.create_multipart(remote_bucket, key, {}, {}, None)
    corrupted = bytearray(data)
    corrupted[1234567] ^= 0x01  # one bit flipped on disk after the digest was taken
    with open(staged(tmp_path, bytes(corrupted)), "rb") as fh, pytest.raises(S3Error) as caught:
        store.upload_part(remote_bucket, key, upload, 1, fh, len(data), b64md5(data), {})
    assert (caught.value.code, caught.value.status) == ("BadDigest", 400)
    assert store.list_parts(remote_bucket, key, upload) == {}  # nothing of it is kept
    with open(staged(tmp_path, data), "rb") as fh:  # the right bytes, the same request: accepted
        assert store.upload_part(remote_bucket, key, upload, 1, fh, len(data), b64md5(data), {}) \
            == hashlib.md5(data).hexdigest()
    store.abort_multipart(remote_bucket, key, upload)


def test_refusals_match_botocore(store: RemoteStore, remote_bucket: str, tmp_path: Path) -> None:
    data = b"0123456789" * 1000
    path = staged(tmp_path, data)
    cases = [
        (remote_bucket, "k", "no-such-upload", b64md5(data)),           # NoSuchUpload
        (f"nb-{uuid.uuid4().hex[:12]}", "k", "no-such-upload", b64md5(data)),  # a missing bucket
    ]
    for bucket, key, upload, md5 in cases:
        errors = []
        for send in (store.multipart.upload_part, store.multipart._upload_part_boto):
            with open(path, "rb") as fh, pytest.raises(S3Error) as caught:
                send(bucket, key, upload, 1, fh, len(data), md5, {})
            errors.append((caught.value.code, caught.value.status))
        assert errors[0] == errors[1], (bucket, errors)


def _put_both(store: RemoteStore, bucket: str, key: str, path: Path, data: bytes, **kwargs: Any) -> list[Any]:
    """The raw PutObject's and botocore's outcomes for the same call, on two keys: the stored
    object's metadata (HeadObject), or the error's (code, status)."""
    outcomes: list[Any] = []
    raw_calls: list[str] = []
    real = store.putter.put

    def counted(operation: str, *rest: Any) -> Any:
        raw_calls.append(operation)
        return real(operation, *rest)

    store.putter.put = counted  # type: ignore[method-assign]
    try:
        _put_each(store, bucket, key, path, data, kwargs, outcomes)
    finally:
        del store.putter.put
    assert raw_calls == ["PutObject"]  # the first went the raw way, the second through botocore
    return outcomes


def _put_each(store: RemoteStore, bucket: str, key: str, path: Path, data: bytes, kwargs: dict[str, Any],
              outcomes: list[Any]) -> None:
    for suffix, send in (("-raw", store.objects.put_object), ("-boto", store.objects._put_object_boto)):
        args = {"content_md5": b64md5(data), "content_headers": {}, "metadata": {}, "checksums": {}, **kwargs}
        conditions = {name: args.pop(name) for name in ("if_match", "if_none_match") if name in args}
        try:
            with open(path, "rb") as fh:
                etag = send(bucket, key + suffix, fh, len(data), args["content_md5"], args["content_headers"],
                            args["metadata"], args["checksums"], **conditions)
        except S3Error as err:
            outcomes.append((err.code, err.status))
            continue
        meta = store.head_object(bucket, key + suffix)
        outcomes.append((etag, meta.etag, meta.size, meta.content_headers, meta.metadata, meta.checksums))


def test_put_object_raw_stores_what_botocore_stores(store: RemoteStore, remote_bucket: str, tmp_path: Path) -> None:
    data = os.urandom(3 * 1024 * 1024 + 5)
    path = staged(tmp_path, data)
    headers = {"content-type": "text/plain; charset=utf-8", "content-disposition": 'attachment; filename="x"',
               "cache-control": "max-age=5", "content-language": "fr", "content-encoding": "identity",
               "expires": "Thu, 01 Dec 2094 16:00:00 GMT"}
    latin1 = {"owner": "team-a", "note": "caf\xe9", "utf8": "\xc3\xbc"}  # raw bytes as latin-1 strings
    raw, boto = _put_both(store, remote_bucket, "obj", path, data, content_headers=headers, metadata=latin1,
                          checksums={"CRC32": b64crc32(data)})
    assert raw == boto
    assert raw[0] == raw[1] == hashlib.md5(data).hexdigest() and raw[4] == latin1
    assert store.get_object(remote_bucket, "obj-raw")[1].read() == data


def test_put_object_raw_refusals_match_botocore(store: RemoteStore, remote_bucket: str, tmp_path: Path) -> None:
    data = b"x" * 1000
    path = staged(tmp_path, data)
    assert _put_both(store, remote_bucket, "cond", path, data)[0][0] == hashlib.md5(data).hexdigest()
    cases: list[dict[str, Any]] = [
        {"if_match": "0" * 32},                       # another version than the one there: 412
        {"if_none_match": "*"},                       # an object is there: 412
        {"content_md5": b64md5(b"other")},            # a corrupt body: BadDigest
        {"checksums": {"CRC32": b64crc32(b"other")}},  # a wrong checksum
    ]
    for case in cases:
        raw, boto = _put_both(store, remote_bucket, "cond", path, data, **case)
        assert raw == boto and isinstance(raw[1], int) and raw[1] >= 400, (case, raw, boto)
    assert _put_both(store, remote_bucket, "cond", path, data,
                     if_match=hashlib.md5(data).hexdigest())[0][0] == hashlib.md5(data).hexdigest()
