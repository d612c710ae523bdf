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


def put_with(gateway: GatewayProcess, bucket: str, extra: dict[str, str], key: str | None = None) -> tuple[int, str]:
    """A PutObject carrying ``extra`` headers (signed with the request): (status, error code)."""
    s3 = gateway.client()

    def add(request: Any, **_: Any) -> None:
        for name, value in extra.items():
            request.headers[name] = value

    s3.meta.events.register("before-sign.s3.PutObject", add)
    try:
        s3.put_object(Bucket=bucket, Key=key or f"k-{uuid.uuid4().hex}", Body=b"family")
    except ClientError as exc:
        return int(exc.response["ResponseMetadata"]["HTTPStatusCode"]), str(exc.response["Error"]["Code"])
    return 200, ""


def expected(family: HeaderFamily) -> tuple[int, str]:
    if family.status == "supported" or (family.status == "accepted" and not family.values):
        return 200, ""
    assert family.error is not None
    return ERROR_TABLE[family.error][0], family.error


@pytest.mark.parametrize("family", [f for f in FAMILIES if f.probe], ids=lambda f: f.name)
def test_each_family_answers_as_documented(gateway: GatewayProcess, bucket: str, family: HeaderFamily) -> None:
    assert put_with(gateway, bucket, family.probe) == expected(family)
    if family.status == "accepted" and family.values:
        name = next(iter(family.probe))
        assert put_with(gateway, bucket, {name: family.values[0]}) == (200, ""), family.values[0]


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
