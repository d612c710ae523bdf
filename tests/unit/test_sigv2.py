"""SigV2 verification against botocore's own SigV2 signers (``HmacV1Auth``, ``HmacV1QueryAuth``).

Requests are built by a real boto3 client with ``signature_version="s3"`` (header) or
``"s3-query"`` presigning, captured at ``before-send`` as they would go on the wire, then handed
to the verifier as ASGI-style values; negative cases tamper with them.
"""

from __future__ import annotations

import time
from functools import cache
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest
from botocore.config import Config

from app.domain.errors import S3Error
from app.s3.sigv2 import SigV2Verifier
from app.s3.sigv4 import UNSIGNED_PAYLOAD, RequestParts
from app.s3.sigv4.credential import read_credential

AK = "AKIDFERRYV2TEST01"
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
ENDPOINTS = {"path": "https://ferry.test:9000", "virtual": "https://s3.ferry.test"}


def v2_key(req: RequestParts) -> str | None:
    """The access key of the request's SigV2 credential (None: no SigV2 credential)."""
    credential = read_credential(req)
    return credential.access_key if credential is not None and credential.sigv2 else None


def verifier(offset: float = 0.0) -> SigV2Verifier:
    return SigV2Verifier({AK: SECRET}.get, clock=lambda: time.time() + offset)


class _Captured(Exception):
    def __init__(self, request: Any) -> None:
        super().__init__("captured")
        self.request = request


def _stop(request: Any, **_: Any) -> None:
    raise _Captured(request)


@cache
def client(style: str = "path", signature: str = "s3") -> Any:
    c = boto3.client("s3", endpoint_url=ENDPOINTS[style], region_name="us-east-1", aws_access_key_id=AK,
                     aws_secret_access_key=SECRET,
                     config=Config(signature_version=signature, s3={"addressing_style": style},
                                   retries={"max_attempts": 0}))
    c.meta.events.register("before-send", _stop)
    return c


def parts_from(method: str, url: str, headers: Any) -> RequestParts:
    u = urlsplit(url)
    hdrs = [(k.lower().encode("latin-1"), v if isinstance(v, bytes) else v.encode("utf-8"))
            for k, v in headers.items()]
    hdrs.append((b"host", u.netloc.encode("ascii")))
    return RequestParts(method, u.path.encode("ascii"), u.query.encode("ascii"), hdrs)


def capture(operation: str, style: str = "path", **params: Any) -> RequestParts:
    with pytest.raises(_Captured) as info:
        getattr(client(style), operation)(**params)
    req = info.value.request
    return parts_from(req.method, req.url, req.headers)


def presign(operation: str, params: dict[str, Any], expires: int = 3600, style: str = "path") -> RequestParts:
    url = client(style, "s3").generate_presigned_url(operation, Params=params, ExpiresIn=expires)
    method = {"get_object": "GET", "put_object": "PUT", "head_object": "HEAD"}[operation]
    return parts_from(method, url, {})


def prefix(req: RequestParts, bucket: str) -> str:
    """``/bucket`` when botocore addressed the bucket in the host name (it may not, for SigV2)."""
    host = dict(req.headers)[b"host"].decode()
    return "/" + bucket if host.startswith(bucket + ".") else ""


@pytest.mark.parametrize("style", ["path", "virtual"])
@pytest.mark.parametrize(("operation", "params"), [
    ("get_object", {"Bucket": "b", "Key": "dir/a key+plus~é"}),
    ("get_object", {"Bucket": "b", "Key": "k", "ResponseContentType": "text/x y", "VersionId": "v1"}),
    ("put_object", {"Bucket": "b", "Key": "k", "Body": b"hello", "ContentType": "text/plain",
                    "Metadata": {"Owner": "Me", "b": " spaced "}}),
    ("list_objects_v2", {"Bucket": "b", "Prefix": "p/", "Delimiter": "/"}),
    ("list_multipart_uploads", {"Bucket": "b"}),
    ("upload_part", {"Bucket": "b", "Key": "k", "UploadId": "u/+=", "PartNumber": 3, "Body": b"x"}),
    ("delete_objects", {"Bucket": "b", "Delete": {"Objects": [{"Key": "a"}]}}),
])
def test_header_signatures_from_botocore_verify(style: str, operation: str, params: dict[str, Any]) -> None:
    req = capture(operation, style, **params)
    assert v2_key(req) == AK
    result = verifier().verify(req, prefix(req, "b"))
    assert result.access_key == AK and not result.presigned and result.content_sha256 == UNSIGNED_PAYLOAD


@pytest.mark.parametrize("style", ["path", "virtual"])
@pytest.mark.parametrize(("operation", "params"), [
    ("get_object", {"Bucket": "b", "Key": "ключ/with space&?=#"}),
    ("get_object", {"Bucket": "b", "Key": "k", "ResponseContentDisposition": "attachment; filename=a b"}),
    ("put_object", {"Bucket": "b", "Key": "k"}),
    ("head_object", {"Bucket": "b", "Key": "k"}),
])
def test_presigned_urls_from_botocore_verify(style: str, operation: str, params: dict[str, Any]) -> None:
    req = presign(operation, params, style=style)
    assert v2_key(req) == AK
    result = verifier().verify(req, prefix(req, "b"))
    assert result.presigned and result.access_key == AK


def _tamper_header(req: RequestParts, name: bytes, value: bytes) -> RequestParts:
    headers = [(n, v) for n, v in req.headers if n != name] + [(name, value)]
    return RequestParts(req.method, req.raw_path, req.query_string, headers)


def test_wrong_secret_is_signature_does_not_match_with_the_string_to_sign() -> None:
    req = capture("get_object", Bucket="b", Key="k")
    with pytest.raises(S3Error) as info:
        SigV2Verifier({AK: "not the secret"}.get).verify(req)
    err = info.value
    assert err.code == "SignatureDoesNotMatch" and err.status == 403
    assert err.fields["StringToSign"].startswith("GET\n\n\n") and err.fields["StringToSign"].endswith("/b/k")
    assert err.fields["StringToSignBytes"].startswith("47 45 54 0a")


@pytest.mark.parametrize(("name", "value"), [
    (b"content-type", b"application/evil"),
    (b"x-amz-meta-owner", b"someone else"),
    (b"content-md5", b"1B2M2Y8AsgTpgAmY7PhCfg=="),
])
def test_altered_signed_header_is_refused(name: bytes, value: bytes) -> None:
    req = capture("put_object", Bucket="b", Key="k", Body=b"hi", ContentType="text/plain",
                  Metadata={"owner": "me"})
    with pytest.raises(S3Error) as info:
        verifier().verify(_tamper_header(req, name, value))
    assert info.value.code == "SignatureDoesNotMatch"


def test_altered_path_and_subresource_are_refused() -> None:
    req = capture("get_object", Bucket="b", Key="k", VersionId="v1")
    moved = RequestParts(req.method, b"/b/other", req.query_string, req.headers)
    other_version = RequestParts(req.method, req.raw_path, b"versionId=v2", req.headers)
    for bad in (moved, other_version):
        with pytest.raises(S3Error) as info:
            verifier().verify(bad)
        assert info.value.code == "SignatureDoesNotMatch"


def test_unknown_key_is_invalid_access_key_id() -> None:
    req = capture("get_object", Bucket="b", Key="k")
    with pytest.raises(S3Error) as info:
        SigV2Verifier({}.get).verify(req)
    assert info.value.code == "InvalidAccessKeyId" and info.value.status == 403


@pytest.mark.parametrize("offset", [-1000, 1000])
def test_header_clock_skew_is_refused(offset: float) -> None:
    req = capture("get_object", Bucket="b", Key="k")
    with pytest.raises(S3Error) as info:
        verifier(offset).verify(req)
    assert info.value.code == "RequestTimeTooSkewed" and info.value.status == 403


def test_header_without_a_date_is_access_denied() -> None:
    req = capture("get_object", Bucket="b", Key="k")
    undated = RequestParts(req.method, req.raw_path, req.query_string,
                           [(n, v) for n, v in req.headers if n != b"date"])
    with pytest.raises(S3Error) as info:
        verifier().verify(undated)
    assert info.value.code == "AccessDenied"


def test_x_amz_date_signs_an_empty_date_line() -> None:
    """S3's rule: with x-amz-date the Date line is empty (and x-amz-date is an amz header)."""
    import base64
    import hashlib
    import hmac
    from email.utils import formatdate

    stamp = formatdate(usegmt=True)
    sts = f"GET\n\n\n\nx-amz-date:{stamp}\n/b/k"
    sig = base64.b64encode(hmac.digest(SECRET.encode(), sts.encode(), hashlib.sha1)).decode()
    req = RequestParts("GET", b"/b/k", b"", [(b"x-amz-date", stamp.encode()),
                                              (b"authorization", f"AWS {AK}:{sig}".encode())])
    assert verifier().verify(req).access_key == AK


def test_expired_presigned_url_is_refused() -> None:
    req = presign("get_object", {"Bucket": "b", "Key": "k"}, expires=60)
    assert verifier(30).verify(req).presigned
    with pytest.raises(S3Error) as info:
        verifier(120).verify(req)
    assert info.value.code == "AccessDenied" and info.value.message == "Request has expired"


def test_presigned_url_valid_for_more_than_a_week_is_refused() -> None:
    """SigV2 signs no start time, so Expires alone bounds the URL: at most SigV4's week from now
    (issue 25: year 33658 was accepted)."""
    assert verifier().verify(presign("get_object", {"Bucket": "b", "Key": "k"}, expires=7 * 86400)).presigned
    for expires in (8 * 86400, 999999999999 - int(time.time())):
        with pytest.raises(S3Error) as info:
            verifier().verify(presign("get_object", {"Bucket": "b", "Key": "k"}, expires=expires))
        assert (info.value.code, info.value.status) == ("AuthorizationQueryParametersError", 400)


def test_presigned_url_missing_a_parameter_is_refused() -> None:
    req = presign("get_object", {"Bucket": "b", "Key": "k"})
    kept = b"&".join(p for p in req.query_string.split(b"&") if not p.startswith(b"Expires="))
    with pytest.raises(S3Error) as info:
        verifier().verify(RequestParts(req.method, req.raw_path, kept, req.headers))
    assert info.value.code == "AccessDenied"


def test_presigned_url_for_get_does_not_authorise_put() -> None:
    req = presign("get_object", {"Bucket": "b", "Key": "k"})
    with pytest.raises(S3Error) as info:
        verifier().verify(RequestParts("PUT", req.raw_path, req.query_string, req.headers))
    assert info.value.code == "SignatureDoesNotMatch"


def test_malformed_header_is_invalid_argument() -> None:
    req = RequestParts("GET", b"/b/k", b"", [(b"authorization", b"AWS no-colon-here")])
    with pytest.raises(S3Error) as info:
        verifier().verify(req)
    assert info.value.code == "InvalidArgument" and info.value.status == 400


def test_signed_aws_chunked_payload_needs_sigv4() -> None:
    req = capture("get_object", Bucket="b", Key="k")
    streaming = _tamper_header(req, b"x-amz-content-sha256", b"STREAMING-AWS4-HMAC-SHA256-PAYLOAD")
    with pytest.raises(S3Error) as info:
        verifier().verify(streaming)
    assert info.value.code == "InvalidRequest"


def test_sigv4_requests_are_not_taken_for_sigv2() -> None:
    v4 = boto3.client("s3", endpoint_url=ENDPOINTS["path"], region_name="us-east-1", aws_access_key_id=AK,
                      aws_secret_access_key=SECRET, config=Config(signature_version="s3v4"))
    url = v4.generate_presigned_url("get_object", Params={"Bucket": "b", "Key": "k"})
    assert v2_key(parts_from("GET", url, {})) is None
    with pytest.raises(S3Error) as info:  # a malformed SigV4 header is SigV4's error, not SigV2's
        read_credential(RequestParts("GET", b"/", b"", [(b"authorization", b"AWS4-HMAC-SHA256 Credential=x")]))
    assert info.value.code == "AuthorizationHeaderMalformed"
