"""Every header family of docs/s3-operations.md behaves as the table says, through a real
gateway: one request per family (a PutObject carrying the family's probe header; a GET for the
conditional reads), plus one with an accepted value for families that accept some values. The
expectations are read from ``app/s3/headers.py``, the table the request layer enforces and the
doc is generated from."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError

from app.domain.errors import ERROR_TABLE
from app.s3.headers import FAMILIES, HeaderFamily
from tests.support.gateway import GatewayProcess


@pytest.fixture(scope="module")
def bucket(gateway: GatewayProcess) -> Iterator[str]:
    name = f"hf-{uuid.uuid4().hex[:12]}"
    gateway.client().create_bucket(Bucket=name)
    yield name


def send_with(s3: Any, operation: str, bucket: str, extra: dict[str, str]) -> tuple[int, str]:
    """One request of ``operation`` carrying ``extra`` headers (signed with the request):
    (status, error code). ``bucket`` holds the object ``src`` (reads and copies use it)."""

    def add(request: Any, **_: Any) -> None:
        for name, value in extra.items():
            request.headers[name] = value

    calls = {
        "PutObject": lambda: s3.put_object(Bucket=bucket, Key=f"k-{uuid.uuid4().hex}", Body=b"family"),
        "CreateBucket": lambda: s3.create_bucket(Bucket=f"hf-{uuid.uuid4().hex[:12]}"),
        "GetObject": lambda: s3.get_object(Bucket=bucket, Key="src")["Body"].read(),
        "HeadObject": lambda: s3.head_object(Bucket=bucket, Key="src"),
        "CopyObject": lambda: s3.copy_object(Bucket=bucket, Key=f"c-{uuid.uuid4().hex}",
                                             CopySource={"Bucket": bucket, "Key": "src"}),
        "DeleteObject": lambda: s3.delete_object(Bucket=bucket, Key="gone"),
        "DeleteObjects": lambda: s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "gone"}]}),
    }
    s3.meta.events.register(f"before-sign.s3.{operation}", add)
    try:
        calls[operation]()
    except ClientError as exc:
        return int(exc.response["ResponseMetadata"]["HTTPStatusCode"]), str(exc.response["Error"].get("Code", ""))
    finally:
        s3.meta.events.unregister(f"before-sign.s3.{operation}", add)
    return 200, ""


def put_with(gateway: GatewayProcess, bucket: str, extra: dict[str, str]) -> tuple[int, str]:
    return send_with(gateway.client(), "PutObject", bucket, extra)


def expected(family: HeaderFamily) -> tuple[int, str]:
    if family.status == "supported" or (family.status == "accepted" and not family.values):
        return 200, ""
    assert family.error is not None
    return ERROR_TABLE[family.error][0], family.error


def probe_operation(family: HeaderFamily) -> str:
    """The operation a family's probe is sent with: PutObject unless the family is for others."""
    return family.operations[0] if family.operations else "PutObject"


@pytest.mark.parametrize("family", [f for f in FAMILIES if f.probe], ids=lambda f: f.name)
def test_each_family_answers_as_documented(gateway: GatewayProcess, bucket: str, family: HeaderFamily) -> None:
    s3, operation = gateway.client(), probe_operation(family)
    s3.put_object(Bucket=bucket, Key="src", Body=b"source")
    assert send_with(s3, operation, bucket, family.probe) == expected(family)
    if family.status == "accepted" and family.values:
        name = next(iter(family.probe))
        for value in family.values:
            assert send_with(s3, operation, bucket, {name: value}) == (200, ""), value


# What S3 answers when the feature a header is about is absent, per operation: sent through the
# gateway and, where SeaweedFS implements the same answer, to SeaweedFS directly too.
ABSENT_FEATURE_CASES: list[tuple[str, dict[str, str], tuple[int, str], bool]] = [
    ("DeleteObjects", {"x-amz-bypass-governance-retention": "true"}, (200, ""), True),
    ("DeleteObject", {"x-amz-bypass-governance-retention": "true"}, (204, ""), True),
    ("DeleteObject", {"x-amz-mfa": "SERIAL 123456"}, (204, ""), True),
    ("PutObject", {"x-amz-bypass-governance-retention": "true"}, (400, "InvalidRequest"), True),
    ("GetObject", {"x-amz-server-side-encryption-customer-algorithm": "AES256"}, (400, "InvalidRequest"), False),
    ("CopyObject", {"x-amz-tagging-directive": "REPLACE"}, (200, ""), True),
    ("CreateBucket", {"x-amz-acl": "public-read"}, (400, "InvalidBucketAclWithObjectOwnership"), False),
    ("CreateBucket", {"x-amz-acl": "private"}, (200, ""), True),
    ("PutObject", {"x-amz-acl": "private"}, (400, "AccessControlListNotSupported"), False),
    ("PutObject", {"x-amz-acl": "bucket-owner-full-control"}, (200, ""), True),
]


@pytest.mark.parametrize(("operation", "extra", "answer", "seaweed_agrees"), ABSENT_FEATURE_CASES,
                         ids=[f"{c[0]}-{next(iter(c[1]))}={next(iter(c[1].values()))}" for c in ABSENT_FEATURE_CASES])
def test_headers_about_an_absent_feature(gateway: GatewayProcess, seaweed: Any, bucket: str, operation: str,
                                         extra: dict[str, str], answer: tuple[int, str], seaweed_agrees: bool) -> None:
    s3 = gateway.client()
    s3.put_object(Bucket=bucket, Key="src", Body=b"source")
    status, code = send_with(s3, operation, bucket, extra)
    assert (200 if status == 204 else status, code) == (200 if answer[0] == 204 else answer[0], answer[1])
    if seaweed_agrees:
        direct, direct_bucket = seaweed.client(), seaweed.create_bucket(f"hf-{uuid.uuid4().hex[:12]}")
        direct.put_object(Bucket=direct_bucket, Key="src", Body=b"source")
        status, code = send_with(direct, operation, direct_bucket, extra)
        assert (200 if status == 204 else status, code) == (200 if answer[0] == 204 else answer[0], answer[1])


def test_conditional_reads(gateway: GatewayProcess, bucket: str) -> None:
    s3 = gateway.client()
    etag = s3.put_object(Bucket=bucket, Key="read", Body=b"r")["ETag"]
    with pytest.raises(ClientError) as err:
        s3.get_object(Bucket=bucket, Key="read", IfNoneMatch=etag)
    assert err.value.response["ResponseMetadata"]["HTTPStatusCode"] == 304
    with pytest.raises(ClientError) as err:
        s3.get_object(Bucket=bucket, Key="read", IfMatch='"other"')
    assert err.value.response["Error"]["Code"] == "PreconditionFailed"


def test_refusals_come_from_the_sdk_parameters_too(gateway: GatewayProcess, bucket: str) -> None:
    """The same answers for the SDK's own parameters (what clients actually send)."""
    s3 = gateway.client()
    cases: list[tuple[dict[str, Any], str]] = [
        ({"ServerSideEncryption": "aws:kms"}, "NotImplemented"),
        ({"StorageClass": "GLACIER"}, "InvalidStorageClass"),
        ({"Tagging": "a=b"}, "NotImplemented"),
        ({"ACL": "public-read"}, "AccessControlListNotSupported"),
        ({"ACL": "private"}, "AccessControlListNotSupported"),
        ({"ObjectLockLegalHoldStatus": "ON"}, "InvalidRequest"),
        ({"WebsiteRedirectLocation": "/x"}, "NotImplemented"),
    ]
    for params, code in cases:
        with pytest.raises(ClientError) as err:
            s3.put_object(Bucket=bucket, Key="sdk", Body=b"x", **params)
        assert err.value.response["Error"]["Code"] == code, params
    s3.put_object(Bucket=bucket, Key="sdk", Body=b"x", ServerSideEncryption="AES256", StorageClass="STANDARD",
                  ACL="bucket-owner-full-control", RequestPayer="requester", ExpectedBucketOwner="123456789012")
    assert s3.get_object(Bucket=bucket, Key="sdk")["Body"].read() == b"x"
