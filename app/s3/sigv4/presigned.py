"""Query authentication: a presigned URL (``X-Amz-Algorithm``, ``X-Amz-Credential``, ... in the
query), valid for ``X-Amz-Expires`` seconds from its date."""

from __future__ import annotations

import re
from collections.abc import Callable

from app.domain.errors import S3Error
from app.s3.sigv4.canonical import check_signature, lower_names, mismatch
from app.s3.sigv4.credential import Credential
from app.s3.sigv4.fields import (
    HEX64,
    QUERY_CRED_PREFIX,
    check_payload_hash,
    iso,
    parse_amz_date,
    parse_signed_headers,
    query_error,
)
from app.s3.sigv4.header import SignerFor
from app.s3.sigv4.values import PAYLOAD_MODES, UNSIGNED_PAYLOAD, AuthResult, RequestParts

MAX_PRESIGNED_EXPIRES = 604800  # one week, the S3 limit
_EXPIRES = re.compile(r"-?\d+", re.ASCII)


def verify_presigned(req: RequestParts, headers: dict[bytes, list[bytes]], pairs: list[tuple[str, str]],
                     credential: Credential, signer_for: SignerFor, clock: Callable[[], float],
                     max_skew: int) -> AuthResult:
    """Authenticate a presigned request (its ``credential`` read by ``read_credential``) or raise
    the ``S3Error`` S3 would answer with."""
    params = credential.fields
    access_key, cred_date, region = credential.access_key, credential.date, credential.region
    signed = params["X-Amz-SignedHeaders"]
    signed_names = parse_signed_headers(
        signed, lambda detail: query_error("Error parsing the X-Amz-SignedHeaders parameter; " + detail)
    )
    amz_date = params["X-Amz-Date"]
    ts = parse_amz_date(amz_date)
    if ts is None:
        raise query_error("X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"")
    if cred_date != amz_date[:8]:
        raise query_error(
            QUERY_CRED_PREFIX + "Invalid credential date. Date is not the same as X-Amz-Date."
        )
    check_validity(params["X-Amz-Expires"], ts, clock(), max_skew)
    _refuse_unsigned_amz_headers(headers, signed)
    candidates = _payload_candidates(credential.pinned_sha256, headers)
    signer, scope = signer_for(access_key, cred_date, region)
    query = "&".join([f"{n}={v}" for n, v in pairs if n != "X-Amz-Signature"])
    signature = credential.signature
    failure: tuple[bytes, bytes] | None = None
    for payload in candidates:
        failure = check_signature(
            req, headers, signed, signed_names, query, payload, amz_date, scope, signer, signature
        )
        if failure is None:
            return AuthResult(access_key=access_key, region=region, amz_date=amz_date, scope=scope,
                              signature=signature, signing_key=signer.key, content_sha256=payload,
                              presigned=True)
    assert failure is not None
    raise mismatch(failure, access_key, signature)


def check_validity(raw_expires: str, ts: float, now: float, max_skew: int) -> None:
    """X-Amz-Expires is a number of seconds up to a week, and now is inside [date, date + it]."""
    if not _EXPIRES.fullmatch(raw_expires):
        raise query_error("X-Amz-Expires should be a number")
    if raw_expires.startswith("-"):
        raise query_error("X-Amz-Expires must be non-negative")
    digits = raw_expires.lstrip("0") or "0"
    if len(digits) > 7 or int(digits) > MAX_PRESIGNED_EXPIRES:  # no int() of a 10 kB number
        raise query_error("X-Amz-Expires must be less than a week (in seconds) that is 604800")
    expires = int(digits)
    if now > ts + expires:
        raise S3Error(
            "AccessDenied",
            "Request has expired",
            extra={"X-Amz-Expires": raw_expires, "Expires": iso(ts + expires), "ServerTime": iso(now)},
        )
    if ts - now > max_skew:
        raise S3Error("AccessDenied", "Request is not valid yet")


def _refuse_unsigned_amz_headers(headers: dict[bytes, list[bytes]], signed: str) -> None:
    """A presigned URL is a bearer token: without this, its holder could add headers such as
    x-amz-copy-source or x-amz-acl that change what the signed request does."""
    signed_lower = lower_names(signed)
    unsigned = sorted({n for n in headers if n.startswith(b"x-amz-") and n not in signed_lower})
    if unsigned:
        raise S3Error(
            "AccessDenied",
            "There were headers present in the request which were not signed",
            HeadersNotSigned=", ".join(n.decode("latin-1") for n in unsigned),
        )


def _payload_candidates(pinned: str | None, headers: dict[bytes, list[bytes]]) -> list[str]:
    """UNSIGNED-PAYLOAD, unless the signer pinned a hash in the query; botocore also hashes an
    x-amz-content-sha256 *header* into presigned requests, so that is tried first."""
    if pinned is not None:
        check_payload_hash(pinned)
        return [pinned]
    candidates = [UNSIGNED_PAYLOAD]
    content = headers.get(b"x-amz-content-sha256")
    if content is not None:
        value = content[0].decode("latin-1")
        if value in PAYLOAD_MODES or HEX64.fullmatch(value):
            candidates.insert(0, value)
    return candidates
