"""Small things clients read, through a real ``ferry serve`` in front of SeaweedFS: the canned
``private`` ACL (what many tools send unasked), ListObjectsV2's ``FetchOwner`` and empty
continuation token, and a ``Content-Encoding`` list kept exactly as the client wrote it."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.support.gateway import GatewayProcess, remote_client


def _code(info: pytest.ExceptionInfo[ClientError]) -> tuple[int, str]:
    response = info.value.response
    return response["ResponseMetadata"]["HTTPStatusCode"], response["Error"]["Code"]


def test_private_acl_is_the_only_acl(gateway: GatewayProcess, bucket: str) -> None:
    s3 = gateway.client()
    key = f"acl/{uuid.uuid4().hex}"
    s3.put_object(Bucket=bucket, Key=key, Body=b"x")
    for acl in (s3.get_object_acl(Bucket=bucket, Key=key), s3.get_bucket_acl(Bucket=bucket)):
        assert acl["Owner"]["ID"] == "ferry"
        assert [(g["Grantee"]["ID"], g["Permission"]) for g in acl["Grants"]] == [("ferry", "FULL_CONTROL")]
    s3.put_object_acl(Bucket=bucket, Key=key, ACL="private")
    s3.put_bucket_acl(Bucket=bucket, ACL="private")
    s3.put_object_acl(Bucket=bucket, Key=key, AccessControlPolicy={
        "Owner": {"ID": "ferry"},
        "Grants": [{"Grantee": {"Type": "CanonicalUser", "ID": "ferry"}, "Permission": "FULL_CONTROL"}]})
    for call in (lambda: s3.put_object_acl(Bucket=bucket, Key=key, ACL="public-read"),
                 lambda: s3.put_bucket_acl(Bucket=bucket, ACL="public-read-write"),
                 lambda: s3.put_object_acl(Bucket=bucket, Key=key, GrantRead="uri=http://acs.amazonaws.com/groups/global/AllUsers")):
        with pytest.raises(ClientError) as info:
            call()
        assert _code(info) == (400, "AccessControlListNotSupported")
    with pytest.raises(ClientError) as info:
        s3.get_object_acl(Bucket=bucket, Key=key + "-missing")
    assert _code(info) == (404, "NoSuchKey")
    with pytest.raises(ClientError) as info:
        s3.get_bucket_acl(Bucket=f"no-such-{uuid.uuid4().hex[:12]}")
    assert _code(info) == (404, "NoSuchBucket")


def test_fetch_owner_and_an_empty_continuation_token(gateway: GatewayProcess, bucket: str) -> None:
    s3 = gateway.client()
    prefix = f"list/{uuid.uuid4().hex}/"
    for i in range(3):
        s3.put_object(Bucket=bucket, Key=f"{prefix}{i}", Body=b"x")
    plain = s3.list_objects_v2(Bucket=bucket, Prefix=prefix)
    assert all("Owner" not in c for c in plain["Contents"])
    owned = s3.list_objects_v2(Bucket=bucket, Prefix=prefix, FetchOwner=True)
    assert [c["Owner"]["ID"] for c in owned["Contents"]] == ["ferry"] * 3
    assert all("Owner" in c for c in s3.list_objects(Bucket=bucket, Prefix=prefix)["Contents"])
    first = s3.list_objects_v2(Bucket=bucket, Prefix=prefix, ContinuationToken="", MaxKeys=2)
    assert [c["Key"] for c in first["Contents"]] == [f"{prefix}0", f"{prefix}1"] and first["IsTruncated"]


def test_content_encoding_is_kept_as_sent(gateway: GatewayProcess, seaweed: Any, bucket: str) -> None:
    s3 = gateway.client()
    key = f"ce/{uuid.uuid4().hex}"
    s3.put_object(Bucket=bucket, Key=key, Body=b"x", ContentEncoding="deflate, gzip")
    assert s3.head_object(Bucket=bucket, Key=key)["ContentEncoding"] == "deflate, gzip"
    assert s3.get_object(Bucket=bucket, Key=key)["ContentEncoding"] == "deflate, gzip"
    gateway.flush(bucket)
    assert remote_client(seaweed).head_object(Bucket=bucket, Key=key)["ContentEncoding"] == "deflate, gzip"
