"""Multipart uploads end to end: parts are held by the gateway, then destaged to SeaweedFS with
the same boundaries, so the object's ETag is the client's md5-of-md5s-N locally and remotely."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import threading
import zlib
from collections.abc import Callable
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.support.gateway import flush_all, remote_client

MiB = 1024 * 1024
PART = 5 * MiB


def s3_error(call: Callable[..., Any], **kwargs: Any) -> tuple[int, dict[str, Any]]:
    with pytest.raises(ClientError) as info:
        call(**kwargs)
    return info.value.response["ResponseMetadata"]["HTTPStatusCode"], info.value.response["Error"]


def multipart_etag(parts: list[bytes]) -> str:
    digest = hashlib.md5(b"".join(hashlib.md5(p).digest() for p in parts)).hexdigest()
    return f'"{digest}-{len(parts)}"'


@pytest.fixture(scope="module")
def parts() -> list[bytes]:
    """Three 5 MiB parts and a short tail (random, generated once per module)."""
    return [os.urandom(PART) for _ in range(3)] + [os.urandom(1234)]


def upload_parts(s3: Any, bucket: str, key: str, upload_id: str, bodies: list[bytes],
                 **kwargs: Any) -> list[Any]:
    return [s3.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=n, Body=body, **kwargs)
            for n, body in enumerate(bodies, 1)]


def completed(results: list[Any], numbers: list[int] | None = None) -> dict[str, Any]:
    numbers = numbers or list(range(1, len(results) + 1))
    return {"Parts": [{"PartNumber": n, "ETag": r["ETag"]} for n, r in zip(numbers, results, strict=True)]}


def test_multipart_upload(s3: Any, bucket: str, seaweed: Any, parts: list[bytes]) -> None:
    upload = s3.create_multipart_upload(Bucket=bucket, Key="big/object.bin", ContentType="application/x-test",
                                        Metadata={"origin": "multipart"})
    upload_id = upload["UploadId"]
    assert (upload["Bucket"], upload["Key"]) == (bucket, "big/object.bin")
    results = upload_parts(s3, bucket, "big/object.bin", upload_id, parts)
    assert [r["ETag"] for r in results] == [f'"{hashlib.md5(p).hexdigest()}"' for p in parts]

    done = s3.complete_multipart_upload(Bucket=bucket, Key="big/object.bin", UploadId=upload_id,
                                        MultipartUpload=completed(results))
    etag = multipart_etag(parts)
    assert done["ETag"] == etag
    assert (done["Bucket"], done["Key"]) == (bucket, "big/object.bin")

    head = s3.head_object(Bucket=bucket, Key="big/object.bin")
    assert head["ETag"] == etag
    assert head["ContentLength"] == sum(map(len, parts))
    assert head["ContentType"] == "application/x-test"
    assert head["Metadata"] == {"origin": "multipart"}
    remote = remote_client(seaweed).head_object(Bucket=bucket, Key="big/object.bin")
    assert remote["ETag"] == etag
    assert remote["ContentLength"] == sum(map(len, parts))
    assert remote["Metadata"] == {"origin": "multipart"}

    body = s3.get_object(Bucket=bucket, Key="big/object.bin")["Body"].read()
    assert hashlib.sha256(body).digest() == hashlib.sha256(b"".join(parts)).digest()
    # A range across a part boundary.
    ranged = s3.get_object(Bucket=bucket, Key="big/object.bin", Range=f"bytes={PART - 10}-{PART + 9}")
    assert ranged["Body"].read() == (parts[0] + parts[1])[PART - 10: PART + 10]

    # The upload is gone once completed.
    assert not s3.list_multipart_uploads(Bucket=bucket).get("Uploads")
    status, error = s3_error(s3.list_parts, Bucket=bucket, Key="big/object.bin", UploadId=upload_id)
    assert (status, error["Code"]) == (404, "NoSuchUpload")


def test_list_parts_and_uploads(s3: Any, bucket: str) -> None:
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key="listed")["UploadId"]
    other = s3.create_multipart_upload(Bucket=bucket, Key="other/key")["UploadId"]
    bodies = [bytes([n]) * (1000 + n) for n in range(1, 6)]
    results = upload_parts(s3, bucket, "listed", upload_id, bodies)

    seen: list[int] = []
    marker = 0
    for _ in range(10):
        page = s3.list_parts(Bucket=bucket, Key="listed", UploadId=upload_id, MaxParts=2,
                             PartNumberMarker=marker)
        assert page["MaxParts"] == 2
        assert len(page["Parts"]) <= 2
        for part in page["Parts"]:
            n = part["PartNumber"]
            assert part["Size"] == len(bodies[n - 1])
            assert part["ETag"] == results[n - 1]["ETag"]
        seen += [p["PartNumber"] for p in page["Parts"]]
        if not page["IsTruncated"]:
            break
        marker = page["NextPartNumberMarker"]
    assert seen == [1, 2, 3, 4, 5]
    paginated = s3.get_paginator("list_parts").paginate(Bucket=bucket, Key="listed", UploadId=upload_id,
                                                        PaginationConfig={"PageSize": 3})
    assert [p["PartNumber"] for page in paginated for p in page["Parts"]] == [1, 2, 3, 4, 5]

    # Re-uploading a part number replaces it.
    again = s3.upload_part(Bucket=bucket, Key="listed", UploadId=upload_id, PartNumber=2, Body=b"replaced")
    part2 = s3.list_parts(Bucket=bucket, Key="listed", UploadId=upload_id, PartNumberMarker=1, MaxParts=1)
    assert (part2["Parts"][0]["ETag"], part2["Parts"][0]["Size"]) == (again["ETag"], 8)

    uploads = s3.list_multipart_uploads(Bucket=bucket)["Uploads"]
    assert [(u["Key"], u["UploadId"]) for u in uploads] == [("listed", upload_id), ("other/key", other)]
    prefixed = s3.list_multipart_uploads(Bucket=bucket, Prefix="other/")["Uploads"]
    assert [u["UploadId"] for u in prefixed] == [other]
    first = s3.list_multipart_uploads(Bucket=bucket, MaxUploads=1)
    assert first["IsTruncated"] and [u["Key"] for u in first["Uploads"]] == ["listed"]
    rest = s3.list_multipart_uploads(Bucket=bucket, KeyMarker=first["NextKeyMarker"])
    assert [u["Key"] for u in rest["Uploads"]] == ["other/key"]

    for key, uid in (("listed", upload_id), ("other/key", other)):
        s3.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=uid)
    assert not s3.list_multipart_uploads(Bucket=bucket).get("Uploads")


def test_abort(s3: Any, bucket: str) -> None:
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key="aborted")["UploadId"]
    result = s3.upload_part(Bucket=bucket, Key="aborted", UploadId=upload_id, PartNumber=1, Body=b"doomed")
    assert s3.abort_multipart_upload(Bucket=bucket, Key="aborted",
                                     UploadId=upload_id)["ResponseMetadata"]["HTTPStatusCode"] == 204
    for call, kwargs in (
        (s3.list_parts, {}),
        (s3.upload_part, {"PartNumber": 2, "Body": b"late"}),
        (s3.complete_multipart_upload, {"MultipartUpload": completed([result])}),
        (s3.abort_multipart_upload, {}),
    ):
        status, error = s3_error(call, Bucket=bucket, Key="aborted", UploadId=upload_id, **kwargs)
        assert (status, error["Code"]) == (404, "NoSuchUpload"), call
    status, _ = s3_error(s3.head_object, Bucket=bucket, Key="aborted")
    assert status == 404
    # An upload id is bound to its key.
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key="mine")["UploadId"]
    status, error = s3_error(s3.list_parts, Bucket=bucket, Key="not-mine", UploadId=upload_id)
    assert (status, error["Code"]) == (404, "NoSuchUpload")
    s3.abort_multipart_upload(Bucket=bucket, Key="mine", UploadId=upload_id)


def test_complete_errors(s3: Any, bucket: str, parts: list[bytes]) -> None:
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key="errs")["UploadId"]
    results = upload_parts(s3, bucket, "errs", upload_id, [parts[0], b"small part", b"tail"])
    complete = s3.complete_multipart_upload

    wrong = completed(results)
    wrong["Parts"][0]["ETag"] = '"00000000000000000000000000000000"'
    status, error = s3_error(complete, Bucket=bucket, Key="errs", UploadId=upload_id, MultipartUpload=wrong)
    assert (status, error["Code"]) == (400, "InvalidPart")

    missing = {"Parts": [{"PartNumber": 9, "ETag": results[0]["ETag"]}]}
    status, error = s3_error(complete, Bucket=bucket, Key="errs", UploadId=upload_id, MultipartUpload=missing)
    assert (status, error["Code"]) == (400, "InvalidPart")

    reordered = completed([results[1], results[0]], [2, 1])
    status, error = s3_error(complete, Bucket=bucket, Key="errs", UploadId=upload_id,
                             MultipartUpload=reordered)
    assert (status, error["Code"]) == (400, "InvalidPartOrder")

    too_small = completed(results)  # part 2 is 10 bytes and not last
    status, error = s3_error(complete, Bucket=bucket, Key="errs", UploadId=upload_id,
                             MultipartUpload=too_small)
    assert (status, error["Code"]) == (400, "EntityTooSmall")

    status, error = s3_error(complete, Bucket=bucket, Key="errs", UploadId=upload_id,
                             MultipartUpload={"Parts": []})
    assert (status, error["Code"]) == (400, "MalformedXML")

    for number in (0, 10001):
        status, error = s3_error(s3.upload_part, Bucket=bucket, Key="errs", UploadId=upload_id,
                                 PartNumber=number, Body=b"x")
        assert (status, error["Code"]) == (400, "InvalidArgument"), number

    # None of that consumed the upload: a valid subset still completes (the small part is last).
    done = complete(Bucket=bucket, Key="errs", UploadId=upload_id, MultipartUpload=completed(results[:2]))
    assert done["ETag"] == multipart_etag([parts[0], b"small part"])
    assert s3.get_object(Bucket=bucket, Key="errs")["Body"].read() == parts[0] + b"small part"


def test_upload_part_copy(s3: Any, bucket: str, parts: list[bytes]) -> None:
    source = parts[0] + parts[3]
    s3.put_object(Bucket=bucket, Key="copy-source", Body=source)
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key="assembled")["UploadId"]
    whole = s3.upload_part_copy(Bucket=bucket, Key="assembled", UploadId=upload_id, PartNumber=1,
                                CopySource={"Bucket": bucket, "Key": "copy-source"})["CopyPartResult"]
    assert whole["ETag"] == f'"{hashlib.md5(source).hexdigest()}"'
    ranged = s3.upload_part_copy(Bucket=bucket, Key="assembled", UploadId=upload_id, PartNumber=2,
                                 CopySource={"Bucket": bucket, "Key": "copy-source"},
                                 CopySourceRange="bytes=100-1099")["CopyPartResult"]
    assert ranged["ETag"] == f'"{hashlib.md5(source[100:1100]).hexdigest()}"'

    status, error = s3_error(s3.upload_part_copy, Bucket=bucket, Key="assembled", UploadId=upload_id,
                             PartNumber=3, CopySource={"Bucket": bucket, "Key": "copy-source"},
                             CopySourceRange=f"bytes=0-{len(source)}")
    assert (status, error["Code"]) == (416, "InvalidRange")
    status, error = s3_error(s3.upload_part_copy, Bucket=bucket, Key="assembled", UploadId=upload_id,
                             PartNumber=3, CopySource={"Bucket": bucket, "Key": "copy-source"},
                             CopySourceIfMatch='"00000000000000000000000000000000"')
    assert (status, error["Code"]) == (412, "PreconditionFailed")
    status, error = s3_error(s3.upload_part_copy, Bucket=bucket, Key="assembled", UploadId=upload_id,
                             PartNumber=3, CopySource={"Bucket": bucket, "Key": "no-such-source"})
    assert (status, error["Code"]) == (404, "NoSuchKey")

    done = s3.complete_multipart_upload(
        Bucket=bucket, Key="assembled", UploadId=upload_id,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": whole["ETag"]},
                                   {"PartNumber": 2, "ETag": ranged["ETag"]}]})
    assert done["ETag"] == multipart_etag([source, source[100:1100]])
    assert s3.get_object(Bucket=bucket, Key="assembled")["Body"].read() == source + source[100:1100]


def _crc32(data: bytes) -> str:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def test_multipart_with_crc32(s3: Any, bucket: str, seaweed: Any, parts: list[bytes]) -> None:
    bodies = [parts[1], parts[3]]
    upload = s3.create_multipart_upload(Bucket=bucket, Key="crc", ChecksumAlgorithm="CRC32")
    assert upload["ChecksumAlgorithm"] == "CRC32"
    results = upload_parts(s3, bucket, "crc", upload["UploadId"], bodies, ChecksumAlgorithm="CRC32")
    assert [r["ChecksumCRC32"] for r in results] == [_crc32(b) for b in bodies]
    listing = s3.list_parts(Bucket=bucket, Key="crc", UploadId=upload["UploadId"])
    assert listing["ChecksumAlgorithm"] == "CRC32"
    assert [p["ChecksumCRC32"] for p in listing["Parts"]] == [_crc32(b) for b in bodies]

    status, error = s3_error(s3.upload_part, Bucket=bucket, Key="crc", UploadId=upload["UploadId"],
                             PartNumber=3, Body=b"corrupt", ChecksumCRC32=_crc32(b"other"))
    assert (status, error["Code"]) == (400, "BadDigest")

    s3.complete_multipart_upload(
        Bucket=bucket, Key="crc", UploadId=upload["UploadId"],
        MultipartUpload={"Parts": [{"PartNumber": n, "ETag": r["ETag"], "ChecksumCRC32": r["ChecksumCRC32"]}
                                   for n, r in enumerate(results, 1)]})
    head = s3.head_object(Bucket=bucket, Key="crc", ChecksumMode="ENABLED")
    assert head["ETag"] == multipart_etag(bodies)
    # The composite checksum (CRC of the part CRCs, "-N") as the remote computed it.
    composite = base64.b64encode(zlib.crc32(b"".join(base64.b64decode(_crc32(b)) for b in bodies))
                                 .to_bytes(4, "big")).decode()
    remote = remote_client(seaweed).head_object(Bucket=bucket, Key="crc", ChecksumMode="ENABLED")
    assert remote["ChecksumCRC32"] == head["ChecksumCRC32"] == f"{composite}-2"
    got = s3.get_object(Bucket=bucket, Key="crc")["Body"].read()
    assert got == b"".join(bodies)


class _HeldBody(io.BytesIO):
    """A part body that stops half-way until ``release`` is set: a send that finishes last."""

    def __init__(self, data: bytes, release: threading.Event) -> None:
        super().__init__(data)
        self.release, self.half, self.reached = release, len(data) // 2, threading.Event()

    def read(self, size: int | None = -1) -> bytes:
        if self.tell() >= self.half:
            self.reached.set()
            assert self.release.wait(60)
        return super().read(min(size, self.half - self.tell()) if size and size > 0 and self.tell() < self.half
                            else size)


def test_multipart_resend_first_finishes_last(s3: Any, bucket: str, seaweed: Any) -> None:
    """The same part number sent twice at once, the FIRST send finishing LAST: as on S3, the
    upload that finished last is the part, and Complete with its ETag succeeds (through the
    gateway and after destage, on the remote)."""
    key = f"resend-{os.urandom(4).hex()}"
    first, second = os.urandom(6 * 1024 * 1024), os.urandom(6 * 1024 * 1024)
    upload_id = s3.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    release, results = threading.Event(), {}
    held = _HeldBody(first, release)

    def send_first() -> None:
        results["first"] = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=1, Body=held)

    sender = threading.Thread(target=send_first)
    sender.start()
    assert held.reached.wait(60)
    results["second"] = s3.upload_part(Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=1, Body=second)
    release.set()
    sender.join(60)
    etag = results["first"]["ETag"]
    assert etag == f'"{hashlib.md5(first).hexdigest()}"'
    s3.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id,
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == first
    flush_all()
    assert remote_client(seaweed).get_object(Bucket=bucket, Key=key)["Body"].read() == first
