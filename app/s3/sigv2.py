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
from app.s3.sigv4 import MAX_PRESIGNED_EXPIRES, UNSIGNED_PAYLOAD, AuthResult, RequestParts, SecretLookup
from app.s3.sigv4.credential import HEADER_V2, QUERY_V2, Credential, read_credential

__all__ = ["SigV2Verifier"]

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


class SigV2Verifier:
    """Verifies SigV2 header and query authentication against the same secret lookup as SigV4."""

    def __init__(self, lookup: SecretLookup, *, max_skew_seconds: int = 900,
                 clock: Callable[[], float] = time.time) -> None:
        self._lookup = lookup
        self._max_skew = max_skew_seconds
        self._clock = clock

    def verify(self, req: RequestParts, bucket_prefix: str = "") -> AuthResult:
        """Authenticate ``req``; ``bucket_prefix`` is ``/bucket`` for a virtual-hosted request
        (reads the credential and looks its secret up; the S3 edge calls ``verify_credential``)."""
        credential = read_credential(req)
        if credential is None or not credential.sigv2:
            raise S3Error("AccessDenied", "Request is not signed with Signature Version 2")
        return self.verify_credential(req, credential, self._lookup(credential.access_key), bucket_prefix)

    def verify_credential(self, req: RequestParts, credential: Credential, secret: str | None,
                          bucket_prefix: str = "") -> AuthResult:
        """Check the SigV2 ``credential`` (read once by ``read_credential``) with ``secret``."""
        if not credential.sigv2:
            raise S3Error("InvalidRequest", "Not a Signature Version 2 credential")
        headers = _header_map(req)
        _refuse_signed_streaming(headers)
        if credential.form == HEADER_V2:
            date_lines = self._header_date_lines(headers)
            return self._check(req, headers, {}, credential, secret, date_lines, bucket_prefix)
        raw_expires = credential.fields["Expires"]
        self._check_expires(raw_expires)
        return self._check(req, headers, _query(req.query_string), credential, secret, [raw_expires], bucket_prefix)

    def _header_date_lines(self, headers: dict[str, list[str]]) -> list[str]:
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
        return date_lines

    def _check_expires(self, raw_expires: str) -> None:
        if not raw_expires.isascii() or not raw_expires.isdigit() or len(raw_expires) > 12:
            raise S3Error("AccessDenied", "Invalid date (should be seconds since epoch): " + raw_expires[:64])
        now = self._clock()
        if now > int(raw_expires):
            raise S3Error("AccessDenied", "Request has expired", Expires=_http_now(int(raw_expires)),
                          ServerTime=_http_now(now))
        if int(raw_expires) - now > MAX_PRESIGNED_EXPIRES + self._max_skew:
            # SigV2 signs no start time, so its URL could live for ever; SigV4's week caps it.
            raise S3Error("AuthorizationQueryParametersError", "Expires must be at most a week (604800 "
                          "seconds) from now for Signature Version 2 presigned URLs", Expires=raw_expires)

    def _check(self, req: RequestParts, headers: dict[str, list[str]], params: dict[str, str],
               credential: Credential, secret: str | None, date_lines: list[str], bucket_prefix: str) -> AuthResult:
        access_key, signature = credential.access_key, credential.signature
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
                                  signing_key=b"", content_sha256=UNSIGNED_PAYLOAD,
                                  presigned=credential.form == QUERY_V2)
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
