"""Authentication and payload signing end to end: SigV4 headers and presigned URLs, clock skew,
signed aws-chunked bodies, UNSIGNED-PAYLOAD, content hashes and virtual-hosted-style addressing."""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from email.message import Message
from http.client import HTTPConnection, HTTPSConnection
from pathlib import Path
from typing import Any
from unittest import mock

import boto3
import botocore.auth
import pytest
import requests
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from app.s3.chunked import STREAMING_SIGNED, ChunkSigningContext
from tests.support.gateway import ACCESS_KEY, SECRET_KEY, GatewayProcess
from tests.unit.test_chunked import encode, signing_key

DOMAIN = "s3.ferry.test"


@pytest.fixture(params=["http", "https"])
def gw(request: pytest.FixtureRequest) -> GatewayProcess:
    return request.getfixturevalue("gateway" if request.param == "http" else "gateway_tls")


def verify_of(gw: GatewayProcess) -> str | bool:
    return str(gw.tls.ca_bundle) if gw.tls else True


def error_code(body: bytes) -> str | None:
    return ET.fromstring(body).findtext("Code")


def s3_error(call: Any, **kwargs: Any) -> tuple[int, dict[str, Any]]:
    with pytest.raises(ClientError) as info:
        call(**kwargs)
    return info.value.response["ResponseMetadata"]["HTTPStatusCode"], info.value.response["Error"]


def signed_headers(gw: GatewayProcess, method: str, target: str, headers: dict[str, str] | None = None,
                   body: bytes = b"", payload: str | None = None, secret: str = SECRET_KEY,
                   host: str | None = None) -> dict[str, str]:
    """botocore's SigV4 headers for ``target`` with an exact x-amz-content-sha256 value."""
    all_headers = {"Host": host or f"127.0.0.1:{gw.port}", **(headers or {})}
    all_headers["x-amz-content-sha256"] = payload or hashlib.sha256(body).hexdigest()
    forced = all_headers["x-amz-content-sha256"]

    class _Auth(S3SigV4Auth):
        def payload(self, request: Any) -> str:
            return forced

    request = AWSRequest(method=method, url=gw.endpoint + target, headers=all_headers, data=body)
    _Auth(Credentials(ACCESS_KEY, secret), "s3", "us-east-1").add_auth(request)
    return dict(request.headers.items())


def send(gw: GatewayProcess, method: str, target: str, headers: dict[str, str],
         wire: bytes = b"") -> tuple[int, Message, bytes]:
    conn = (HTTPSConnection("127.0.0.1", gw.port, timeout=10, context=gw.tls.client_context()) if gw.tls
            else HTTPConnection("127.0.0.1", gw.port, timeout=10))
    try:
        conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
        for name, value in headers.items():
            conn.putheader(name, value.encode("utf-8"))
        conn.endheaders()
        if wire:
            conn.send(wire)
        resp = conn.getresponse()
        return resp.status, resp.headers, resp.read()
    finally:
        conn.close()


def signed_request(gw: GatewayProcess, method: str, target: str, body: bytes = b"",
                   headers: dict[str, str] | None = None, **kwargs: Any) -> tuple[int, Message, bytes]:
    headers = {"Content-Length": str(len(body)), **(headers or {})}
    return send(gw, method, target, signed_headers(gw, method, target, headers, body, **kwargs), body)


# ------------------------------------------------------------------------------------ credentials


def test_wrong_secret(gw: GatewayProcess, bucket: str) -> None:
    s3 = gw.client(secret_key="not-the-secret")
    for call, kwargs in ((s3.list_objects_v2, {}), (s3.put_object, {"Key": "k", "Body": b"x"}),
                         (s3.get_object, {"Key": "k"})):
        status, error = s3_error(call, Bucket=bucket, **kwargs)
        assert (status, error["Code"]) == (403, "SignatureDoesNotMatch"), call
    status, error = s3_error(s3.head_object, Bucket=bucket, Key="k")
    assert status == 403
    assert gw.client().list_objects_v2(Bucket=bucket)["KeyCount"] == 0  # nothing was written


def test_unknown_access_key(gw: GatewayProcess, bucket: str) -> None:
    s3 = gw.client(access_key="AKIANOSUCHKEY0000000", secret_key="whatever")
    status, error = s3_error(s3.list_objects_v2, Bucket=bucket)
    assert (status, error["Code"]) == (403, "InvalidAccessKeyId")
    status, error = s3_error(s3.put_object, Bucket=bucket, Key="k", Body=b"x")
    assert (status, error["Code"]) == (403, "InvalidAccessKeyId")


def test_anonymous_requests_are_denied(gw: GatewayProcess, bucket: str) -> None:
    verify = verify_of(gw)
    for method, path, data in (("GET", f"/{bucket}", None), ("PUT", f"/{bucket}/anon", b"x"),
                               ("GET", "/", None), ("DELETE", f"/{bucket}", None)):
        resp = requests.request(method, gw.endpoint + path, data=data, verify=verify, timeout=10)
        assert resp.status_code == 403, (method, path)
        assert error_code(resp.content) == "AccessDenied"
    resp = requests.head(f"{gw.endpoint}/{bucket}", verify=verify, timeout=10)
    assert resp.status_code == 403


def test_skewed_clock(gw: GatewayProcess, bucket: str) -> None:
    real = dt.datetime

    class Skewed(real):  # type: ignore[misc, valid-type]
        @classmethod
        def utcnow(cls) -> Any:
            return real.utcnow() - dt.timedelta(minutes=20)

        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return real.now(tz) - dt.timedelta(minutes=20)

    s3 = gw.client()
    with mock.patch.object(botocore.auth.datetime, "datetime", Skewed):
        status, error = s3_error(s3.list_objects_v2, Bucket=bucket)
        status_put, error_put = s3_error(s3.put_object, Bucket=bucket, Key="late", Body=b"x")
    assert (status, error["Code"]) == (403, "RequestTimeTooSkewed")
    assert (status_put, error_put["Code"]) == (403, "RequestTimeTooSkewed")
    assert s3.list_objects_v2(Bucket=bucket)["KeyCount"] == 0


# ------------------------------------------------------------------------------------ presigned URLs


def test_presigned_get_and_put(gw: GatewayProcess, bucket: str) -> None:
    s3 = gw.client(signature_version="s3v4")
    verify = verify_of(gw)
    url = s3.generate_presigned_url("put_object", Params={"Bucket": bucket, "Key": "pre/signed ü.txt"},
                                    ExpiresIn=300)
    assert "X-Amz-Signature=" in url
    resp = requests.put(url, data=b"via presigned PUT", verify=verify, timeout=10)
    assert resp.status_code == 200, resp.text
    url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "pre/signed ü.txt"},
                                    ExpiresIn=300)
    resp = requests.get(url, verify=verify, timeout=10)
    assert (resp.status_code, resp.content) == (200, b"via presigned PUT")
    # A presigned URL is bound to its method and its key.
    assert requests.delete(url, verify=verify, timeout=10).status_code == 403
    tampered = url.replace("signed%20%C3%BC.txt", "other.txt")
    assert tampered != url
    resp = requests.get(tampered, verify=verify, timeout=10)
    assert (resp.status_code, error_code(resp.content)) == (403, "SignatureDoesNotMatch")
    url = s3.generate_presigned_url("list_objects_v2", Params={"Bucket": bucket, "Prefix": "pre/"})
    resp = requests.get(url, verify=verify, timeout=10)
    assert resp.status_code == 200 and b"signed" in resp.content


def test_presigned_url_expires(gateway: GatewayProcess, gateway_tls: GatewayProcess, bucket: str) -> None:
    urls = []
    for gw in (gateway, gateway_tls):  # both protocols, one wait
        s3 = gw.client(signature_version="s3v4")
        s3.put_object(Bucket=bucket, Key="short-lived", Body=b"x")
        url = s3.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "short-lived"},
                                        ExpiresIn=1)
        urls.append((gw, url))
    time.sleep(2.1)
    for gw, url in urls:
        resp = requests.get(url, verify=verify_of(gw), timeout=10)
        assert resp.status_code == 403
        root = ET.fromstring(resp.content)
        assert root.findtext("Code") == "AccessDenied"
        assert "expired" in (root.findtext("Message") or "").lower()


def test_presigned_sigv2_is_served(gw: GatewayProcess, bucket: str) -> None:
    """boto3's default presigner for S3 still emits SigV2 (AWSAccessKeyId/Signature/Expires)."""
    gw.client().put_object(Bucket=bucket, Key="k", Body=b"signed the old way")
    url = gw.client().generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": "k"})
    if "AWSAccessKeyId=" not in url:
        pytest.skip("this botocore presigns with SigV4 by default")
    resp = requests.get(url, verify=verify_of(gw), timeout=10)
    assert (resp.status_code, resp.content) == (200, b"signed the old way")


# ------------------------------------------------------------------------------------ payloads


def test_unsigned_payload(gw: GatewayProcess, bucket: str) -> None:
    status, _, body = signed_request(gw, "PUT", f"/{bucket}/unsigned", b"not hashed by the client",
                                     payload="UNSIGNED-PAYLOAD")
    assert status == 200, body
    assert gw.client().get_object(Bucket=bucket, Key="unsigned")["Body"].read() == b"not hashed by the client"


def test_wrong_content_sha256(gw: GatewayProcess, bucket: str) -> None:
    status, _, body = signed_request(gw, "PUT", f"/{bucket}/mismatch", b"the body",
                                     payload=hashlib.sha256(b"another body").hexdigest())
    assert status == 400
    assert error_code(body) == "XAmzContentSHA256Mismatch"
    assert gw.client().list_objects_v2(Bucket=bucket)["KeyCount"] == 0
    # Not a hash at all: refused before the body is read.
    status, _, body = signed_request(gw, "PUT", f"/{bucket}/mismatch", b"the body", payload="sha256-please")
    assert status == 400
    assert error_code(body) in ("InvalidArgument", "InvalidRequest", "XAmzContentSHA256Mismatch")


def _streaming_put(gw: GatewayProcess, target: str, chunks: list[bytes], tamper: int | None = None,
                   ) -> tuple[int, bytes]:
    """PUT with STREAMING-AWS4-HMAC-SHA256-PAYLOAD: every chunk signed, chained to the seed."""
    decoded = b"".join(chunks)
    placeholder = ChunkSigningContext(b"k" * 32, "20000101T000000Z", "scope", "0" * 64)
    wire_length = len(encode(STREAMING_SIGNED, chunks, ctx=placeholder))  # signatures are fixed-size
    headers = signed_headers(gw, "PUT", target, {
        "Content-Encoding": "aws-chunked",
        "x-amz-decoded-content-length": str(len(decoded)),
        "Content-Length": str(wire_length),
    }, payload=STREAMING_SIGNED)
    amz_date = headers["X-Amz-Date"]
    seed = re.search(r"Signature=([0-9a-f]{64})", headers["Authorization"]).group(1)  # type: ignore[union-attr]
    ctx = ChunkSigningContext(signing_key(SECRET_KEY, amz_date[:8], "us-east-1"), amz_date,
                              f"{amz_date[:8]}/us-east-1/s3/aws4_request", seed)
    wire = bytearray(encode(STREAMING_SIGNED, chunks, ctx=ctx))
    assert len(wire) == wire_length
    if tamper is not None:  # another byte; in a signature, another hex digit
        wire[tamper] = ord("1" if wire[tamper] == ord("0") else "0") if chr(wire[tamper]) in "0123456789abcdef" \
            else wire[tamper] ^ 0x01
    status, _, body = send(gw, "PUT", target, headers, bytes(wire))
    return status, body


def test_streaming_signed_payload(gw: GatewayProcess, bucket: str) -> None:
    payload = bytes(range(256)) * 700  # 179200 bytes: three 64 KiB chunks and a short one
    chunks = [payload[i:i + 65536] for i in range(0, len(payload), 65536)]
    status, body = _streaming_put(gw, f"/{bucket}/streamed", chunks)
    assert status == 200, body
    s3 = gw.client()
    got = s3.get_object(Bucket=bucket, Key="streamed")
    assert got["Body"].read() == payload
    assert got["ETag"] == f'"{hashlib.md5(payload).hexdigest()}"'
    assert "ContentEncoding" not in got  # aws-chunked is framing, not the object's encoding


@pytest.mark.parametrize("where", ["first-chunk", "last-chunk", "signature"])
def test_streaming_tampered_chunk(gw: GatewayProcess, bucket: str, where: str) -> None:
    chunks = [b"a" * 8192, b"b" * 8192, b"c" * 100]
    first_header = len(b"2000;chunk-signature=") + 64 + 2
    offset = {"first-chunk": first_header + 10, "last-chunk": -60 - 64 - 30,
              "signature": len(b"2000;chunk-signature=") + 5}[where]
    wire_length = len(encode(STREAMING_SIGNED, chunks,
                             ctx=ChunkSigningContext(b"k" * 32, "20000101T000000Z", "s", "0" * 64)))
    status, body = _streaming_put(gw, f"/{bucket}/tampered", chunks,
                                  tamper=offset if offset >= 0 else wire_length + offset)
    assert status == 403, body
    assert error_code(body) == "SignatureDoesNotMatch"
    status, _ = s3_error(gw.client().head_object, Bucket=bucket, Key="tampered")
    assert status == 404


# ------------------------------------------------------------------------------------ virtual hosts


@pytest.fixture(scope="module")
def vhost_gateway(seaweed: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    data_dir = Path(tmp_path_factory.mktemp("gwvhost"))
    with GatewayProcess(seaweed, data_dir, env={"FERRY_DOMAIN": DOMAIN}) as gw:
        yield gw


def test_virtual_hosted_style(vhost_gateway: GatewayProcess) -> None:
    gw = vhost_gateway
    bucket = f"v-{uuid.uuid4().hex[:16]}"
    gw.client().create_bucket(Bucket=bucket)
    host = f"{bucket}.{DOMAIN}:{gw.port}"

    status, _, body = signed_request(gw, "PUT", "/dir/hello%20v.txt", b"virtual hosted", host=host,
                                     headers={"Host": host})
    assert status == 200, body
    assert gw.client().get_object(Bucket=bucket, Key="dir/hello v.txt")["Body"].read() == b"virtual hosted"

    status, _, body = signed_request(gw, "GET", "/dir/hello%20v.txt", host=host, headers={"Host": host})
    assert (status, body) == (200, b"virtual hosted")

    status, _, body = signed_request(gw, "GET", "/?list-type=2&prefix=dir%2F", host=host,
                                     headers={"Host": host})
    assert status == 200, body
    root = ET.fromstring(body)
    ns = "{http://s3.amazonaws.com/doc/2006-03-01/}"
    assert root.findtext(f"{ns}Name") == bucket
    assert [k.text for k in root.iter(f"{ns}Key")] == ["dir/hello v.txt"]

    # Upper-case host names are the same bucket (DNS is case-insensitive).
    upper = host.upper()
    status, _, body = signed_request(gw, "HEAD", "/dir/hello%20v.txt", host=upper, headers={"Host": upper})
    assert status == 200

    # Path style keeps working on the same gateway.
    status, _, body = signed_request(gw, "GET", f"/{bucket}/dir/hello%20v.txt")
    assert (status, body) == (200, b"virtual hosted")

    # A host under the domain names a bucket even if it does not exist.
    missing = f"nope-{uuid.uuid4().hex[:8]}.{DOMAIN}:{gw.port}"
    status, _, body = signed_request(gw, "GET", "/k", host=missing, headers={"Host": missing})
    assert status == 404 and error_code(body) == "NoSuchBucket"

    # boto3 in virtual style against the domain (resolved to 127.0.0.1 by a Host-rewriting hook).
    s3 = boto3.client("s3", endpoint_url=f"http://{DOMAIN}:{gw.port}", aws_access_key_id=ACCESS_KEY,
                      aws_secret_access_key=SECRET_KEY, region_name="us-east-1",
                      config=Config(s3={"addressing_style": "virtual"}, retries={"max_attempts": 1}))
    seen_hosts: list[str] = []

    def to_loopback(request: Any, **_: Any) -> None:
        netloc = request.url.split("/")[2]
        seen_hosts.append(netloc)
        request.headers["Host"] = netloc
        request.url = request.url.replace(netloc, f"127.0.0.1:{gw.port}", 1)

    s3.meta.events.register_first("before-send.s3.*", to_loopback)
    s3.put_object(Bucket=bucket, Key="boto/virtual", Body=b"from boto3")
    assert s3.get_object(Bucket=bucket, Key="boto/virtual")["Body"].read() == b"from boto3"
    listing = s3.list_objects_v2(Bucket=bucket, Prefix="boto/")
    assert [o["Key"] for o in listing["Contents"]] == ["boto/virtual"]
    assert set(seen_hosts) == {host}
