"""Buckets and listings end to end: boto3 -> ferry serve -> SeaweedFS, over HTTP and HTTPS.

Listing tests share one populated bucket (module scope): 25 keys with nested prefixes and
characters that need URL encoding; every pagination must reproduce exactly the sorted set.
"""

from __future__ import annotations

import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

import pytest
from botocore.exceptions import ClientError

from tests.support.gateway import GatewayProcess, remote_client

NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"

KEYS = sorted(
    [f"k{i:02d}" for i in range(8)]
    + [f"dir/a{i}" for i in range(4)]
    + [f"dir/sub/x{i}" for i in range(3)]
    + ["dir/sub/deeper/y", "dir2/z", "e/f/g", "e/h", "top", "with space", "a+b", "ü/ñ", "zz/日本", "zz/q?=&"]
)
assert len(KEYS) == 25


def s3_error(call: Callable[..., Any], **kwargs: Any) -> tuple[int, dict[str, Any]]:
    with pytest.raises(ClientError) as info:
        call(**kwargs)
    return info.value.response["ResponseMetadata"]["HTTPStatusCode"], info.value.response["Error"]


@pytest.fixture(scope="module")
def listed(gateway: GatewayProcess) -> str:
    """A bucket holding KEYS (each object's body is its key), durable on the remote.

    Written through the HTTP gateway but also listed through the HTTPS one, which has its own
    journal (embedded mode): only a flushed write is visible there.
    """
    client = gateway.client()
    name = f"l-{uuid.uuid4().hex[:16]}"
    client.create_bucket(Bucket=name)
    for key in KEYS:
        client.put_object(Bucket=name, Key=key, Body=key.encode())
    gateway.flush(name)
    return name


def expected(prefix: str = "", delimiter: str | None = None, after: str = "") -> tuple[list[str], list[str]]:
    """(keys, common prefixes) S3 would list."""
    keys, prefixes = [], []
    for key in KEYS:
        if not key.startswith(prefix) or key <= after:
            continue
        rest = key[len(prefix):]
        if delimiter and delimiter in rest:
            cp = prefix + rest[: rest.index(delimiter) + len(delimiter)]
            if cp not in prefixes and cp > after:
                prefixes.append(cp)
        else:
            keys.append(key)
    return keys, prefixes


def page_all_v2(s3: Any, bucket: str, max_keys: int, **kwargs: Any) -> tuple[list[str], list[str], int]:
    keys: list[str] = []
    prefixes: list[str] = []
    pages = 0
    token = None
    while True:
        args = dict(Bucket=bucket, MaxKeys=max_keys, **kwargs)
        if token:
            args["ContinuationToken"] = token
        page = s3.list_objects_v2(**args)
        pages += 1
        page_keys = [o["Key"] for o in page.get("Contents", [])]
        page_prefixes = [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        assert len(page_keys) + len(page_prefixes) <= max_keys
        assert page["KeyCount"] == len(page_keys) + len(page_prefixes)
        keys += page_keys
        prefixes += page_prefixes
        if not page["IsTruncated"]:
            assert "NextContinuationToken" not in page
            return keys, prefixes, pages
        token = page["NextContinuationToken"]
        assert pages < 100


# ------------------------------------------------------------------------------------ buckets


def test_bucket_lifecycle(s3: Any) -> None:
    name = f"c-{uuid.uuid4().hex[:16]}"
    assert s3.create_bucket(Bucket=name)["ResponseMetadata"]["HTTPStatusCode"] == 200
    # us-east-1 semantics: creating a bucket you already own succeeds.
    assert s3.create_bucket(Bucket=name)["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert name in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    head = s3.head_bucket(Bucket=name)
    assert head["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert s3.get_bucket_location(Bucket=name)["LocationConstraint"] is None  # us-east-1

    s3.put_object(Bucket=name, Key="blocker", Body=b"x")
    status, error = s3_error(s3.delete_bucket, Bucket=name)
    assert (status, error["Code"]) == (409, "BucketNotEmpty")
    s3.delete_object(Bucket=name, Key="blocker")
    assert s3.delete_bucket(Bucket=name)["ResponseMetadata"]["HTTPStatusCode"] == 204
    with pytest.raises(ClientError) as info:
        s3.head_bucket(Bucket=name)
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    assert name not in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    status, error = s3_error(s3.delete_bucket, Bucket=name)
    assert (status, error["Code"]) == (404, "NoSuchBucket")


def test_bucket_with_an_object_and_an_open_upload_is_not_empty(s3: Any, bucket: str) -> None:
    """An object keeps the bucket (and its uploads); a bucket holding only uploads in progress is
    deleted with them, as S3 does (tests/integration/test_abandoned_uploads.py)."""
    s3.put_object(Bucket=bucket, Key="kept", Body=b"x")
    upload = s3.create_multipart_upload(Bucket=bucket, Key="pending")["UploadId"]
    status, error = s3_error(s3.delete_bucket, Bucket=bucket)
    assert (status, error["Code"]) == (409, "BucketNotEmpty")
    assert [u["UploadId"] for u in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", [])] == [upload]
    s3.abort_multipart_upload(Bucket=bucket, Key="pending", UploadId=upload)
    s3.delete_object(Bucket=bucket, Key="kept")


def test_missing_bucket(s3: Any) -> None:
    missing = f"m-{uuid.uuid4().hex[:16]}"
    with pytest.raises(ClientError) as info:
        s3.head_bucket(Bucket=missing)
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    for call in (s3.get_bucket_location, s3.list_objects_v2, s3.list_objects, s3.list_object_versions,
                 s3.list_multipart_uploads):
        status, error = s3_error(call, Bucket=missing)
        assert (status, error["Code"]) == (404, "NoSuchBucket"), call


@pytest.mark.parametrize("name", ["Upper", "a_b", "ab", "-ab", "a..b", "192.168.1.1", "x" * 64])
def test_invalid_bucket_names(s3: Any, name: str) -> None:
    with pytest.raises(ClientError) as info:
        s3.create_bucket(Bucket=name)
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    assert info.value.response["Error"]["Code"] == "InvalidBucketName"


UNSUPPORTED: list[tuple[str, dict[str, Any]]] = [
    ("get_bucket_policy", {}),
    ("put_bucket_tagging", {"Tagging": {"TagSet": [{"Key": "a", "Value": "b"}]}}),
    ("get_bucket_tagging", {}),
    ("get_bucket_cors", {}),
    ("get_bucket_lifecycle_configuration", {}),
    ("get_bucket_website", {}),
    ("get_bucket_encryption", {}),
    ("get_object_tagging", {"Key": "k"}),
    ("get_object_retention", {"Key": "k"}),
]


@pytest.mark.parametrize(("operation", "kwargs"), UNSUPPORTED, ids=[op for op, _ in UNSUPPORTED])
def test_unsupported_operations_are_not_implemented(gateway: GatewayProcess, bucket: str, operation: str,
                                                    kwargs: dict[str, Any]) -> None:
    s3 = gateway.client()
    raw: dict[str, Any] = {}
    s3.meta.events.register(f"after-call.s3.{s3.meta.method_to_api_mapping[operation]}",
                            lambda http_response, **_: raw.update(body=http_response.content,
                                                                  headers=http_response.headers))
    status, error = s3_error(getattr(s3, operation), Bucket=bucket, **kwargs)
    assert (status, error["Code"]) == (501, "NotImplemented")
    assert raw["headers"]["content-type"] == "application/xml"
    assert ET.fromstring(raw["body"]).findtext("Code") == "NotImplemented"


# ------------------------------------------------------------------------------------ ListObjectsV2


def test_list_everything(s3: Any, listed: str) -> None:
    page = s3.list_objects_v2(Bucket=listed)
    assert [o["Key"] for o in page["Contents"]] == KEYS
    assert page["KeyCount"] == 25 and not page["IsTruncated"]
    for item in page["Contents"]:
        assert item["Size"] == len(item["Key"].encode())
        assert item["ETag"].startswith('"') and len(item["ETag"]) == 34
        assert item["StorageClass"] == "STANDARD"


@pytest.mark.parametrize(("prefix", "delimiter"), [
    ("dir/", None), ("dir/", "/"), ("", "/"), ("dir/sub/", "/"), ("d", "/"), ("zz/", None), ("nothing", "/"),
    ("e", "f"), ("", "sub"),
])
def test_prefix_and_delimiter(s3: Any, listed: str, prefix: str, delimiter: str | None) -> None:
    args = {"Prefix": prefix} | ({"Delimiter": delimiter} if delimiter else {})
    page = s3.list_objects_v2(Bucket=listed, **args)
    keys, prefixes = expected(prefix, delimiter)
    assert [o["Key"] for o in page.get("Contents", [])] == keys
    assert [p["Prefix"] for p in page.get("CommonPrefixes", [])] == prefixes
    assert page["Prefix"] == prefix


@pytest.mark.parametrize("after", ["", "dir/sub/", "k02", "k99", "zz/", "\U0010ffff"])
def test_start_after(s3: Any, listed: str, after: str) -> None:
    page = s3.list_objects_v2(Bucket=listed, StartAfter=after)
    assert [o["Key"] for o in page.get("Contents", [])] == expected(after=after)[0]


def test_max_keys(s3: Any, listed: str) -> None:
    page = s3.list_objects_v2(Bucket=listed, MaxKeys=3)
    assert [o["Key"] for o in page["Contents"]] == KEYS[:3]
    assert page["IsTruncated"] and page["MaxKeys"] == 3 and page["KeyCount"] == 3
    empty = s3.list_objects_v2(Bucket=listed, MaxKeys=0)
    assert "Contents" not in empty and not empty["IsTruncated"]
    status, error = s3_error(s3.list_objects_v2, Bucket=listed, MaxKeys=-1)
    assert (status, error["Code"]) == (400, "InvalidArgument")


@pytest.mark.parametrize("max_keys", [1, 2, 3, 7])
def test_pagination_without_delimiter(s3: Any, listed: str, max_keys: int) -> None:
    keys, prefixes, pages = page_all_v2(s3, listed, max_keys)
    assert keys == KEYS and prefixes == []
    assert pages == -(-25 // max_keys)


@pytest.mark.parametrize("max_keys", [1, 2, 3, 7])
@pytest.mark.parametrize("prefix", ["", "dir/"])
def test_pagination_with_delimiter(s3: Any, listed: str, max_keys: int, prefix: str) -> None:
    keys, prefixes, _ = page_all_v2(s3, listed, max_keys, Delimiter="/", Prefix=prefix)
    want_keys, want_prefixes = expected(prefix, "/")
    assert keys == want_keys
    assert prefixes == want_prefixes  # in order, and never repeated across pages


def test_paginator_and_start_after_with_token(s3: Any, listed: str) -> None:
    paginator = s3.get_paginator("list_objects_v2")
    pages = list(paginator.paginate(Bucket=listed, PaginationConfig={"PageSize": 4}))
    assert [o["Key"] for p in pages for o in p.get("Contents", [])] == KEYS
    assert len(pages) == 7
    pages = list(paginator.paginate(
        Bucket=listed, Delimiter="/", StartAfter="dir2/", PaginationConfig={"PageSize": 2}))
    keys = [o["Key"] for p in pages for o in p.get("Contents", [])]
    prefixes = [c["Prefix"] for p in pages for c in p.get("CommonPrefixes", [])]
    want_keys, want_prefixes = expected("", "/", after="dir2/")
    assert (keys, prefixes) == (want_keys, want_prefixes)


@pytest.mark.parametrize("token", ["garbage!!", "Zm9vOmJhcg", "f1", "7u0=", "ZjE67aCA"])
def test_bad_continuation_token(s3: Any, listed: str, token: str) -> None:
    status, error = s3_error(s3.list_objects_v2, Bucket=listed, ContinuationToken=token)
    assert (status, error["Code"]) == (400, "InvalidArgument")


def _raw_listing(gateway: GatewayProcess, bucket: str, **kwargs: Any) -> ET.Element:
    """The XML the gateway sent (boto3 decodes url-encoded keys itself, hiding the encoding)."""
    return _raw_xml(gateway.client(), "ListObjectsV2", bucket, **kwargs)


def _raw_xml(s3: Any, operation: str, bucket: str, **kwargs: Any) -> ET.Element:
    """The XML a listing ``operation`` answered, from any client (the gateway's or the remote's)."""
    captured: dict[str, bytes] = {}
    s3.meta.events.register(f"after-call.s3.{operation}",
                            lambda http_response, **_: captured.update(body=http_response.content))
    if "EncodingType" not in kwargs:
        # boto3 adds encoding-type=url on its own; take it off the signed URL.
        def strip(request: Any, **_: Any) -> None:
            request.url = request.url.replace("&encoding-type=url", "").replace("encoding-type=url&", "")

        s3.meta.events.register(f"before-sign.s3.{operation}", strip)
    call = s3.list_objects_v2 if operation == "ListObjectsV2" else s3.list_objects
    call(Bucket=bucket, **kwargs)
    return ET.fromstring(captured["body"])


ECHOED = ("Prefix", "Delimiter", "StartAfter", "Marker", "ContinuationToken", "EncodingType")


def _echoed(root: ET.Element) -> dict[str, str | None]:
    return {name: root.findtext(f"{NS}{name}") for name in ECHOED if root.find(f"{NS}{name}") is not None}


def test_listing_echoes_the_request_raw_unless_url_encoding_was_asked(gateway: GatewayProcess, bucket: str,
                                                                      seaweed: Any) -> None:
    """Prefix, Delimiter, StartAfter, Marker come back as sent (XML-escaped, a newline a newline)
    without encoding-type, percent-encoded with encoding-type=url; a ContinuationToken sent empty
    comes back empty, one not sent not at all: what SeaweedFS directly answers (and AWS documents)."""
    gateway.client().put_object(Bucket=bucket, Key="a\nb/c", Body=b"x")
    v2 = {"Prefix": "a\nb", "Delimiter": "/", "StartAfter": "a\n", "ContinuationToken": ""}
    v1 = {"Prefix": "a\nb", "Delimiter": "\n", "Marker": "a\n"}
    for client in (gateway.client(), remote_client(seaweed)):
        assert _echoed(_raw_xml(client, "ListObjectsV2", bucket, **v2)) == v2, client.meta.endpoint_url
        assert _echoed(_raw_xml(client, "ListObjects", bucket, **v1)) == v1, client.meta.endpoint_url
        assert "ContinuationToken" not in _echoed(_raw_xml(client, "ListObjectsV2", bucket)), client.meta.endpoint_url
    s3 = gateway.client()
    assert _echoed(_raw_xml(s3, "ListObjectsV2", bucket, EncodingType="url", **v2)) == {
        "Prefix": "a%0Ab", "Delimiter": "/", "StartAfter": "a%0A", "ContinuationToken": "", "EncodingType": "url"}
    assert _echoed(_raw_xml(s3, "ListObjects", bucket, EncodingType="url", **v1)) == {
        "Prefix": "a%0Ab", "Delimiter": "%0A", "Marker": "a%0A", "EncodingType": "url"}


def test_encoding_type_url(gateway: GatewayProcess, s3: Any, listed: str) -> None:
    root = _raw_listing(gateway, listed, EncodingType="url", Prefix="zz/", Delimiter="/")
    assert root.findtext(f"{NS}EncodingType") == "url"
    raw_keys = [c.findtext(f"{NS}Key") for c in root.iter(f"{NS}Contents")]
    assert raw_keys == ["zz/q%3F%3D%26", "zz/%E6%97%A5%E6%9C%AC"]
    assert [unquote(k) for k in raw_keys] == ["zz/q?=&", "zz/日本"]
    root = _raw_listing(gateway, listed, EncodingType="url", Delimiter="/")
    raw_prefixes = [c.findtext(f"{NS}Prefix") for c in root.iter(f"{NS}CommonPrefixes")]
    assert "%C3%BC/" in raw_prefixes
    raw_keys = [c.findtext(f"{NS}Key") for c in root.iter(f"{NS}Contents")]
    assert "with%20space" in raw_keys and "a%2Bb" in raw_keys
    # Asked for explicitly, boto3 leaves the keys encoded; decoded they are the exact keys.
    page = s3.list_objects_v2(Bucket=listed, EncodingType="url")
    assert [unquote(o["Key"]) for o in page["Contents"]] == KEYS


def test_without_encoding_keys_are_plain_xml_text(gateway: GatewayProcess, listed: str) -> None:
    root = _raw_listing(gateway, listed, Prefix="zz/")
    assert root.findtext(f"{NS}EncodingType") is None
    assert [c.findtext(f"{NS}Key") for c in root.iter(f"{NS}Contents")] == ["zz/q?=&", "zz/日本"]


def test_bad_encoding_type(s3: Any, listed: str) -> None:
    status, error = s3_error(s3.list_objects_v2, Bucket=listed, EncodingType="base64")
    assert (status, error["Code"]) == (400, "InvalidArgument")


# ------------------------------------------------------------------------------------ ListObjects v1


@pytest.mark.parametrize("max_keys", [1, 4, 7])
@pytest.mark.parametrize("delimiter", [None, "/"])
def test_list_objects_v1_marker_pagination(s3: Any, listed: str, max_keys: int,
                                           delimiter: str | None) -> None:
    keys: list[str] = []
    prefixes: list[str] = []
    marker = ""
    for _ in range(100):
        args: dict[str, Any] = {"Bucket": listed, "MaxKeys": max_keys, "Marker": marker}
        if delimiter:
            args["Delimiter"] = delimiter
        page = s3.list_objects(**args)
        assert page["Marker"] == marker
        keys += [o["Key"] for o in page.get("Contents", [])]
        prefixes += [p["Prefix"] for p in page.get("CommonPrefixes", [])]
        if not page["IsTruncated"]:
            break
        if delimiter:
            assert page["NextMarker"]  # S3 returns NextMarker when a delimiter is given
        marker = page.get("NextMarker") or keys[-1]
    assert (keys, prefixes) == expected("", delimiter)


def test_list_objects_v1_paginator(s3: Any, listed: str) -> None:
    pages = s3.get_paginator("list_objects").paginate(Bucket=listed, PaginationConfig={"PageSize": 6})
    assert [o["Key"] for p in pages for o in p.get("Contents", [])] == KEYS


# ------------------------------------------------------------------------------------ versions


def test_list_object_versions_of_an_unversioned_bucket(s3: Any, listed: str) -> None:
    page = s3.list_object_versions(Bucket=listed)
    assert [v["Key"] for v in page["Versions"]] == KEYS
    assert {v["VersionId"] for v in page["Versions"]} == {"null"}
    assert all(v["IsLatest"] for v in page["Versions"])
    assert not page.get("DeleteMarkers")
    paginator = s3.get_paginator("list_object_versions")
    pages = paginator.paginate(Bucket=listed, PaginationConfig={"PageSize": 4})
    assert [v["Key"] for p in pages for v in p.get("Versions", [])] == KEYS
    page = s3.list_object_versions(Bucket=listed, Prefix="dir/", Delimiter="/")
    keys, prefixes = expected("dir/", "/")
    assert [v["Key"] for v in page["Versions"]] == keys
    assert [p["Prefix"] for p in page["CommonPrefixes"]] == prefixes
    assert s3.get_bucket_versioning(Bucket=listed).get("Status") is None
