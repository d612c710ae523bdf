"""AWS Signature Version 2 verification (the ``AWS AK:sig`` header and the query form).

Still what several clients produce by default for presigned URLs (AWS CLI v1's ``aws s3 presign``,
s3fs's ``url()``: botocore's ``HmacV1QueryAuth`` in ``us-east-1``), so Ferry accepts it with the
same secrets, clock rules and errors as SigV4. The string to sign is S3's:

    VERB \\n Content-MD5 \\n Content-Type \\n Date-or-Expires \\n CanonicalizedAmzHeaders CanonicalizedResource

where the resource is the path as sent (with ``/bucket`` in front for virtual-hosted requests) and
the sub-resources S3 lists, sorted, with decoded values. A SigV2 request signs no payload, so its
body is checked only by Content-MD5 or the checksum headers, as with S3.
"""

from __future__ import annotations

import base64
import hmac
import itertools
import time
from collections.abc import Callable
from email.utils import parsedate_to_datetime
from hashlib import sha1
from urllib.parse import unquote, unquote_to_bytes

from app.domain.errors import S3Error
from app.s3.sigv4 import UNSIGNED_PAYLOAD, AuthResult, RequestParts, SecretLookup

__all__ = ["HEADER_SCHEME", "SigV2Verifier", "is_sigv2"]

HEADER_SCHEME = "AWS"
QUERY_PARAMS = ("AWSAccessKeyId", "Signature", "Expires")
# The sub-resources S3 folds into the canonical resource (botocore's HmacV1Auth list).
SUB_RESOURCES = frozenset({
    "accelerate", "acl", "cors", "defaultObjectAcl", "location", "logging", "partNumber", "policy",
    "requestPayment", "torrent", "versioning", "versionId", "versions", "website", "uploads", "uploadId",
    "response-content-type", "response-content-language", "response-expires", "response-cache-control",
    "response-content-disposition", "response-content-encoding", "delete", "lifecycle", "tagging", "restore",
    "storageClass", "notification", "replication", "analytics", "metrics", "inventory", "select",
    "select-type", "object-lock",
})
_STANDARD = ("content-md5", "content-type")


def is_sigv2(req: RequestParts) -> bool:
    """Whether ``req`` carries SigV2 credentials (an ``AWS`` Authorization or ``AWSAccessKeyId``)."""
    for name, value in req.headers:
        if name == b"authorization":
            return value.lstrip().startswith(b"AWS ")
    return b"AWSAccessKeyId=" in req.query_string


def access_key_v2(req: RequestParts) -> str | None:
    """The access key a SigV2 request names, before any check (for the tenant lookup)."""
    for name, value in req.headers:
        if name == b"authorization":
            scheme, _, rest = value.decode("latin-1").strip().partition(" ")
            return rest.rpartition(":")[0] or None if scheme == HEADER_SCHEME else None
    return _query(req.query_string).get("AWSAccessKeyId")


class SigV2Verifier:
    """Verifies SigV2 header and query authentication against the same secret lookup as SigV4."""

    def __init__(self, lookup: SecretLookup, *, max_skew_seconds: int = 900,
                 clock: Callable[[], float] = time.time) -> None:
        self._lookup = lookup
        self._max_skew = max_skew_seconds
        self._clock = clock

    def verify(self, req: RequestParts, bucket_prefix: str = "") -> AuthResult:
        """Authenticate ``req``; ``bucket_prefix`` is ``/bucket`` for a virtual-hosted request."""
        headers = _header_map(req)
        _refuse_signed_streaming(headers)
        auth = headers.get("authorization")
        if auth is not None:
            return self._verify_header(req, headers, auth, bucket_prefix)
        return self._verify_query(req, headers, bucket_prefix)

    def _verify_header(self, req: RequestParts, headers: dict[str, list[str]], auth: list[str],
                       bucket_prefix: str) -> AuthResult:
        if len(auth) != 1:
            raise S3Error("InvalidArgument", "Authorization header is invalid -- one and only one ' ' "
                          "(space) required", ArgumentName="Authorization")
        _scheme, _, credential = auth[0].strip().partition(" ")
        access_key, colon, signature = credential.rpartition(":")
        if not colon or not access_key or not signature:
            raise S3Error("InvalidArgument", "AWS authorization header is invalid.  Expected "
                          "AwsAccessKeyId:signature", ArgumentName="Authorization")
        amz_date = headers.get("x-amz-date")
        date = headers.get("date")
        stamp = (amz_date or date or [""])[0]
        when = _http_date(stamp)
        if when is None:
            raise S3Error("AccessDenied", "AWS authentication requires a valid Date or x-amz-date header")
        now = self._clock()
        if abs(now - when) > self._max_skew:
            raise S3Error("RequestTimeTooSkewed", RequestTime=stamp, ServerTime=_http_now(now),
                          MaxAllowedSkewMilliseconds=str(self._max_skew * 1000))
        # With x-amz-date, S3 signs an empty Date line; botocore signs the Date header it sets.
        date_lines = [""] if amz_date is not None else []
        if date is not None:
            date_lines.append(date[0].strip())
        return self._check(req, headers, {}, access_key, signature, date_lines, bucket_prefix, presigned=False)

    def _verify_query(self, req: RequestParts, headers: dict[str, list[str]], bucket_prefix: str) -> AuthResult:
        params = _query(req.query_string)
        if any(name not in params for name in QUERY_PARAMS):
            raise S3Error("AccessDenied", "Query-string authentication requires the Signature, Expires and "
                          "AWSAccessKeyId parameters")
        raw_expires = params["Expires"]
        if not raw_expires.isascii() or not raw_expires.isdigit() or len(raw_expires) > 12:
            raise S3Error("AccessDenied", "Invalid date (should be seconds since epoch): " + raw_expires[:64])
        now = self._clock()
        if now > int(raw_expires):
            raise S3Error("AccessDenied", "Request has expired", Expires=_http_now(int(raw_expires)),
                          ServerTime=_http_now(now))
        return self._check(req, headers, params, params["AWSAccessKeyId"], params["Signature"], [raw_expires],
                           bucket_prefix, presigned=True)

    def _check(self, req: RequestParts, headers: dict[str, list[str]], params: dict[str, str], access_key: str,
               signature: str, date_lines: list[str], bucket_prefix: str, *, presigned: bool) -> AuthResult:
        secret = self._lookup(access_key)
        if secret is None:
            raise S3Error("InvalidAccessKeyId", AWSAccessKeyId=access_key)
        amz = _amz_headers(headers, params)
        standard = "\n".join(_standard(headers, params, name) for name in _STANDARD)
        sts = ""
        for date_line, resource in itertools.product(date_lines, _resources(req, bucket_prefix)):
            sts = f"{req.method.upper()}\n{standard}\n{date_line}\n{amz}{resource}"
            expected = base64.b64encode(hmac.digest(secret.encode("utf-8"), sts.encode("utf-8"), sha1))
            if hmac.compare_digest(expected, signature.encode("utf-8", "replace")):
                return AuthResult(access_key=access_key, region="", amz_date="", scope="", signature=signature,
                                  signing_key=b"", content_sha256=UNSIGNED_PAYLOAD, presigned=presigned)
        raw = sts.encode("utf-8")
        raise S3Error("SignatureDoesNotMatch", AWSAccessKeyId=access_key, StringToSign=sts,
                      SignatureProvided=signature, StringToSignBytes=" ".join(f"{b:02x}" for b in raw))


def _refuse_signed_streaming(headers: dict[str, list[str]]) -> None:
    """aws-chunked chunk signatures chain from a SigV4 seed: under SigV2 there is none."""
    for value in headers.get("x-amz-content-sha256", []):
        if value.startswith("STREAMING-AWS4-HMAC-SHA256"):
            raise S3Error("InvalidRequest", "Signed aws-chunked payloads need SigV4 authentication")


def _header_map(req: RequestParts) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, value in req.headers:
        out.setdefault(name.decode("latin-1").lower(), []).append(value.decode("latin-1"))
    return out


def _query(qs: bytes) -> dict[str, str]:
    """Query parameters decoded with ``%`` escapes only: a SigV2 signature's ``+`` stays a plus."""
    out: dict[str, str] = {}
    for part in qs.split(b"&"):
        if not part:
            continue
        name, _, value = part.partition(b"=")
        out.setdefault(unquote_to_bytes(name).decode("utf-8", "replace"),
                       unquote_to_bytes(value).decode("utf-8", "replace"))
    return out


def _standard(headers: dict[str, list[str]], params: dict[str, str], name: str) -> str:
    values = headers.get(name)
    if values is not None:
        return values[0].strip()
    return params.get(name, "").strip()  # botocore's presigner moves them into the query


def _amz_headers(headers: dict[str, list[str]], params: dict[str, str]) -> str:
    found = {name: ",".join(v.strip() for v in values) for name, values in headers.items()
             if name.startswith("x-amz-")}
    for name, value in params.items():
        lower = name.lower()
        if lower.startswith("x-amz-") and lower not in found:
            found[lower] = value.strip()
    return "".join(f"{name}:{found[name]}\n" for name in sorted(found))


def _resources(req: RequestParts, bucket_prefix: str) -> list[str]:
    """The canonical resource; a bucket is ``/bucket/`` in it (botocore signs that while it sends
    ``/bucket``), and the path as sent is tried too."""
    path = bucket_prefix + req.raw_path.decode("latin-1")
    sub = _sub_resources(req)
    if path.count("/") == 1 and path != "/":
        return [path + "/" + sub, path + sub]
    return [path + sub]


def _sub_resources(req: RequestParts) -> str:
    subs: list[tuple[str, str | None]] = []
    for part in req.query_string.decode("latin-1").split("&"):
        name, eq, value = part.partition("=")
        if name in SUB_RESOURCES:
            subs.append((name, unquote(value) if eq else None))
    if not subs:
        return ""
    subs.sort(key=lambda pair: pair[0])
    return "?" + "&".join(name if value is None else f"{name}={value}" for name, value in subs)


def _http_date(value: str) -> float | None:
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError):
        return None


def _http_now(ts: float) -> str:
    return time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(ts))
