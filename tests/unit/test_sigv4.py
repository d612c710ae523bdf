"""SigV4 verification against botocore's real signer.

Requests are built by a real boto3 client (serialisers, key encoding, checksums and all) and
captured at ``before-send``, i.e. exactly what would go on the wire, then handed to the
verifier as ASGI-style values. Negative cases tamper with those captured requests.
"""

from __future__ import annotations

import datetime as dt
import time
from functools import cache
from typing import Any
from unittest import mock
from urllib.parse import quote, unquote_to_bytes, urlsplit

import boto3
import botocore.auth
import pytest
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.domain.errors import S3Error
from app.s3.sigv4 import (
    STREAMING_HMAC_PAYLOAD,
    STREAMING_UNSIGNED_PAYLOAD_TRAILER,
    UNSIGNED_PAYLOAD,
    AuthResult,
    RequestParts,
    SigV4Verifier,
    derive_signing_key,
    has_auth,
)
from app.s3.sigv4.canonical import canonical_query_pairs

AK = "AKIDFERRYTEST0001"
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
OTHER_AK = "AKIDFERRYTEST0002"
OTHER_SECRET = "another/secret+key"
SECRETS = {AK: SECRET, OTHER_AK: OTHER_SECRET}
PATH_ENDPOINT = "https://ferry.test:9000"
VHOST_ENDPOINT = "https://s3.ferry.test"
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def lookup(access_key: str) -> str | None:
    return SECRETS.get(access_key)


def verifier(offset: float = 0.0) -> SigV4Verifier:
    """A verifier whose clock runs ``offset`` seconds ahead of the real one."""
    return SigV4Verifier(lookup, clock=lambda: time.time() + offset)


class _Captured(Exception):
    """Raised from before-send to stop botocore once the request is fully prepared."""

    def __init__(self, request: Any) -> None:
        super().__init__("captured")
        self.request = request


def _stop(request: Any, **_: Any) -> None:
    raise _Captured(request)


@cache
def client(
    style: str = "path", *, ak: str = AK, secret: str = SECRET, payload_signing: bool | None = None
) -> Any:
    """A real S3 client that never touches the network (requests are captured, not sent)."""
    s3_cfg: dict[str, Any] = {"addressing_style": style}
    if payload_signing is not None:
        s3_cfg["payload_signing_enabled"] = payload_signing
    c = boto3.client(
        "s3",
        endpoint_url=PATH_ENDPOINT if style == "path" else VHOST_ENDPOINT,
        region_name="us-east-1",
        aws_access_key_id=ak,
        aws_secret_access_key=secret,
        config=Config(signature_version="s3v4", s3=s3_cfg, retries={"max_attempts": 0}),
    )
    c.meta.events.register("before-send", _stop)
    return c


def _as_bytes(value: str | bytes) -> bytes:
    return value if isinstance(value, bytes) else value.encode("utf-8")


def parts_from(method: str, url: str, headers: Any) -> RequestParts:
    """What an ASGI server would hand us for this URL and these headers."""
    u = urlsplit(url)
    hdrs = [(k.lower().encode("latin-1"), _as_bytes(v)) for k, v in headers.items()]
    if not any(k == b"host" for k, _ in hdrs):
        hdrs.append((b"host", u.netloc.encode("ascii")))
    return RequestParts(method, u.path.encode("ascii"), u.query.encode("ascii"), hdrs)


def capture(operation: str, c: Any = None, **params: Any) -> RequestParts:
    c = c or client()
    with pytest.raises(_Captured) as info:
        getattr(c, operation)(**params)
    req = info.value.request
    return parts_from(req.method, req.url, req.headers)


def presign(operation: str, params: dict[str, Any], expires: int = 3600, style: str = "path") -> RequestParts:
    url = client(style).generate_presigned_url(operation, Params=params, ExpiresIn=expires)
    method = {"get_object": "GET", "put_object": "PUT", "delete_object": "DELETE", "head_object": "HEAD"}
    return parts_from(method[operation], url, {})


def replace(req: RequestParts, **changes: Any) -> RequestParts:
    fields = {"method": req.method, "raw_path": req.raw_path, "query_string": req.query_string}
    fields["headers"] = list(req.headers)
    fields.update(changes)
    return RequestParts(**fields)


def set_header(req: RequestParts, name: bytes, value: bytes | None) -> RequestParts:
    headers = [(k, v) for k, v in req.headers if k != name]
    if value is not None:
        headers.append((name, value))
    return replace(req, headers=headers)


def header(req: RequestParts, name: bytes) -> bytes:
    return next(v for k, v in req.headers if k == name)


def expect(code: str, req: RequestParts, v: SigV4Verifier | None = None) -> S3Error:
    with pytest.raises(S3Error) as info:
        (v or verifier()).verify(req)
    assert info.value.code == code, (info.value.code, info.value.message)
    return info.value


HOSTILE_KEYS = [
    "plain.txt",
    "a b",
    "a+b",
    "ünïcödé/ключ",
    "..",
    "../../etc/passwd",
    "%2F",
    "a%2Fb",
    "a//b",
    "/leading",
    "trailing/",
    "~",
    "!*'()",
    '=&?#;:@$,[]{}|\\^`"<>',
    "tab\there",
    "emoji-🦀",
    "k" * 1024,
    "é" * 512,
]


# -- botocore header auth ------------------------------------------------------------------


REQUESTS: list[tuple[str, dict[str, Any]]] = [
    ("get_object", {"Bucket": "bucket", "Key": "k"}),
    ("head_object", {"Bucket": "bucket", "Key": "k", "Range": "bytes=0-9"}),
    ("put_object", {"Bucket": "bucket", "Key": "k", "Body": b"hello world"}),
    ("put_object", {"Bucket": "bucket", "Key": "k", "Body": b"", "Metadata": {"a": "  spaced   out  "}}),
    ("delete_object", {"Bucket": "bucket", "Key": "k"}),
    ("create_multipart_upload", {"Bucket": "bucket", "Key": "k"}),
    ("upload_part", {"Bucket": "bucket", "Key": "k", "PartNumber": 1, "UploadId": "x", "Body": b"p"}),
    ("list_multipart_uploads", {"Bucket": "bucket"}),
    (
        "list_objects_v2",
        {
            "Bucket": "bucket",
            "Prefix": "a/b",
            "Delimiter": "/",
            "ContinuationToken": "1/ab+cd==",
            "StartAfter": "ünï code",
        },
    ),
    ("list_objects", {"Bucket": "bucket", "Marker": "~!*'()", "MaxKeys": 10}),
    ("get_object", {"Bucket": "bucket", "Key": "k", "VersionId": "null"}),
    ("delete_objects", {"Bucket": "bucket", "Delete": {"Objects": [{"Key": "a"}, {"Key": "b"}]}}),
    ("copy_object", {"Bucket": "bucket", "Key": "dst", "CopySource": {"Bucket": "src", "Key": "a b/ü+"}}),
    ("list_buckets", {}),
    ("create_bucket", {"Bucket": "new-bucket"}),
    (
        "put_object",
        {"Bucket": "b", "Key": "k", "Body": b"x", "ContentDisposition": 'attachment; filename="é.txt"'},
    ),
]


@pytest.mark.parametrize("style", ["path", "virtual"])
@pytest.mark.parametrize(
    ("operation", "params"), REQUESTS, ids=[f"{op}-{i}" for i, (op, _) in enumerate(REQUESTS)]
)
def test_botocore_requests_verify(operation: str, params: dict[str, Any], style: str) -> None:
    req = capture(operation, client(style), **params)
    result = verifier().verify(req)
    assert result.access_key == AK
    assert result.region == "us-east-1"
    assert result.presigned is False
    assert result.content_sha256 == header(req, b"x-amz-content-sha256").decode()
    assert result.scope == f"{result.amz_date[:8]}/us-east-1/s3/aws4_request"
    assert result.signature in header(req, b"authorization").decode()


@pytest.mark.parametrize("key", HOSTILE_KEYS, ids=range(len(HOSTILE_KEYS)))
@pytest.mark.parametrize("operation", ["get_object", "put_object", "delete_object"])
def test_hostile_keys_verify(key: str, operation: str) -> None:
    params: dict[str, Any] = {"Bucket": "bucket", "Key": key}
    if operation == "put_object":
        params["Body"] = b"data"
    req = capture(operation, **params)
    assert verifier().verify(req).access_key == AK


def test_virtual_hosted_host_header_is_signed() -> None:
    req = capture("get_object", client("virtual"), Bucket="bucket", Key="a b")
    assert header(req, b"host") == b"bucket.s3.ferry.test"
    verifier().verify(req)
    expect("SignatureDoesNotMatch", set_header(req, b"host", b"other.s3.ferry.test"))


def test_extra_unsigned_headers_are_ignored() -> None:
    req = capture("get_object", Bucket="bucket", Key="k")
    extra = [
        (b"user-agent", b"curl/8"),
        (b"x-forwarded-for", b"10.0.0.1"),
        (b"accept-encoding", b"identity"),
        (b"x-amz-meta-unsigned", b"v"),
    ]
    assert verifier().verify(replace(req, headers=[*req.headers, *extra])).access_key == AK


def test_unsigned_payload() -> None:
    req = capture("get_object", client(payload_signing=False), Bucket="bucket", Key="k")
    assert verifier().verify(req).content_sha256 == UNSIGNED_PAYLOAD


def test_streaming_unsigned_payload_trailer() -> None:
    req = capture("put_object", Bucket="bucket", Key="k", Body=b"chunked body")
    assert verifier().verify(req).content_sha256 == STREAMING_UNSIGNED_PAYLOAD_TRAILER


class _StreamingSigner(botocore.auth.S3SigV4Auth):
    """botocore never emits aws-chunked signed bodies itself; force the payload constant."""

    def payload(self, request: Any) -> str:
        return STREAMING_HMAC_PAYLOAD


def sign_raw(
    url: str,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    signer: type[botocore.auth.SigV4Auth] = botocore.auth.S3SigV4Auth,
    secret: str = SECRET,
) -> RequestParts:
    """Sign a hand-built request with botocore's low-level signer."""
    request = AWSRequest(method=method, url=url, headers=headers or {})
    signer(Credentials(AK, secret), "s3", "us-east-1").add_auth(request)
    return parts_from(method, request.url, request.headers)


def test_streaming_hmac_payload_gives_chunk_signing_material() -> None:
    req = sign_raw(
        "https://ferry.test/bucket/k",
        "PUT",
        {"Content-Encoding": "aws-chunked", "X-Amz-Decoded-Content-Length": "66560"},
        _StreamingSigner,
    )
    result = verifier().verify(req)
    assert result.content_sha256 == STREAMING_HMAC_PAYLOAD
    assert result.signing_key == derive_signing_key(SECRET, result.amz_date[:8], "us-east-1")
    assert len(result.signature) == 64


def test_path_is_not_decoded_or_normalised() -> None:
    """Clients that escape '/' in keys, or send dot segments, sign the path exactly as sent."""
    for path in ("/bucket/a%2Fb", "/bucket/a/./b/../c", "/bucket/%7Etilde", "/bucket/a%2fb"):
        req = sign_raw("https://ferry.test" + path)
        assert req.raw_path == path.encode()
        verifier().verify(req)


def test_raw_unescaped_path_bytes_are_escaped_for_the_canonical_uri() -> None:
    """A client that puts a raw space or UTF-8 on the wire still signed the escaped form."""
    req = sign_raw("https://ferry.test/bucket/a%20b/%C3%BC")
    verifier().verify(replace(req, raw_path="/bucket/a b/ü".encode()))


def test_date_header_instead_of_x_amz_date() -> None:
    req = sign_raw("https://ferry.test/bucket/k", headers={"Date": "placeholder"})
    assert not any(k == b"x-amz-date" for k, _ in req.headers)
    result = verifier().verify(req)
    assert result.amz_date.endswith("Z") and len(result.amz_date) == 16


def test_latin1_header_values_from_http_client() -> None:
    """http.client puts str header values on the wire as latin-1 while botocore hashed UTF-8."""
    request = AWSRequest(method="GET", url="https://ferry.test/bucket/k", headers={"X-Amz-Meta-N": "café"})
    botocore.auth.S3SigV4Auth(Credentials(AK, SECRET), "s3", "us-east-1").add_auth(request)
    hdrs = [(k.lower().encode(), v.encode("latin-1")) for k, v in request.headers.items()]
    hdrs.append((b"host", b"ferry.test"))
    verifier().verify(RequestParts("GET", b"/bucket/k", b"", hdrs))


# -- known AWS vectors ---------------------------------------------------------------------


def test_signing_key_matches_aws_documented_vector() -> None:
    key = derive_signing_key("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "20120215", "us-east-1", "iam")
    assert key.hex() == "f4780e2d9f65fa895f9c67b32ce1baf0b0d8a43505a000a1a9e090d414db404d"


def test_signing_key_matches_botocore_for_fixed_date() -> None:
    signer = botocore.auth.S3SigV4Auth(Credentials(AK, SECRET), "s3", "eu-west-3")
    request = AWSRequest(method="GET", url="https://ferry.test/")
    request.context["timestamp"] = "20261129T093000Z"
    sts = "AWS4-HMAC-SHA256\n20261129T093000Z\n20261129/eu-west-3/s3/aws4_request\n" + "0" * 64
    import hmac

    ours = hmac.new(derive_signing_key(SECRET, "20261129", "eu-west-3"), sts.encode(), "sha256").hexdigest()
    assert ours == signer.signature(sts, request)


AWS_EXAMPLE_TIME = dt.datetime(2013, 5, 24, 0, 0, 30, tzinfo=dt.UTC).timestamp()
AWS_EXAMPLE_KEYS = {"AKIAIOSFODNN7EXAMPLE": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}


def test_aws_documented_header_example() -> None:
    """The GET-with-Range example from the S3 SigV4 header-auth documentation."""
    auth = (
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
        "SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,"
        "Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
    )
    req = RequestParts(
        "GET",
        b"/test.txt",
        b"",
        [
            (b"host", b"examplebucket.s3.amazonaws.com"),
            (b"authorization", auth.encode()),
            (b"range", b"bytes=0-9"),
            (b"x-amz-content-sha256", b"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
            (b"x-amz-date", b"20130524T000000Z"),
        ],
    )
    v = SigV4Verifier(AWS_EXAMPLE_KEYS.get, clock=lambda: AWS_EXAMPLE_TIME)
    result = v.verify(req)
    assert result == AuthResult(
        access_key="AKIAIOSFODNN7EXAMPLE",
        region="us-east-1",
        amz_date="20130524T000000Z",
        scope="20130524/us-east-1/s3/aws4_request",
        signature="f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41",
        signing_key=derive_signing_key(AWS_EXAMPLE_KEYS["AKIAIOSFODNN7EXAMPLE"], "20130524", "us-east-1"),
        content_sha256="e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        presigned=False,
    )


def test_aws_documented_presigned_example() -> None:
    """The presigned-URL example from the S3 SigV4 query-auth documentation."""
    qs = (
        b"X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1"
        b"%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host"
        b"&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"
    )
    req = RequestParts("GET", b"/test.txt", qs, [(b"host", b"examplebucket.s3.amazonaws.com")])
    v = SigV4Verifier(AWS_EXAMPLE_KEYS.get, clock=lambda: AWS_EXAMPLE_TIME)
    result = v.verify(req)
    assert result.presigned and result.content_sha256 == UNSIGNED_PAYLOAD
    late = SigV4Verifier(AWS_EXAMPLE_KEYS.get, clock=lambda: AWS_EXAMPLE_TIME + 86400)
    assert expect("AccessDenied", req, late).message == "Request has expired"


# -- presigned -----------------------------------------------------------------------------


@pytest.mark.parametrize("style", ["path", "virtual"])
@pytest.mark.parametrize("key", HOSTILE_KEYS, ids=range(len(HOSTILE_KEYS)))
def test_presigned_get_verifies(key: str, style: str) -> None:
    req = presign("get_object", {"Bucket": "bucket", "Key": key}, style=style)
    result = verifier().verify(req)
    assert result.presigned
    assert result.content_sha256 == UNSIGNED_PAYLOAD
    assert result.access_key == AK


def test_presigned_with_operation_params_and_signed_content_type() -> None:
    req = presign("put_object", {"Bucket": "bucket", "Key": "k", "ContentType": "text/plain"})
    expect("SignatureDoesNotMatch", req)  # the signed header was not sent
    ok = replace(req, headers=[*req.headers, (b"content-type", b"text/plain")])
    assert verifier().verify(ok).presigned
    req = presign(
        "get_object", {"Bucket": "bucket", "Key": "k", "VersionId": "null", "ResponseContentType": "a/b"}
    )
    verifier().verify(req)


def test_presigned_rejects_unsigned_amz_headers() -> None:
    req = presign("put_object", {"Bucket": "bucket", "Key": "k"})
    verifier().verify(replace(req, headers=[*req.headers, (b"content-type", b"text/plain")]))
    for name, value in ((b"x-amz-copy-source", b"/secret/key"), (b"x-amz-acl", b"public-read")):
        err = expect("AccessDenied", replace(req, headers=[*req.headers, (name, value)]))
        assert err.fields["HeadersNotSigned"] == name.decode()
    signed = presign("put_object", {"Bucket": "bucket", "Key": "k", "ACL": "public-read"})
    assert b"X-Amz-SignedHeaders=host%3Bx-amz-acl" in signed.query_string
    expect("SignatureDoesNotMatch", signed)  # the signed header must be sent
    verifier().verify(replace(signed, headers=[*signed.headers, (b"x-amz-acl", b"public-read")]))


def test_presigned_expired() -> None:
    req = presign("get_object", {"Bucket": "bucket", "Key": "k"}, expires=60)
    verifier(offset=59).verify(req)
    err = expect("AccessDenied", req, verifier(offset=61))
    assert err.message == "Request has expired" and err.status == 403


def test_presigned_expiry_longer_than_a_week() -> None:
    verifier().verify(presign("get_object", {"Bucket": "b", "Key": "k"}, expires=604800))
    err = expect(
        "AuthorizationQueryParametersError",
        presign("get_object", {"Bucket": "b", "Key": "k"}, expires=604801),
    )
    assert err.status == 400


def test_presigned_not_yet_valid() -> None:
    req = presign("get_object", {"Bucket": "bucket", "Key": "k"})
    expect("AccessDenied", req, verifier(offset=-16 * 60))


@pytest.mark.parametrize(
    ("old", "new", "code"),
    [
        (b"X-Amz-Expires=3600", b"X-Amz-Expires=7200", "SignatureDoesNotMatch"),
        (b"X-Amz-Expires=3600", b"X-Amz-Expires=abc", "AuthorizationQueryParametersError"),
        (b"X-Amz-Expires=3600", b"X-Amz-Expires=-1", "AuthorizationQueryParametersError"),
        (
            b"X-Amz-Expires=3600",
            b"X-Amz-Expires=99999999999999999999999",
            "AuthorizationQueryParametersError",
        ),
        (b"X-Amz-Expires=3600&", b"", "AuthorizationQueryParametersError"),
        (
            b"X-Amz-Algorithm=AWS4-HMAC-SHA256",
            b"X-Amz-Algorithm=AWS4-HMAC-SHA1",
            "AuthorizationQueryParametersError",
        ),
        (b"X-Amz-SignedHeaders=host", b"X-Amz-SignedHeaders=x-amz-date", "AuthorizationQueryParametersError"),
        (b"X-Amz-SignedHeaders=host", b"X-Amz-SignedHeaders=", "AuthorizationQueryParametersError"),
        (b"%2Fs3%2F", b"%2Fec2%2F", "AuthorizationQueryParametersError"),
        (b"%2Faws4_request", b"%2Faws4_requestx", "AuthorizationQueryParametersError"),
        (b"X-Amz-Credential=" + AK.encode(), b"X-Amz-Credential=AKIDUNKNOWN", "InvalidAccessKeyId"),
        (b"X-Amz-Signature=", b"X-Amz-Signature=0", "SignatureDoesNotMatch"),
        (b"X-Amz-Date=2", b"X-Amz-Date=x", "AuthorizationQueryParametersError"),
    ],
)
def test_presigned_tampering(old: bytes, new: bytes, code: str) -> None:
    req = presign("get_object", {"Bucket": "bucket", "Key": "k"})
    assert old in req.query_string
    expect(code, replace(req, query_string=req.query_string.replace(old, new, 1)))


def test_presigned_tampered_path_and_extra_param() -> None:
    req = presign("get_object", {"Bucket": "bucket", "Key": "k"})
    expect("SignatureDoesNotMatch", replace(req, raw_path=b"/bucket/other"))
    expect("SignatureDoesNotMatch", replace(req, query_string=req.query_string + b"&versionId=1"))
    expect("SignatureDoesNotMatch", replace(req, method="DELETE"))
    dup = req.query_string + b"&X-Amz-Signature=" + b"0" * 64
    expect("AuthorizationQueryParametersError", replace(req, query_string=dup))


def test_presigned_payload_hash_from_query_param() -> None:
    digest = "a" * 64
    url = f"https://ferry.test/bucket/k?x-amz-content-sha256={digest}"
    request = AWSRequest(method="PUT", url=url)

    class PinnedHash(botocore.auth.S3SigV4QueryAuth):
        def payload(self, request: Any) -> str:
            return digest

    signer = PinnedHash(Credentials(AK, SECRET), "s3", "us-east-1", expires=60)
    signer.add_auth(request)
    req = parts_from("PUT", request.url, {})
    result = verifier().verify(req)
    assert result.presigned and result.content_sha256 == digest


# -- query string canonicalisation ---------------------------------------------------------


def test_query_encoding_variants_are_equivalent() -> None:
    req = capture("list_objects_v2", Bucket="bucket", Prefix="a b/c~d", Delimiter="/")
    assert b"prefix=a%20b%2Fc~d" in req.query_string
    v = verifier()
    v.verify(req)
    # Lower-case escapes, an escaped unreserved char and '+' for space all decode the same.
    for variant in (b"prefix=a%20b%2fc~d", b"prefix=a+b%2Fc%7Ed", b"prefix=a+b/c~d"):
        v.verify(replace(req, query_string=req.query_string.replace(b"prefix=a%20b%2Fc~d", variant)))


def test_literal_plus_in_query_cannot_be_turned_into_space() -> None:
    req = capture("list_objects_v2", Bucket="bucket", Prefix="a+b")
    assert b"prefix=a%2Bb" in req.query_string
    verifier().verify(req)
    tampered = replace(req, query_string=req.query_string.replace(b"a%2Bb", b"a+b"))
    expect("SignatureDoesNotMatch", tampered)


def test_query_parameter_order_does_not_matter() -> None:
    req = capture("upload_part", Bucket="bucket", Key="k", PartNumber=1, UploadId="x", Body=b"p")
    swapped = b"&".join(reversed(req.query_string.split(b"&")))
    assert swapped != req.query_string
    verifier().verify(replace(req, query_string=swapped))


def _requote(part: bytes) -> str:
    return quote(unquote_to_bytes(part.replace(b"+", b" ")), safe="-_.~")


def _reference_canonical_query(qs: bytes) -> list[tuple[str, str]]:
    """The slow, obviously-right canonicalisation: decode everything, re-encode everything."""
    out = []
    for segment in qs.split(b"&"):
        name, eq, value = segment.partition(b"=")
        if name or eq:
            out.append((_requote(name), _requote(value)))
    return sorted(out)


_QUERY_BYTES = st.lists(
    st.sampled_from([b"a", b"Z", b"0", b"-", b".", b"_", b"~", b"=", b"&", b"+", b"%", b"/", b" ", b"\xc3"])
    | st.sampled_from([b"%2F", b"%2f", b"%7E", b"%41", b"%20", b"%2B", b"%25", b"%C3%BC", b"%3D", b"%26"]),
    max_size=30,
).map(b"".join)


@FUZZ
@given(_QUERY_BYTES | st.binary(max_size=40))
def test_canonical_query_fast_path_matches_reference(qs: bytes) -> None:
    assert canonical_query_pairs(qs) == _reference_canonical_query(qs)


@settings(max_examples=60, deadline=None)
@given(
    key=st.text(min_size=1, max_size=80),
    prefix=st.text(max_size=20),
    token=st.text(max_size=20),
)
def test_fuzz_botocore_keys_and_query_values_verify(key: str, prefix: str, token: str) -> None:
    v = verifier()
    v.verify(capture("get_object", Bucket="bucket", Key=key))
    params: dict[str, Any] = {"Bucket": "bucket", "Prefix": prefix}
    if token:
        params["ContinuationToken"] = token
    v.verify(capture("list_objects_v2", **params))
    v.verify(presign("get_object", {"Bucket": "bucket", "Key": key}))


# -- header auth negatives -----------------------------------------------------------------


def test_wrong_secret() -> None:
    req = capture("get_object", client(secret="not-the-secret"), Bucket="bucket", Key="k")
    err = expect("SignatureDoesNotMatch", req)
    assert err.status == 403
    assert err.fields["AWSAccessKeyId"] == AK
    assert "GET\n/bucket/k\n" in err.fields["CanonicalRequest"]


def test_unknown_access_key() -> None:
    req = capture("get_object", client(ak="AKIDNOBODY"), Bucket="bucket", Key="k")
    assert expect("InvalidAccessKeyId", req).status == 403


def test_other_known_key_verifies_with_its_own_secret() -> None:
    req = capture("get_object", client(ak=OTHER_AK, secret=OTHER_SECRET), Bucket="bucket", Key="k")
    assert verifier().verify(req).access_key == OTHER_AK


@pytest.mark.parametrize(
    "tamper",
    [
        lambda r: replace(r, raw_path=r.raw_path + b"x"),
        lambda r: replace(r, raw_path=r.raw_path.replace(b"/k", b"/%6B")),  # no decoding of the path
        lambda r: replace(r, raw_path=b"/bucket//k"),
        lambda r: replace(r, query_string=b"versionId=null"),
        lambda r: replace(r, query_string=r.query_string + b"&x=1"),
        lambda r: replace(r, method="DELETE"),
        lambda r: set_header(r, b"range", b"bytes=0-10"),
        lambda r: set_header(r, b"x-amz-content-sha256", b"UNSIGNED-PAYLOAD"),
        lambda r: set_header(r, b"x-amz-content-sha256", b"f" * 64),
        lambda r: set_header(r, b"host", b"evil.example"),
        lambda r: replace(r, headers=[*r.headers, (b"range", b"bytes=0-1")]),  # duplicate signed header
    ],
)
def test_tampering_breaks_signature(tamper: Any) -> None:
    req = capture("get_object", Bucket="bucket", Key="k", Range="bytes=0-9")
    verifier().verify(req)
    err = expect("SignatureDoesNotMatch", tamper(req))
    assert err.status == 403


def test_tampered_signature() -> None:
    req = capture("get_object", Bucket="bucket", Key="k")
    auth = header(req, b"authorization")
    flipped = auth[:-1] + (b"0" if auth[-1:] != b"0" else b"1")
    expect("SignatureDoesNotMatch", set_header(req, b"authorization", flipped))
    expect("SignatureDoesNotMatch", set_header(req, b"authorization", auth[:-64] + "é".encode() * 32))


@pytest.mark.parametrize("offset", [16 * 60, -16 * 60, 86400 * 3])
def test_clock_skew(offset: float) -> None:
    req = capture("get_object", Bucket="bucket", Key="k")
    err = expect("RequestTimeTooSkewed", req, verifier(offset=offset))
    assert err.status == 403
    assert err.fields["MaxAllowedSkewMilliseconds"] == "900000"


def test_small_skew_is_fine() -> None:
    req = capture("get_object", Bucket="bucket", Key="k")
    for offset in (-14 * 60, 14 * 60):
        verifier(offset=offset).verify(req)


def test_missing_content_sha256_header() -> None:
    req = capture("get_object", Bucket="bucket", Key="k")
    err = expect("InvalidRequest", set_header(req, b"x-amz-content-sha256", None))
    assert "x-amz-content-sha256" in err.message


def test_duplicate_content_sha256_header() -> None:
    req = capture("get_object", client(payload_signing=False), Bucket="bucket", Key="k")
    dup = replace(req, headers=[*req.headers, (b"x-amz-content-sha256", b"e" * 64)])
    expect("InvalidArgument", dup)


def test_invalid_content_sha256_header() -> None:
    req = capture("get_object", Bucket="bucket", Key="k")
    expect("InvalidArgument", set_header(req, b"x-amz-content-sha256", b"not-a-hash"))


def test_missing_or_bad_date() -> None:
    req = capture("get_object", Bucket="bucket", Key="k")
    assert expect("AccessDenied", set_header(req, b"x-amz-date", None)).status == 403
    expect("AccessDenied", set_header(req, b"x-amz-date", b"20261399T000000Z"))
    expect("AccessDenied", set_header(req, b"x-amz-date", b"yesterday"))


def test_credential_date_must_match_x_amz_date() -> None:
    req = capture("get_object", Bucket="bucket", Key="k")
    auth = header(req, b"authorization").decode()
    day = header(req, b"x-amz-date").decode()[:8]
    bad = auth.replace(f"/{day}/", "/19991231/")
    expect("AuthorizationHeaderMalformed", set_header(req, b"authorization", bad.encode()))


def test_host_must_be_signed() -> None:
    req = capture("get_object", Bucket="bucket", Key="k")
    auth = header(req, b"authorization").replace(b"SignedHeaders=host;", b"SignedHeaders=")
    expect("AuthorizationHeaderMalformed", set_header(req, b"authorization", auth))


def test_sigv2_is_rejected() -> None:
    req = capture("get_object", Bucket="bucket", Key="k")
    err = expect("InvalidRequest", set_header(req, b"authorization", b"AWS AKID:c2lnbmF0dXJl"))
    assert "Signature version 2" in err.message
    v2_query = RequestParts(
        "GET", b"/bucket/k", b"AWSAccessKeyId=AKID&Expires=1700000000&Signature=abc%3D", [(b"host", b"h")]
    )
    assert has_auth(v2_query)
    expect("InvalidRequest", v2_query)


def test_header_and_query_auth_together() -> None:
    req = presign("get_object", {"Bucket": "bucket", "Key": "k"})
    signed = capture("get_object", Bucket="bucket", Key="k")
    both = replace(req, headers=[*req.headers, (b"authorization", header(signed, b"authorization"))])
    expect("InvalidArgument", both)


MALFORMED = [
    b"",
    b"AWS4-HMAC-SHA256",
    b"AWS4-HMAC-SHA256 ",
    b"AWS4-HMAC-SHA256 Credential=",
    b"AWS4-HMAC-SHA256 Credential=AKID/20261129/us-east-1/s3/aws4_request",
    b"AWS4-HMAC-SHA256 Credential=AKID/20261129/us-east-1/s3/aws4_request, SignedHeaders=host",
    b"AWS4-HMAC-SHA256 Credential=AKID/20261129/us-east-1/s3, SignedHeaders=host, Signature=00",
    b"AWS4-HMAC-SHA256 Credential=AKID/2026/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00",
    b"AWS4-HMAC-SHA256 Credential=AKID/20261129/us-east-1/ec2/aws4_request, SignedHeaders=host, Signature=0",
    b"AWS4-HMAC-SHA256 Credential=AKID/20261129/us-east-1/s3/aws5_request, SignedHeaders=host, Signature=0",
    b"AWS4-HMAC-SHA256 Credential=AKID//us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0",
    b"AWS4-HMAC-SHA256 Credential=AKID/20261129//s3/aws4_request, SignedHeaders=host, Signature=0",
    b"AWS4-HMAC-SHA256 Credential=/20261129/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=0",
    b"AWS4-HMAC-SHA256 Credential=AKID/20261129/us-east-1/s3/aws4_request, SignedHeaders=, Signature=0",
    b"AWS4-HMAC-SHA256 Credential=AKID/20261129/us-east-1/s3/aws4_request, SignedHeaders=host;;a, Signature=",
    b"AWS4-HMAC-SHA256 Credential=AKID/20261129/us-east-1/s3/aws4_request, SignedHeaders=range, Signature=0",
    b"AWS4-HMAC-SHA256 Credential=a/20261129/r/s3/aws4_request, Credential=a, SignedHeaders=host, Signature=",
    b"AWS4-HMAC-SHA256 Credential=a/20261129/r/s3/aws4_request, SignedHeaders=host, Signature=0, Foo=bar",
    b"AWS4-HMAC-SHA256 Credential=a/20261129/r/s3/aws4_request SignedHeaders=host Signature=0",
    "AWS4-HMAC-SHA256 Credential=ключ/20261129/r/s3/aws4_request, SignedHeaders=host, Signature=0".encode(),
    b"AWS4-HMAC-SHA256 Credential=a/\xff\xfe/r/s3/aws4_request, SignedHeaders=host, Signature=0",
    b"AWS4-HMAC-SHA256Credential=a/20261129/r/s3/aws4_request,SignedHeaders=host,Signature=0",
    b"Bearer abc",
    b"AWS4-ECDSA-P256-SHA256 Credential=a/20261129/s3/aws4_request, SignedHeaders=host, Signature=0",
    b"aws4-hmac-sha256 Credential=a/20261129/r/s3/aws4_request, SignedHeaders=host, Signature=0",
]


@pytest.mark.parametrize("auth", MALFORMED)
def test_malformed_authorization_headers(auth: bytes) -> None:
    req = capture("get_object", Bucket="bucket", Key="k")
    with pytest.raises(S3Error) as info:
        verifier().verify(set_header(req, b"authorization", auth))
    assert 400 <= info.value.status < 500
    assert info.value.code in {
        "AuthorizationHeaderMalformed",
        "InvalidArgument",
        "InvalidRequest",
        "AccessDenied",
        "SignatureDoesNotMatch",
    }


def test_malformed_component_list_reports_header_malformed() -> None:
    req = capture("get_object", Bucket="bucket", Key="k")
    for auth in MALFORMED[1:19]:
        err = expect("AuthorizationHeaderMalformed", set_header(req, b"authorization", auth))
        assert err.status == 400


@cache
def _fuzz_base() -> RequestParts:
    return capture("get_object", Bucket="bucket", Key="k")


def _assert_4xx(req: RequestParts) -> None:
    try:
        verifier().verify(req)
    except S3Error as err:
        assert 400 <= err.status < 500, (err.code, err.message)
    else:
        pytest.fail("garbage verified")


@FUZZ
@given(st.binary(max_size=400) | st.text(max_size=400).map(lambda s: s.encode("utf-8")))
def test_fuzz_arbitrary_authorization_header(auth: bytes) -> None:
    _assert_4xx(set_header(_fuzz_base(), b"authorization", auth))


_TOKENS = st.sampled_from(
    [
        "AWS4-HMAC-SHA256 ",
        "AWS ",
        "Credential=",
        "SignedHeaders=",
        "Signature=",
        "/",
        ",",
        ", ",
        ";",
        "=",
        " ",
        "host",
        "x-amz-date",
        "AKIDFERRYTEST0001",
        "20261129",
        "us-east-1",
        "s3",
        "aws4_request",
        "0" * 64,
        "é",
        "\x00",
        "\t",
    ]
)


@FUZZ
@given(st.lists(_TOKENS | st.text(max_size=5), max_size=30).map("".join))
def test_fuzz_structured_authorization_header(auth: str) -> None:
    _assert_4xx(set_header(_fuzz_base(), b"authorization", ("AWS4-HMAC-SHA256 " + auth).encode()))


@FUZZ
@given(
    st.lists(
        st.sampled_from(
            [
                "X-Amz-Algorithm=AWS4-HMAC-SHA256",
                "X-Amz-Credential=AKIDFERRYTEST0001%2F20261129%2Fus-east-1%2Fs3%2Faws4_request",
                "X-Amz-Date=20261129T000000Z",
                "X-Amz-Expires=",
                "X-Amz-SignedHeaders=host",
                "X-Amz-Signature=",
                "&",
                "=",
                "%",
                "%ZZ",
                "+",
                "%C3",
                "X-Amz-Expires=9",
                "x-amz-content-sha256=",
            ]
        )
        | st.text(max_size=6),
        max_size=20,
    ).map("".join)
)
def test_fuzz_presigned_query(query: str) -> None:
    req = RequestParts(
        "GET", b"/bucket/k", ("X-Amz-Algorithm=AWS4-HMAC-SHA256&" + query).encode(), [(b"host", b"h")]
    )
    _assert_4xx(req)


# -- helpers -------------------------------------------------------------------------------


def test_has_auth() -> None:
    signed = capture("get_object", Bucket="bucket", Key="k")
    assert has_auth(signed)
    assert has_auth(presign("get_object", {"Bucket": "bucket", "Key": "k"}))
    anonymous = RequestParts("GET", b"/bucket/k", b"prefix=X-Amz-Foo&list-type=2", [(b"host", b"h")])
    assert not has_auth(anonymous)
    assert not has_auth(RequestParts("GET", b"/", b"", []))
    encoded = RequestParts("GET", b"/", b"X%2DAmz%2DAlgorithm=AWS4-HMAC-SHA256", [])
    assert has_auth(encoded)
    expect("AccessDenied", anonymous)


def test_signing_keys_are_cached() -> None:
    calls = 0
    real = derive_signing_key

    def counting(*args: Any) -> bytes:
        nonlocal calls
        calls += 1
        return real(*args)

    v = verifier()
    req = capture("get_object", Bucket="bucket", Key="k")
    with mock.patch("app.s3.sigv4.keys.derive_signing_key", counting):
        for _ in range(5):
            assert v.verify(req).signing_key == real(SECRET, req_day(req), "us-east-1")
    assert calls == 1


def req_day(req: RequestParts) -> str:
    return header(req, b"x-amz-date").decode()[:8]
