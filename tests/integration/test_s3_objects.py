"""Object operations end to end: boto3 (and raw signed requests) -> ferry serve -> SeaweedFS.

Every test runs over HTTP and HTTPS (the ``s3`` / ``gw`` fixtures); over HTTPS boto3 sends
aws-chunked bodies with CRC32 trailers. What the gateway stored is checked through the gateway
and directly on the remote (``remote_client(seaweed)``).
"""

from __future__ import annotations

import base64
import hashlib
import re
import socket
import ssl
import zlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from email.message import Message
from http.client import HTTPConnection, HTTPSConnection
from typing import Any

import pytest
from awscrt import checksums as crt
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from tests.support.gateway import ACCESS_KEY, SECRET_KEY, GatewayProcess, flush_all, remote_client

# ------------------------------------------------------------------------------------ helpers


@pytest.fixture(params=["http", "https"])
def gw(request: pytest.FixtureRequest) -> GatewayProcess:
    """The gateway process itself (for raw requests), over HTTP and over HTTPS."""
    return request.getfixturevalue("gateway" if request.param == "http" else "gateway_tls")


def s3_error(call: Callable[..., Any], **kwargs: Any) -> tuple[int, dict[str, Any], dict[str, str]]:
    """(status, parsed <Error>, response headers) of a call that must fail."""
    with pytest.raises(ClientError) as info:
        call(**kwargs)
    resp = info.value.response
    return resp["ResponseMetadata"]["HTTPStatusCode"], resp["Error"], resp["ResponseMetadata"]["HTTPHeaders"]


def connect(gw: GatewayProcess, timeout: float = 10.0) -> HTTPConnection:
    if gw.tls:
        return HTTPSConnection("127.0.0.1", gw.port, timeout=timeout, context=gw.tls.client_context())
    return HTTPConnection("127.0.0.1", gw.port, timeout=timeout)


def sign(gw: GatewayProcess, method: str, target: str, headers: dict[str, str], body: bytes = b"",
         payload: str | None = None) -> dict[str, str]:
    """SigV4 headers (botocore's signer) for ``target`` (percent-encoded path + query)."""
    headers = {"Host": f"127.0.0.1:{gw.port}", **headers,
               "x-amz-content-sha256": payload or hashlib.sha256(body).hexdigest()}
    if "Transfer-Encoding" not in headers and "Content-Length" not in headers:
        headers["Content-Length"] = str(len(body))
    forced = headers["x-amz-content-sha256"]

    class _Auth(S3SigV4Auth):
        def payload(self, request: Any) -> str:
            return forced

    request = AWSRequest(method=method, url=gw.endpoint + target, headers=headers, data=body)
    _Auth(Credentials(ACCESS_KEY, SECRET_KEY), "s3", "us-east-1").add_auth(request)
    return dict(request.headers.items())


def signed_request(gw: GatewayProcess, method: str, target: str, headers: dict[str, str] | None = None,
                   body: bytes = b"", payload: str | None = None, wire: bytes | None = None,
                   ) -> tuple[int, Message, bytes]:
    """One signed request over http.client: header values go out as UTF-8 bytes, the body as
    ``wire`` if given (e.g. chunked framing) else ``body``."""
    headers = dict(headers or {})
    if wire is not None and "Transfer-Encoding" not in headers:
        headers["Content-Length"] = str(len(wire))
    signed = sign(gw, method, target, headers, body, payload)
    conn = connect(gw)
    try:
        conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
        for name, value in signed.items():
            conn.putheader(name, value.encode("utf-8"))
        conn.endheaders()
        data = body if wire is None else wire
        if data:
            conn.send(data)
        resp = conn.getresponse()
        return resp.status, resp.headers, resp.read()
    finally:
        conn.close()


def checksum_of(algorithm: str, data: bytes) -> str:
    raw = {
        "CRC32": lambda: zlib.crc32(data).to_bytes(4, "big"),
        "CRC32C": lambda: crt.crc32c(data).to_bytes(4, "big"),
        "CRC64NVME": lambda: crt.crc64nvme(data).to_bytes(8, "big"),
        "SHA1": lambda: hashlib.sha1(data).digest(),
        "SHA256": lambda: hashlib.sha256(data).digest(),
    }[algorithm]()
    return base64.b64encode(raw).decode()


def md5_b64(data: bytes) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


BODY = b"0123456789abcdefghij"  # 20 bytes
DEFAULT_TYPES = ("binary/octet-stream", "application/octet-stream")  # S3 / SeaweedFS


@pytest.fixture
def obj(s3: Any, bucket: str) -> tuple[Any, str, str, str]:
    """(client, bucket, key, quoted etag) of a 20-byte object."""
    etag = s3.put_object(Bucket=bucket, Key="obj.txt", Body=BODY)["ETag"]
    return s3, bucket, "obj.txt", etag


# ------------------------------------------------------------------------------------ basics


def test_put_get_head_delete(s3: Any, bucket: str) -> None:
    data = bytes(range(256)) * 40
    put = s3.put_object(Bucket=bucket, Key="dir/basic.bin", Body=data)
    assert put["ETag"] == f'"{hashlib.md5(data).hexdigest()}"'

    got = s3.get_object(Bucket=bucket, Key="dir/basic.bin")
    assert got["Body"].read() == data
    assert got["ContentLength"] == len(data)
    assert got["ETag"] == put["ETag"]
    assert got["ContentType"] in DEFAULT_TYPES
    assert got["AcceptRanges"] == "bytes"

    head = s3.head_object(Bucket=bucket, Key="dir/basic.bin")
    assert head["ContentLength"] == len(data)
    assert head["ETag"] == put["ETag"]
    assert abs(head["LastModified"] - datetime.now(UTC)) < timedelta(minutes=5)

    assert s3.delete_object(Bucket=bucket, Key="dir/basic.bin")["ResponseMetadata"]["HTTPStatusCode"] == 204
    status, error, _ = s3_error(s3.get_object, Bucket=bucket, Key="dir/basic.bin")
    assert (status, error["Code"]) == (404, "NoSuchKey")
    # Deleting what is not there is still a success, as in S3.
    assert s3.delete_object(Bucket=bucket, Key="dir/basic.bin")["ResponseMetadata"]["HTTPStatusCode"] == 204


def test_zero_byte_object(s3: Any, bucket: str, seaweed: Any) -> None:
    put = s3.put_object(Bucket=bucket, Key="empty", Body=b"")
    assert put["ETag"] == '"d41d8cd98f00b204e9800998ecf8427e"'
    got = s3.get_object(Bucket=bucket, Key="empty")
    assert got["Body"].read() == b""
    assert got["ContentLength"] == 0
    head = s3.head_object(Bucket=bucket, Key="empty")
    assert head["ContentLength"] == 0
    # aws-chunked framing (HTTPS) must not leak into the stored object.
    assert "ContentEncoding" not in head
    assert "ContentEncoding" not in remote_client(seaweed).head_object(Bucket=bucket, Key="empty")
    # A range on an empty object is ignored (there is nothing to be unsatisfiable about).
    assert s3.get_object(Bucket=bucket, Key="empty", Range="bytes=-5")["Body"].read() == b""


# ------------------------------------------------------------------------------------ ranges


@pytest.mark.parametrize(("header", "expected", "content_range"), [
    ("bytes=0-9", BODY[:10], "bytes 0-9/20"),
    ("bytes=10-", BODY[10:], "bytes 10-19/20"),
    ("bytes=-5", BODY[-5:], "bytes 15-19/20"),
    ("bytes=5-5", BODY[5:6], "bytes 5-5/20"),
    ("bytes=15-1000", BODY[15:], "bytes 15-19/20"),
    ("bytes=-100", BODY, "bytes 0-19/20"),
])
def test_range(obj: tuple[Any, str, str, str], header: str, expected: bytes, content_range: str) -> None:
    s3, bucket, key, _ = obj
    got = s3.get_object(Bucket=bucket, Key=key, Range=header)
    assert got["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert got["Body"].read() == expected
    assert got["ContentRange"] == content_range
    assert got["ContentLength"] == len(expected)
    head = s3.head_object(Bucket=bucket, Key=key, Range=header)
    assert head["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert head["ContentLength"] == len(expected)


@pytest.mark.parametrize("header", ["bytes=20-", "bytes=100-200", "bytes=-0"])
def test_unsatisfiable_range_is_416_with_xml(obj: tuple[Any, str, str, str], header: str) -> None:
    s3, bucket, key, _ = obj
    status, error, headers = s3_error(s3.get_object, Bucket=bucket, Key=key, Range=header)
    assert status == 416
    assert error["Code"] == "InvalidRange"
    assert headers["content-type"] == "application/xml"
    with pytest.raises(ClientError) as info:
        s3.head_object(Bucket=bucket, Key=key, Range=header)
    assert info.value.response["ResponseMetadata"]["HTTPStatusCode"] == 416


@pytest.mark.parametrize("header", ["bytes=abc", "bytes=5-2", "bytes=0-1,4-5", "items=0-1", "bytes=",
                                    "bytes=-"])
def test_invalid_range_syntax_is_ignored(obj: tuple[Any, str, str, str], header: str) -> None:
    s3, bucket, key, _ = obj
    got = s3.get_object(Bucket=bucket, Key=key, Range=header)
    assert got["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert "ContentRange" not in got
    assert got["Body"].read() == BODY


# ------------------------------------------------------------------------------------ conditions


def test_conditional_get_and_head(obj: tuple[Any, str, str, str]) -> None:
    s3, bucket, key, etag = obj
    modified = s3.head_object(Bucket=bucket, Key=key)["LastModified"]
    before, after = modified - timedelta(hours=1), modified + timedelta(hours=1)

    for call in (s3.get_object, s3.head_object):
        for ok in ({"IfMatch": etag}, {"IfMatch": "*"}, {"IfNoneMatch": '"0000"'},
                   {"IfModifiedSince": before},
                   {"IfUnmodifiedSince": after}):
            assert call(Bucket=bucket, Key=key, **ok)["ResponseMetadata"]["HTTPStatusCode"] == 200, ok

        status, error, _ = s3_error(call, Bucket=bucket, Key=key, IfMatch='"0000"')
        assert status == 412
        status, _, headers = s3_error(call, Bucket=bucket, Key=key, IfNoneMatch=etag)
        assert status == 304
        assert headers.get("etag") == etag
        status, _, _ = s3_error(call, Bucket=bucket, Key=key, IfModifiedSince=after)
        assert status == 304
        status, _, _ = s3_error(call, Bucket=bucket, Key=key, IfUnmodifiedSince=before)
        assert status == 412
        # S3 precedence: If-Match true wins over If-Unmodified-Since false...
        ok = call(Bucket=bucket, Key=key, IfMatch=etag, IfUnmodifiedSince=before)
        assert ok["ResponseMetadata"]["HTTPStatusCode"] == 200
        # ...and If-None-Match false gives 304 even with If-Modified-Since true.
        status, _, _ = s3_error(call, Bucket=bucket, Key=key, IfNoneMatch=etag, IfModifiedSince=before)
        assert status == 304

    status, error, _ = s3_error(s3.get_object, Bucket=bucket, Key=key, IfMatch='"0000"')
    assert error["Code"] == "PreconditionFailed"


# ------------------------------------------------------------------------------------ headers


def test_response_overrides(obj: tuple[Any, str, str, str]) -> None:
    s3, bucket, key, _ = obj
    stored_type = s3.head_object(Bucket=bucket, Key=key)["ContentType"]
    expires = datetime(2031, 1, 2, 3, 4, 5, tzinfo=UTC)
    overrides = dict(ResponseContentType="text/x-test", ResponseContentLanguage="fr-CA",
                     ResponseCacheControl="no-store",
                     ResponseContentDisposition='attachment; filename="a b.txt"',
                     ResponseContentEncoding="identity", ResponseExpires=expires)
    for call in (s3.get_object, s3.head_object):
        got = call(Bucket=bucket, Key=key, **overrides)
        assert got["ContentType"] == "text/x-test"
        assert got["ContentLanguage"] == "fr-CA"
        assert got["CacheControl"] == "no-store"
        assert got["ContentDisposition"] == 'attachment; filename="a b.txt"'
        assert got["ContentEncoding"] == "identity"
        assert got["ExpiresString"] == "Thu, 02 Jan 2031 03:04:05 GMT"
    # Overrides change the answer, never the object.
    assert s3.head_object(Bucket=bucket, Key=key)["ContentType"] == stored_type


CONTENT = dict(ContentType="text/plain; charset=utf-8", ContentEncoding="gzip",
               CacheControl="max-age=60, public",
               ContentDisposition='inline; filename="report.txt"', ContentLanguage="de-DE",
               Expires=datetime(2037, 10, 21, 7, 28, tzinfo=UTC), Metadata={"color": "blue", "n": "1"})


def _check_content(head: dict[str, Any]) -> None:
    assert head["ContentType"] == CONTENT["ContentType"]
    assert head["ContentEncoding"] == "gzip"  # verbatim, never "gzip,aws-chunked"
    assert head["CacheControl"] == CONTENT["CacheControl"]
    assert head["ContentDisposition"] == CONTENT["ContentDisposition"]
    assert head["ContentLanguage"] == "de-DE"
    assert head["ExpiresString"] == "Wed, 21 Oct 2037 07:28:00 GMT"
    assert head["Metadata"] == {"color": "blue", "n": "1"}


def test_content_headers_and_metadata_survive_to_the_remote(s3: Any, bucket: str, seaweed: Any) -> None:
    data = zlib.compress(b"hello " * 100)
    s3.put_object(Bucket=bucket, Key="content", Body=data, **CONTENT)
    _check_content(s3.head_object(Bucket=bucket, Key="content"))
    got = s3.get_object(Bucket=bucket, Key="content")
    _check_content(got)
    assert got["Body"].read() == data  # the gateway never decodes Content-Encoding
    _check_content(remote_client(seaweed).head_object(Bucket=bucket, Key="content"))


@pytest.mark.parametrize("value", ["héllo wörld", "✓ 日本語 🎉", "ascii only"])
def test_non_ascii_metadata_bytes_round_trip(gw: GatewayProcess, bucket: str, seaweed: Any,
                                             value: str) -> None:
    """boto3 refuses non-ASCII metadata, other SDKs send raw UTF-8 bytes: they must come back unchanged."""
    target = f"/{bucket}/meta-utf8"
    headers = {"x-amz-meta-label": value, "Content-Type": "text/plain"}
    status, _, body = signed_request(gw, "PUT", target, headers, b"payload")
    assert status == 200, body
    for method in ("GET", "HEAD"):
        status, headers, body = signed_request(gw, method, target)
        assert status == 200
        raw = headers["x-amz-meta-label"].encode("latin-1")  # http.client reads header bytes as latin-1
        assert raw == value.encode("utf-8")
    remote = remote_client(seaweed).head_object(Bucket=bucket, Key="meta-utf8")["ResponseMetadata"]["HTTPHeaders"]
    assert remote["x-amz-meta-label"].encode("latin-1") == value.encode("utf-8")
    # The same through CopyObject (REPLACE) and a multipart upload's initiation.
    status, _, body = signed_request(gw, "PUT", f"/{bucket}/meta-copy", {
        "x-amz-copy-source": f"/{bucket}/meta-utf8", "x-amz-metadata-directive": "REPLACE",
        "x-amz-meta-label": value + "-copy"})
    assert status == 200, body
    status, _, body = signed_request(gw, "POST", f"/{bucket}/meta-mpu?uploads", {"x-amz-meta-label": value})
    assert status == 200, body
    upload_id = re.search(rb"<UploadId>([^<]+)</UploadId>", body).group(1).decode()  # type: ignore[union-attr]
    s3 = gw.client()
    etag = s3.upload_part(Bucket=bucket, Key="meta-mpu", UploadId=upload_id, PartNumber=1, Body=b"p")["ETag"]
    s3.complete_multipart_upload(Bucket=bucket, Key="meta-mpu", UploadId=upload_id,
                                 MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": etag}]})
    for key, expected in (("meta-copy", value + "-copy"), ("meta-mpu", value)):
        for client in (s3, remote_client(seaweed)):
            headers = client.head_object(Bucket=bucket, Key=key)["ResponseMetadata"]["HTTPHeaders"]
            assert headers["x-amz-meta-label"].encode("latin-1") == expected.encode("utf-8"), (key, client)


def test_metadata_too_large(s3: Any, bucket: str) -> None:
    status, error, _ = s3_error(s3.put_object, Bucket=bucket, Key="big-meta", Body=b"x",
                                Metadata={"a": "x" * 2100})
    assert (status, error["Code"]) == (400, "MetadataTooLarge")


# ------------------------------------------------------------------------------------ digests


def test_content_md5(s3: Any, bucket: str) -> None:
    data = b"md5 checked body"
    assert s3.put_object(Bucket=bucket, Key="md5", Body=data, ContentMD5=md5_b64(data))["ETag"] == \
        f'"{hashlib.md5(data).hexdigest()}"'
    put = s3.put_object
    status, error, _ = s3_error(put, Bucket=bucket, Key="md5-bad", Body=data, ContentMD5=md5_b64(b"x"))
    assert (status, error["Code"]) == (400, "BadDigest")
    status, error, _ = s3_error(put, Bucket=bucket, Key="md5-bad", Body=data, ContentMD5="not-base64!")
    assert (status, error["Code"]) == (400, "InvalidDigest")
    status, error, _ = s3_error(s3.head_object, Bucket=bucket, Key="md5-bad")
    assert status == 404  # nothing was stored


ALGORITHMS = ["CRC32", "CRC32C", "SHA1", "SHA256", "CRC64NVME"]


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_flexible_checksums(s3: Any, bucket: str, seaweed: Any, algorithm: str) -> None:
    data = b"checksummed payload " * 1000
    expected = checksum_of(algorithm, data)
    put = s3.put_object(Bucket=bucket, Key=f"ck-{algorithm}", Body=data, ChecksumAlgorithm=algorithm)
    assert put[f"Checksum{algorithm}"] == expected
    head = s3.head_object(Bucket=bucket, Key=f"ck-{algorithm}", ChecksumMode="ENABLED")
    assert head[f"Checksum{algorithm}"] == expected
    got = s3.get_object(Bucket=bucket, Key=f"ck-{algorithm}", ChecksumMode="ENABLED")
    assert got[f"Checksum{algorithm}"] == expected
    assert got["Body"].read() == data  # boto3 validates the checksum while reading
    remote = remote_client(seaweed).head_object(Bucket=bucket, Key=f"ck-{algorithm}", ChecksumMode="ENABLED")
    assert remote[f"Checksum{algorithm}"] == expected
    # A range is not the object: no full-object checksum on a 206.
    part = s3.get_object(Bucket=bucket, Key=f"ck-{algorithm}", Range="bytes=0-4", ChecksumMode="ENABLED")
    assert f"Checksum{algorithm}" not in part


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_wrong_checksum_is_bad_digest(s3: Any, bucket: str, algorithm: str) -> None:
    data = b"the real body"
    wrong = checksum_of(algorithm, b"another body")
    status, error, _ = s3_error(s3.put_object, Bucket=bucket, Key=f"bad-{algorithm}", Body=data,
                                **{f"Checksum{algorithm}": wrong})
    assert (status, error["Code"]) == (400, "BadDigest")
    status, error, _ = s3_error(s3.head_object, Bucket=bucket, Key=f"bad-{algorithm}")
    assert status == 404


def test_checksum_of_the_wrong_length_is_bad_digest_and_not_base64_is_invalid(s3: Any, bucket: str) -> None:
    """Issue 25 (conformance suite): the base64 of a hex SHA256 (64 bytes) is a digest that cannot
    match, BadDigest as S3 answers (was InvalidRequest); a value that is not base64 stays
    InvalidRequest. Nothing is stored either way."""
    import base64

    hex_as_b64 = base64.b64encode(hashlib.sha256(b"the real body").hexdigest().encode()).decode()
    status, error, _ = s3_error(s3.put_object, Bucket=bucket, Key="bad-len", Body=b"the real body",
                                ChecksumAlgorithm="SHA256", ChecksumSHA256=hex_as_b64)
    assert (status, error["Code"]) == (400, "BadDigest")
    status, error, _ = s3_error(s3.put_object, Bucket=bucket, Key="bad-len", Body=b"the real body",
                                ChecksumAlgorithm="SHA256", ChecksumSHA256="!!not base64!!")
    assert (status, error["Code"]) == (400, "InvalidRequest")
    status, error, _ = s3_error(s3.head_object, Bucket=bucket, Key="bad-len")
    assert status == 404


# ------------------------------------------------------------------------------------ versions


def test_version_id_null_names_the_current_object(obj: tuple[Any, str, str, str]) -> None:
    s3, bucket, key, etag = obj
    assert s3.get_object(Bucket=bucket, Key=key, VersionId="null")["Body"].read() == BODY
    assert s3.head_object(Bucket=bucket, Key=key, VersionId="null")["ETag"] == etag
    status, error, _ = s3_error(s3.get_object, Bucket=bucket, Key=key, VersionId="3HL4kqtJlcpXroDTDmJ")
    assert (status, error["Code"]) == (404, "NoSuchVersion")
    status, error, _ = s3_error(s3.delete_object, Bucket=bucket, Key=key, VersionId="3HL4kqtJlcpXroDTDmJ")
    assert (status, error["Code"]) == (404, "NoSuchVersion")
    deleted = s3.delete_object(Bucket=bucket, Key=key, VersionId="null")
    assert deleted["ResponseMetadata"]["HTTPStatusCode"] == 204
    status, error, _ = s3_error(s3.get_object, Bucket=bucket, Key=key)
    assert error["Code"] == "NoSuchKey"


# ------------------------------------------------------------------------------------ copy


def test_copy_object_metadata_directives(s3: Any, bucket: str, seaweed: Any) -> None:
    s3.put_object(Bucket=bucket, Key="src", Body=b"copy me", ContentType="text/a", CacheControl="max-age=1",
                  Metadata={"origin": "src"})
    copied = s3.copy_object(Bucket=bucket, Key="dst-copy", CopySource={"Bucket": bucket, "Key": "src"})
    assert copied["CopyObjectResult"]["ETag"] == f'"{hashlib.md5(b"copy me").hexdigest()}"'
    for client in (s3, remote_client(seaweed)):
        head = client.head_object(Bucket=bucket, Key="dst-copy")
        assert (head["ContentType"], head["CacheControl"], head["Metadata"]) == (
            "text/a", "max-age=1", {"origin": "src"})

    s3.copy_object(Bucket=bucket, Key="dst-replace", CopySource={"Bucket": bucket, "Key": "src"},
                   MetadataDirective="REPLACE", ContentType="text/b", Metadata={"fresh": "yes"})
    for client in (s3, remote_client(seaweed)):
        head = client.head_object(Bucket=bucket, Key="dst-replace")
        assert head["ContentType"] == "text/b"
        assert head["Metadata"] == {"fresh": "yes"}
        assert "CacheControl" not in head  # REPLACE replaces everything
    assert s3.get_object(Bucket=bucket, Key="dst-replace")["Body"].read() == b"copy me"

    # Copy source given as a string, with characters that must survive URL encoding.
    s3.put_object(Bucket=bucket, Key="sp ace+plus/ü", Body=b"odd source")
    s3.copy_object(Bucket=bucket, Key="dst-odd", CopySource=f"{bucket}/sp ace+plus/ü")  # botocore quotes it
    assert s3.get_object(Bucket=bucket, Key="dst-odd")["Body"].read() == b"odd source"

    status, error, _ = s3_error(s3.copy_object, Bucket=bucket, Key="x",
                                CopySource={"Bucket": bucket, "Key": "src"}, MetadataDirective="MERGE")
    assert (status, error["Code"]) == (400, "InvalidArgument")


def test_copy_onto_itself(s3: Any, bucket: str) -> None:
    s3.put_object(Bucket=bucket, Key="self", Body=b"me", Metadata={"v": "1"})
    status, error, _ = s3_error(s3.copy_object, Bucket=bucket, Key="self",
                                CopySource={"Bucket": bucket, "Key": "self"})
    assert (status, error["Code"]) == (400, "InvalidRequest")
    s3.copy_object(Bucket=bucket, Key="self", CopySource={"Bucket": bucket, "Key": "self"},
                   MetadataDirective="REPLACE", Metadata={"v": "2"})
    head = s3.head_object(Bucket=bucket, Key="self")
    assert head["Metadata"] == {"v": "2"}
    assert s3.get_object(Bucket=bucket, Key="self")["Body"].read() == b"me"


def test_copy_source_conditions(obj: tuple[Any, str, str, str]) -> None:
    s3, bucket, key, etag = obj
    modified = s3.head_object(Bucket=bucket, Key=key)["LastModified"]
    before, after = modified - timedelta(hours=1), modified + timedelta(hours=1)
    source = {"Bucket": bucket, "Key": key}
    for good in ({"CopySourceIfMatch": etag}, {"CopySourceIfNoneMatch": '"0000"'},
                 {"CopySourceIfModifiedSince": before}, {"CopySourceIfUnmodifiedSince": after}):
        assert s3.copy_object(Bucket=bucket, Key="copy-ok", CopySource=source, **good)["CopyObjectResult"]
    for bad in ({"CopySourceIfMatch": '"0000"'}, {"CopySourceIfNoneMatch": etag},
                {"CopySourceIfModifiedSince": after}, {"CopySourceIfUnmodifiedSince": before}):
        status, error, _ = s3_error(s3.copy_object, Bucket=bucket, Key="copy-bad", CopySource=source, **bad)
        assert (status, error["Code"]) == (412, "PreconditionFailed"), bad
    status, _, _ = s3_error(s3.head_object, Bucket=bucket, Key="copy-bad")
    assert status == 404


def test_copy_errors(s3: Any, bucket: str) -> None:
    status, error, _ = s3_error(s3.copy_object, Bucket=bucket, Key="d",
                                CopySource={"Bucket": bucket, "Key": "missing"})
    assert (status, error["Code"]) == (404, "NoSuchKey")
    status, error, _ = s3_error(s3.copy_object, Bucket=bucket, Key="d",
                                CopySource={"Bucket": bucket + "-missing", "Key": "k"})
    assert (status, error["Code"]) == (404, "NoSuchBucket")


# ------------------------------------------------------------------------------------ deletes and errors


def test_delete_objects(s3: Any, bucket: str) -> None:
    for key in ("a", "b", "c", "d"):
        s3.put_object(Bucket=bucket, Key=key, Body=key.encode())
    loud = s3.delete_objects(Bucket=bucket,
                             Delete={"Objects": [{"Key": "a"}, {"Key": "b"}, {"Key": "never"}]})
    assert sorted(d["Key"] for d in loud["Deleted"]) == ["a", "b", "never"]
    assert not loud.get("Errors")
    quiet = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "c"}], "Quiet": True})
    assert not quiet.get("Deleted") and not quiet.get("Errors")
    versioned = s3.delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": "d", "VersionId": "v9"}]})
    assert [(e["Key"], e["Code"]) for e in versioned["Errors"]] == [("d", "NoSuchVersion")]
    left = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert left == ["d"]


def test_missing_key_and_bucket_errors(s3: Any, bucket: str) -> None:
    status, error, headers = s3_error(s3.get_object, Bucket=bucket, Key="no/such")
    assert (status, error["Code"], error.get("Key")) == (404, "NoSuchKey", "no/such")
    assert headers["content-type"] == "application/xml"
    assert error.get("Message")
    status, _, _ = s3_error(s3.head_object, Bucket=bucket, Key="no/such")
    assert status == 404

    missing = bucket + "-nope"
    for call, kwargs in ((s3.get_object, {"Key": "k"}), (s3.put_object, {"Key": "k", "Body": b"x"}),
                         (s3.list_objects_v2, {}), (s3.delete_object, {"Key": "k"})):
        status, error, _ = s3_error(call, Bucket=missing, **kwargs)
        assert (status, error["Code"]) == (404, "NoSuchBucket"), call
        assert error.get("BucketName") == missing
    status, _, _ = s3_error(s3.head_object, Bucket=missing, Key="k")
    assert status == 404


# ------------------------------------------------------------------------------------ raw bodies


def test_bare_transfer_encoding_chunked_put(gw: GatewayProcess, s3: Any, bucket: str) -> None:
    """A streamed upload without Content-Length (HTTP/1.1 chunked, payload unsigned)."""
    pieces = [b"hello", b" ", b"chunked " * 1000, b"world"]
    wire = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
    status, _, body = signed_request(gw, "PUT", f"/{bucket}/te-chunked", {"Transfer-Encoding": "chunked"},
                                     payload="UNSIGNED-PAYLOAD", wire=wire)
    assert status == 200, body
    gw.flush()  # ``s3`` may talk to the other gateway, which sees only what reached the remote
    assert s3.get_object(Bucket=bucket, Key="te-chunked")["Body"].read() == b"".join(pieces)


def _raw_socket(gw: GatewayProcess) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", gw.port), timeout=10)
    if gw.tls:
        sock = gw.tls.client_context().wrap_socket(sock, server_hostname="127.0.0.1")
    return sock


def _head_bytes(gw: GatewayProcess, method: str, target: str, headers: dict[str, str], body: bytes) -> bytes:
    signed = sign(gw, method, target, headers, body)
    lines = [f"{method} {target} HTTP/1.1"] + [f"{k}: {v}" for k, v in signed.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def _read_response(sock: socket.socket | ssl.SSLSocket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return head + b"\r\n\r\n" + rest


def test_expect_100_continue(gw: GatewayProcess, s3: Any, bucket: str) -> None:
    body = b"sent after 100 Continue"
    with _raw_socket(gw) as sock:
        sock.sendall(_head_bytes(gw, "PUT", f"/{bucket}/expect",
                                 {"Expect": "100-continue", "Content-Length": str(len(body))}, body))
        interim = sock.recv(4096)
        assert interim.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), interim
        sock.sendall(body)
        final = interim[len(b"HTTP/1.1 100 Continue\r\n\r\n"):] or _read_response(sock)
        assert final.startswith(b"HTTP/1.1 200"), final
    gw.flush()  # ``s3`` may talk to the other gateway, which sees only what reached the remote
    assert s3.get_object(Bucket=bucket, Key="expect")["Body"].read() == body


def test_expect_100_continue_refused_early_keeps_the_connection_sane(gw: GatewayProcess, bucket: str) -> None:
    """An error before the body is read: the client never sends it, so the next request on the
    connection must not be read as that body (the gateway closes the connection instead)."""
    with _raw_socket(gw) as sock:
        sock.sendall(_head_bytes(gw, "PUT", f"/{bucket}/k?partNumber=1&uploadId=nope",
                                 {"Expect": "100-continue", "Content-Length": "5"}, b"12345"))
        first = _read_response(sock)
        assert first.startswith(b"HTTP/1.1 404"), first
        assert b"<Code>NoSuchUpload</Code>" in first
        assert b"\r\nconnection: close" in first.lower()
        try:
            sock.sendall(_head_bytes(gw, "GET", f"/{bucket}?list-type=2", {}, b""))
            second = _read_response(sock)
        except OSError:
            second = b""
        # Either the connection is gone, or the next request is answered as itself.
        assert second == b"" or second.startswith(b"HTTP/1.1 200"), second


def _by_part(client: Any, bucket: str, key: str, part: int, head: bool = False) -> tuple[int, str, dict[str, str]]:
    """(status, error code or body, the part headers) of a GET/HEAD by ``partNumber``."""
    call = client.head_object if head else client.get_object
    try:
        r = call(Bucket=bucket, Key=key, PartNumber=part)
    except ClientError as err:
        return int(err.response["ResponseMetadata"]["HTTPStatusCode"]), str(err.response["Error"]["Code"]), {}
    h = r["ResponseMetadata"]["HTTPHeaders"]
    body = "" if head else r["Body"].read().decode()
    return (int(r["ResponseMetadata"]["HTTPStatusCode"]), body,
            {k: h[k] for k in ("content-range", "content-length", "x-amz-mp-parts-count") if k in h})


def test_get_and_head_by_part_number_of_a_single_part_object(s3: Any, bucket: str, seaweed: Any) -> None:
    """partNumber=1 of a single-part object is all of it (206, Content-Range, one part);
    any other part is 416 InvalidPartNumber: what SeaweedFS directly answers, buffered and
    after destage."""
    direct = remote_client(seaweed)
    direct.put_object(Bucket=bucket, Key="by-part-direct", Body=b"hello")
    s3.put_object(Bucket=bucket, Key="by-part", Body=b"hello")
    for client, key in ((s3, "by-part"), (direct, "by-part-direct")):
        assert _by_part(client, bucket, key, 1) == (206, "hello", {
            "content-range": "bytes 0-4/5", "content-length": "5", "x-amz-mp-parts-count": "1"}), client
        assert _by_part(client, bucket, key, 1, head=True)[0] == 206
        assert _by_part(client, bucket, key, 2)[:2] == (416, "InvalidPartNumber"), client
    flush_all()
    assert _by_part(s3, bucket, "by-part", 1)[:2] == (206, "hello")
    assert _by_part(s3, bucket, "by-part", 3)[:2] == (416, "InvalidPartNumber")


def _upload_in_parts(client: Any, bucket: str, key: str, parts: list[bytes], numbers: list[int] | None = None) -> str:
    """A multipart object of ``parts`` (uploaded as ``numbers``, 1.. by default); its ETag (quoted)."""
    upload = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    done = [{"PartNumber": n, "ETag": client.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=n,
                                                         Body=body)["ETag"]}
            for n, body in zip(numbers or range(1, len(parts) + 1), parts, strict=True)]
    return str(client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload,
                                                MultipartUpload={"Parts": done})["ETag"])


def test_get_and_head_by_part_number_of_a_multipart_object(s3: Any, bucket: str, seaweed: Any) -> None:
    """Part n of a multipart object is its bytes (206, Content-Range of that part, the parts
    count, the whole object's ETag); a part past the last is 416 InvalidPartNumber: what
    SeaweedFS directly answers, buffered, after destage, and on a miss (an object only the remote has)."""
    mib = 1024 * 1024
    parts = [b"a" * (5 * mib), b"b" * (5 * mib), b"tail"]
    total = sum(map(len, parts))
    direct = remote_client(seaweed)
    etags = {"direct": _upload_in_parts(direct, bucket, "mp-direct", parts),
             "gateway": _upload_in_parts(s3, bucket, "mp", parts)}
    spans = [(0, 5 * mib - 1), (5 * mib, 10 * mib - 1), (10 * mib, total - 1)]

    def check(client: Any, key: str, etag: str) -> None:
        for n, ((first, last), body) in enumerate(zip(spans, parts, strict=True), 1):
            r = client.get_object(Bucket=bucket, Key=key, PartNumber=n)
            h = r["ResponseMetadata"]["HTTPHeaders"]
            assert (r["ResponseMetadata"]["HTTPStatusCode"], r["Body"].read() == body) == (206, True), (key, n)
            assert (h["content-range"], h["content-length"], h["x-amz-mp-parts-count"], h["etag"]) == (
                f"bytes {first}-{last}/{total}", str(last - first + 1), "3", etag), (key, n)
            head = client.head_object(Bucket=bucket, Key=key, PartNumber=n)["ResponseMetadata"]
            assert (head["HTTPStatusCode"], head["HTTPHeaders"]["content-range"]) == (
                206, f"bytes {first}-{last}/{total}"), (key, n)
        assert _by_part(client, bucket, key, 4)[:2] == (416, "InvalidPartNumber"), key
        assert _by_part(client, bucket, key, 4, head=True)[0] == 416, key

    check(direct, "mp-direct", etags["direct"])
    check(s3, "mp", etags["gateway"])
    flush_all()
    check(s3, "mp", etags["gateway"])
    check(s3, "mp-direct", etags["direct"])  # a miss: only the remote has it, and lists its parts


def test_part_number_is_the_number_the_part_was_uploaded_as(s3: Any, bucket: str, seaweed: Any) -> None:
    """Parts uploaded as 1 and 3: partNumber=3 is the second part's bytes, 2 is 416 (2 parts
    counted): what SeaweedFS directly answers, buffered and after destage."""
    parts, tail = [b"a" * (5 * 1024 * 1024), b"ccc"], "bytes 5242880-5242882/5242883"
    direct = remote_client(seaweed)
    _upload_in_parts(direct, bucket, "gap-direct", parts, [1, 3])
    _upload_in_parts(s3, bucket, "gap", parts, [1, 3])
    rounds = [(direct, "gap-direct"), (s3, "gap"), (s3, "gap")]
    for i, (client, key) in enumerate(rounds):
        if i == 2:
            flush_all()
        assert _by_part(client, bucket, key, 3) == (206, "ccc", {
            "content-range": tail, "content-length": "3", "x-amz-mp-parts-count": "2"}), (key, i)
        assert _by_part(client, bucket, key, 2)[:2] == (416, "InvalidPartNumber"), (key, i)
