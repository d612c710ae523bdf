"""CreateMultipartUpload's ChecksumType (issue 14): COMPOSITE / FULL_OBJECT honoured and echoed,
and the multipart object's checksum returned where S3 returns it (Complete's answer, HEAD/GET
with checksum mode, ListParts, GetObjectAttributes), buffered and destaged, in both modes."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import uuid
import zlib
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from boto3.s3.transfer import TransferConfig
from botocore.exceptions import ClientError

from app.domain.checksums import new_checksum
from tests.support.gateway import GatewayProcess

MiB = 1024 * 1024


@pytest.fixture(scope="module", params=["write-back", "write-through"])
def gw(request: pytest.FixtureRequest, seaweed: Any, tmp_path_factory: pytest.TempPathFactory
       ) -> Iterator[GatewayProcess]:
    with GatewayProcess(seaweed, tmp_path_factory.mktemp(f"ct-{request.param}"),
                        env={"FERRY_DEFAULT_MODE": request.param}) as g:
        yield g


@pytest.fixture
def bucket(gw: GatewayProcess) -> str:
    name = f"ct-{uuid.uuid4().hex[:12]}"
    gw.client().create_bucket(Bucket=name)
    return name


def b64(alg: str, data: bytes) -> str:
    c = new_checksum(alg)
    c.update(data)
    return c.b64digest()


def upload(s3: Any, bucket: str, key: str, parts: list[bytes], algorithm: str, kind: str | None
           ) -> tuple[dict[str, Any], dict[str, Any], str]:
    extra = {"ChecksumType": kind} if kind else {}
    created = s3.create_multipart_upload(Bucket=bucket, Key=key, ChecksumAlgorithm=algorithm, **extra)
    uid = created["UploadId"]
    field = f"Checksum{algorithm}"
    listed = []
    for n, body in enumerate(parts, 1):
        r = s3.upload_part(Bucket=bucket, Key=key, UploadId=uid, PartNumber=n, Body=body, ChecksumAlgorithm=algorithm)
        assert r[field] == b64(algorithm, body)
        listed.append({"PartNumber": n, "ETag": r["ETag"], field: r[field]})
    lp = s3.list_parts(Bucket=bucket, Key=key, UploadId=uid)
    assert lp["ChecksumAlgorithm"] == algorithm and lp["ChecksumType"] == created["ChecksumType"]
    assert [p[field] for p in lp["Parts"]] == [b64(algorithm, b) for b in parts]
    done = s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=uid, MultipartUpload={"Parts": listed})
    return created, done, field


def assert_everywhere(gw: GatewayProcess, s3: Any, bucket: str, key: str, field: str, value: str, kind: str) -> None:
    head = s3.head_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    assert (head.get(field), head.get("ChecksumType")) == (value, kind), head
    got = s3.get_object(Bucket=bucket, Key=key, ChecksumMode="ENABLED")
    assert got.get(field) == value
    got["Body"].read()  # botocore verifies a FULL_OBJECT checksum against the bytes
    attrs = s3.get_object_attributes(Bucket=bucket, Key=key, ObjectAttributes=["Checksum", "ObjectParts"])
    assert attrs["Checksum"][field] == value and attrs["Checksum"]["ChecksumType"] == kind


@pytest.mark.parametrize("algorithm", ["CRC32", "CRC32C", "CRC64NVME"])
def test_full_object_crc_is_the_crc_of_the_whole_object(gw: GatewayProcess, bucket: str, algorithm: str) -> None:
    s3 = gw.client()
    parts = [os.urandom(5 * MiB), os.urandom(MiB + 7)]
    created, done, field = upload(s3, bucket, "full", parts, algorithm, "FULL_OBJECT")
    assert created["ChecksumType"] == "FULL_OBJECT" and created["ChecksumAlgorithm"] == algorithm
    whole = b64(algorithm, b"".join(parts))
    if algorithm == "CRC32":
        assert whole == base64.b64encode(zlib.crc32(b"".join(parts)).to_bytes(4, "big")).decode()
    assert (done[field], done["ChecksumType"]) == (whole, "FULL_OBJECT")
    assert_everywhere(gw, s3, bucket, "full", field, whole, "FULL_OBJECT")
    gw.flush(bucket)  # destaged: the answer is the same
    head = s3.head_object(Bucket=bucket, Key="full", ChecksumMode="ENABLED")
    assert (head.get(field), head.get("ChecksumType")) == (whole, "FULL_OBJECT"), head  # the remote's own
    attrs = s3.get_object_attributes(Bucket=bucket, Key="full", ObjectAttributes=["Checksum"])
    assert attrs["Checksum"][field] == whole


def test_composite_is_the_checksum_of_the_part_checksums(gw: GatewayProcess, bucket: str) -> None:
    s3 = gw.client()
    parts = [os.urandom(5 * MiB), b"tail"]
    created, done, field = upload(s3, bucket, "comp", parts, "SHA256", "COMPOSITE")
    assert created["ChecksumType"] == "COMPOSITE"
    value = base64.b64encode(hashlib.sha256(b"".join(hashlib.sha256(p).digest() for p in parts)).digest()).decode()
    assert (done[field], done["ChecksumType"]) == (f"{value}-2", "COMPOSITE")
    assert_everywhere(gw, s3, bucket, "comp", field, f"{value}-2", "COMPOSITE")


def test_defaults_and_refusals(gw: GatewayProcess, bucket: str) -> None:
    s3 = gw.client()
    assert s3.create_multipart_upload(Bucket=bucket, Key="a", ChecksumAlgorithm="CRC64NVME")["ChecksumType"] == (
        "FULL_OBJECT")
    assert s3.create_multipart_upload(Bucket=bucket, Key="a", ChecksumAlgorithm="CRC32")["ChecksumType"] == "COMPOSITE"
    for algorithm, kind in (("SHA256", "FULL_OBJECT"), ("SHA1", "FULL_OBJECT"), ("CRC64NVME", "COMPOSITE")):
        with pytest.raises(ClientError) as err:
            s3.create_multipart_upload(Bucket=bucket, Key="a", ChecksumAlgorithm=algorithm, ChecksumType=kind)
        assert err.value.response["Error"]["Code"] == "InvalidRequest", (algorithm, kind)


def test_boto3_defaults_upload_and_verify(gw: GatewayProcess, bucket: str) -> None:
    """boto3's own defaults (flexible checksums, its transfer manager): what it uploads in parts
    reads back verified with checksum mode."""
    s3: Any = boto3.client("s3", endpoint_url=gw.endpoint, region_name="us-east-1",
                           aws_access_key_id=gw.client()._request_signer._credentials.access_key,
                           aws_secret_access_key=gw.client()._request_signer._credentials.secret_key)
    data = os.urandom(12 * MiB + 5)
    s3.upload_fileobj(io.BytesIO(data), bucket, "defaults",
                      Config=TransferConfig(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB))
    got = s3.get_object(Bucket=bucket, Key="defaults", ChecksumMode="ENABLED")
    assert got["Body"].read() == data
    assert got["ChecksumType"] in ("FULL_OBJECT", "COMPOSITE")
    if got["ChecksumType"] == "FULL_OBJECT":
        algorithm = next(a for a in ("CRC32", "CRC32C", "CRC64NVME") if f"Checksum{a}" in got)
        assert got[f"Checksum{algorithm}"] == b64(algorithm, data)


def test_a_repeated_complete_answers_the_same_checksum(gw: GatewayProcess, bucket: str) -> None:
    """A retried CompleteMultipartUpload answers exactly as the first did, ChecksumCRC32 and
    ChecksumType included (a retry must not lose what the first answer said)."""
    s3, key = gw.client(), f"again-{uuid.uuid4().hex}"
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key=key, ChecksumAlgorithm="CRC32")["UploadId"]
    body = os.urandom(1024)
    part = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=1, Body=body,
                          ChecksumAlgorithm="CRC32")
    parts = {"Parts": [{"PartNumber": 1, "ETag": part["ETag"], "ChecksumCRC32": part["ChecksumCRC32"]}]}
    fields = ("ETag", "ChecksumCRC32", "ChecksumType")
    first = s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload=parts)
    again = s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload=parts)
    assert first.get("ChecksumCRC32") and first.get("ChecksumType")
    assert {f: again.get(f) for f in fields} == {f: first.get(f) for f in fields}
