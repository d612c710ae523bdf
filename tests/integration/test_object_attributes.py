"""GetObjectAttributes through a real ``ferry serve`` in front of SeaweedFS, for a buffered
version (answered from the journal) and the same object once durable (answered from the remote),
with ObjectParts paginated as S3 does."""

from __future__ import annotations

import base64
import hashlib
import os
import uuid
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.support.gateway import GatewayProcess, remote_client

MIB = 1024 * 1024
ALL = ["ETag", "Checksum", "ObjectParts", "StorageClass", "ObjectSize"]


def attributes(s3: Any, bucket: str, key: str, **kw: Any) -> dict[str, Any]:
    got = s3.get_object_attributes(Bucket=bucket, Key=key, ObjectAttributes=kw.pop("names", ALL), **kw)
    got.pop("ResponseMetadata")
    return got


def _multipart(s3: Any, bucket: str, key: str, sizes: list[int]) -> tuple[str, list[bytes]]:
    upload = s3.create_multipart_upload(Bucket=bucket, Key=key, ChecksumAlgorithm="CRC32")["UploadId"]
    bodies = [os.urandom(size) for size in sizes]
    done = []
    for number, body in enumerate(bodies, 1):
        part = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=number, Body=body,
                              ChecksumAlgorithm="CRC32")
        done.append({"PartNumber": number, "ETag": part["ETag"], "ChecksumCRC32": part["ChecksumCRC32"]})
    etag = s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload,
                                        MultipartUpload={"Parts": done})["ETag"].strip('"')
    return etag, bodies


def test_single_part_object_buffered_then_durable(gateway: GatewayProcess, bucket: str) -> None:
    s3 = gateway.client()
    key = f"attrs/{uuid.uuid4().hex}"
    body = os.urandom(12345)
    s3.put_object(Bucket=bucket, Key=key, Body=body, ChecksumAlgorithm="SHA256")
    sha = base64.b64encode(hashlib.sha256(body).digest()).decode()
    for _ in ("buffered", "durable"):
        got = attributes(s3, bucket, key)
        assert got["ETag"] == hashlib.md5(body).hexdigest()
        assert got["ObjectSize"] == len(body) and got["StorageClass"] == "STANDARD"
        assert got["Checksum"]["ChecksumSHA256"] == sha and got["Checksum"]["ChecksumType"] == "FULL_OBJECT"
        assert "ObjectParts" not in got and got["LastModified"]
        gateway.flush(bucket)
    only = attributes(s3, bucket, key, names=["ObjectSize"])
    assert set(only) == {"ObjectSize", "LastModified"}


def test_multipart_object_parts_paginate_buffered_and_durable(gateway: GatewayProcess, seaweed: Any,
                                                              bucket: str) -> None:
    s3 = gateway.client()
    key = f"attrs/mp-{uuid.uuid4().hex}"
    etag, bodies = _multipart(s3, bucket, key, [5 * MIB, 5 * MIB, 1000])
    sizes = [len(b) for b in bodies]
    for stage in ("buffered", "durable"):
        got = attributes(s3, bucket, key)
        assert got["ETag"] == etag and got["ObjectSize"] == sum(sizes), stage
        parts = got["ObjectParts"]
        assert parts["TotalPartsCount"] == 3 and not parts["IsTruncated"], stage
        assert [(p["PartNumber"], p["Size"]) for p in parts["Parts"]] == [(1, sizes[0]), (2, sizes[1]), (3, 1000)]
        first = attributes(s3, bucket, key, names=["ObjectParts"], MaxParts=2)["ObjectParts"]
        assert [p["PartNumber"] for p in first["Parts"]] == [1, 2] and first["IsTruncated"], stage
        assert first["NextPartNumberMarker"] == 2
        rest = attributes(s3, bucket, key, names=["ObjectParts"], PartNumberMarker=2)["ObjectParts"]
        assert [p["PartNumber"] for p in rest["Parts"]] == [3] and not rest["IsTruncated"], stage
        if stage == "buffered":
            import zlib
            want = base64.b64encode(zlib.crc32(bodies[2]).to_bytes(4, "big")).decode()
            assert parts["Parts"][2]["ChecksumCRC32"] == want
            gateway.flush(bucket)
            assert remote_client(seaweed).head_object(Bucket=bucket, Key=key)["ETag"].strip('"') == etag


def test_bad_requests_get_s3_errors(gateway: GatewayProcess, bucket: str) -> None:
    s3 = gateway.client()
    key = f"attrs/{uuid.uuid4().hex}"
    s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    cases = [
        (dict(Key=key, ObjectAttributes=["Colour"]), (400, "InvalidArgument")),
        (dict(Key=key + "-missing", ObjectAttributes=["ETag"]), (404, "NoSuchKey")),
        (dict(Key=key, ObjectAttributes=["ETag"], MaxParts=-1), (400, "InvalidArgument")),
    ]
    for kwargs, expected in cases:
        with pytest.raises(ClientError) as info:
            s3.get_object_attributes(Bucket=bucket, **kwargs)
        response = info.value.response
        assert (response["ResponseMetadata"]["HTTPStatusCode"], response["Error"]["Code"]) == expected
    s3.delete_object(Bucket=bucket, Key=key)  # a pending delete hides the object at once
    with pytest.raises(ClientError) as info:
        s3.get_object_attributes(Bucket=bucket, Key=key, ObjectAttributes=["ETag"])
    assert info.value.response["Error"]["Code"] == "NoSuchKey"
