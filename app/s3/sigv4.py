"""AWS Signature Version 4 verification for incoming S3 requests (server side).

The S3 front door is a raw ASGI app, so this module takes the request as plain values
(``RequestParts``) and knows nothing about any web framework. Every failure is an ``S3Error``
with the code S3 itself would answer, so clients see familiar errors.

Canonicalisation follows what S3 (and botocore's ``S3SigV4Auth``) do, which differs from the
generic SigV4 rules in two places that matter:

* the canonical URI is the raw path exactly as it came over the wire - S3 neither
  normalises (``..``, ``//``) nor double-encodes it;
* the canonical query string is rebuilt from the decoded parameters, so ``%2f`` and ``%2F``
  or ``%7E`` and ``~`` verify alike. A raw ``+`` in the query means a space (form decoding, as
  ``urllib.parse.parse_qsl`` and S3 read it); a literal plus arrives as ``%2B`` from every SDK.
  The router must decode the query the same way (``parse_qsl(qs, keep_blank_values=True)``)
  so the parameters it acts on are exactly the ones that were signed.

The canonical request is built as bytes straight from the ASGI values: no decode/encode round
trip for paths and header values, which is both faster and byte-exact for clients (Go, Java)
that sign raw UTF-8 header bytes.
"""

from __future__ import annotations

import calendar
import hashlib
import hmac
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from functools import lru_cache
from typing import Protocol
from urllib.parse import quote_from_bytes, unquote, unquote_to_bytes

from app.domain.errors import S3Error

__all__ = [
    "ALGORITHM",
    "MAX_PRESIGNED_EXPIRES",
    "STREAMING_HMAC_PAYLOAD",
    "STREAMING_HMAC_PAYLOAD_TRAILER",
    "STREAMING_UNSIGNED_PAYLOAD_TRAILER",
    "UNSIGNED_PAYLOAD",
    "AuthResult",
    "RequestParts",
    "SecretLookup",
    "SigV4Verifier",
    "derive_signing_key",
    "has_auth",
]

ALGORITHM = "AWS4-HMAC-SHA256"
SERVICE = "s3"
TERMINATOR = "aws4_request"
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
STREAMING_UNSIGNED_PAYLOAD_TRAILER = "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
STREAMING_HMAC_PAYLOAD = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
STREAMING_HMAC_PAYLOAD_TRAILER = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER"
MAX_PRESIGNED_EXPIRES = 604800  # one week, the S3 limit
SIGNING_KEY_CACHE_SIZE = 1024

# Values x-amz-content-sha256 may carry besides a hex digest. The SigV4a (ECDSA) streaming
# modes pass here on purpose: the aws-chunked decoder rejects them with NotImplemented.
_PAYLOAD_MODES = frozenset(
    {
        UNSIGNED_PAYLOAD,
        STREAMING_UNSIGNED_PAYLOAD_TRAILER,
        STREAMING_HMAC_PAYLOAD,
        STREAMING_HMAC_PAYLOAD_TRAILER,
        "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD",
        "STREAMING-AWS4-ECDSA-P256-SHA256-PAYLOAD-TRAILER",
    }
)
_HEX64 = re.compile(r"[0-9a-fA-F]{64}", re.ASCII)
_AMZ_DATE = re.compile(r"(\d{4})(\d\d)(\d\d)T(\d\d)(\d\d)(\d\d)Z", re.ASCII)
_SCOPE_DATE = re.compile(r"\d{8}", re.ASCII)
_EXPIRES = re.compile(r"-?\d+", re.ASCII)
# A query name or value made only of unreserved characters is already in canonical form.
_UNRESERVED = re.compile(rb"[A-Za-z0-9\-._~]*")
# Printable ASCII minus space: the bytes a well-formed request target is made of.
_URI_SAFE = re.compile(rb"[!-~]*")
_URI_KEEP = "".join(chr(c) for c in range(0x21, 0x7F))
_HEADER_NAME = re.compile(r"[!-~]+", re.ASCII)  # visible ASCII; ';' and ',' never reach here
_QUERY_AUTH_NAMES = frozenset({"X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Signature"})
_V4_QUERY_REQUIRED = (
    "X-Amz-Algorithm",
    "X-Amz-Credential",
    "X-Amz-Date",
    "X-Amz-Expires",
    "X-Amz-SignedHeaders",
    "X-Amz-Signature",
)
_HEADER_PREFIX = "The authorization header is malformed; "
_QUERY_CRED_PREFIX = "Error parsing the X-Amz-Credential parameter; "
_V2_MESSAGE = "Signature version 2 is not supported, use AWS4-HMAC-SHA256"


@dataclass(frozen=True, slots=True)
class RequestParts:
    """The pieces of an incoming request that SigV4 covers, straight from the ASGI scope."""

    method: str  # "GET"
    raw_path: bytes  # as received on the wire (scope["raw_path"]), still percent-encoded, no query
    query_string: bytes  # scope["query_string"], raw
    headers: Sequence[tuple[bytes, bytes]]  # scope["headers"] (names lower-case bytes)


@dataclass(frozen=True, slots=True)
class AuthResult:
    """Who signed the request, plus what aws-chunked bodies need to check chunk signatures."""

    access_key: str
    region: str
    amz_date: str  # "20261129T093000Z"
    scope: str  # "20261129/us-east-1/s3/aws4_request"
    signature: str  # the seed signature (aws-chunked chunk signatures chain from it)
    signing_key: bytes  # derived key (aws-chunked chunk signatures use it)
    content_sha256: str  # x-amz-content-sha256 value, or "UNSIGNED-PAYLOAD" for presigned
    presigned: bool


class SecretLookup(Protocol):
    """Maps an access key to its secret; None means unknown or disabled."""

    def __call__(self, access_key: str) -> str | None: ...


def derive_signing_key(secret: str, date: str, region: str, service: str = SERVICE) -> bytes:
    """The SigV4 key chain HMAC(HMAC(HMAC(HMAC("AWS4"+secret, date), region), service), term)."""
    k = hmac.digest(("AWS4" + secret).encode("utf-8"), date.encode("utf-8"), "sha256")
    k = hmac.digest(k, region.encode("utf-8"), "sha256")
    k = hmac.digest(k, service.encode("utf-8"), "sha256")
    return hmac.digest(k, TERMINATOR.encode(), "sha256")


def has_auth(req: RequestParts) -> bool:
    """Whether the request carries any credentials (else the caller treats it as anonymous).

    SigV2 credentials count too, so that ``verify`` can reject them rather than the request
    silently running as anonymous.
    """
    for name, _ in req.headers:
        if name.lower() == b"authorization":
            return True
    qs = req.query_string
    if not qs or (b"X-Amz-" not in qs and b"AWSAccessKeyId" not in qs and b"%" not in qs):
        return False
    names = {name for name, _ in _canonical_query_pairs(qs)}
    return bool(names & _QUERY_AUTH_NAMES) or "AWSAccessKeyId" in names


def _canonical_query_pairs(qs: bytes) -> list[tuple[str, str]]:
    """Decode then AWS-encode every query parameter, sorted by name then value.

    Segments without ``=`` become ``name=`` (``?uploads``); empty segments are skipped, like
    ``parse_qsl``. Decoding goes to bytes so invalid UTF-8 survives the round trip unchanged.
    """
    pairs: list[tuple[str, str]] = []
    if not qs:
        return pairs
    unreserved = _UNRESERVED.fullmatch
    for segment in qs.split(b"&"):
        if not segment:
            continue
        name, _, value = segment.partition(b"=")
        if unreserved(name):
            n = name.decode("ascii")
        else:
            n = quote_from_bytes(unquote_to_bytes(name.replace(b"+", b" ")), safe="-_.~")
        if unreserved(value):
            v = value.decode("ascii")
        else:
            v = quote_from_bytes(unquote_to_bytes(value.replace(b"+", b" ")), safe="-_.~")
        pairs.append((n, v))
    pairs.sort()
    return pairs


def _canonical_uri(raw_path: bytes) -> bytes:
    """The raw path as sent; only bytes that cannot appear in a request target get escaped."""
    if not raw_path:
        return b"/"
    if _URI_SAFE.fullmatch(raw_path):
        return raw_path
    return quote_from_bytes(raw_path, safe=_URI_KEEP).encode("ascii")


def _parse_amz_date(value: str) -> float | None:
    """Seconds since the epoch for ``YYYYMMDDTHHMMSSZ``, or None if it is not one."""
    m = _AMZ_DATE.fullmatch(value)
    if m is None:
        return None
    y, mo, d, h, mi, s = (int(g) for g in m.groups())
    try:
        datetime(y, mo, d, h, mi, s)  # validates ranges; timegm alone would wrap 20261340
    except ValueError:
        return None
    return float(calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)))


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _header_map(headers: Sequence[tuple[bytes, bytes]]) -> dict[bytes, list[bytes]]:
    out: dict[bytes, list[bytes]] = {}
    for name, value in headers:
        lname = name.lower()
        values = out.get(lname)
        if values is None:
            out[lname] = [value]
        else:
            values.append(value)
    return out


def _header_error(detail: str) -> S3Error:
    return S3Error("AuthorizationHeaderMalformed", _HEADER_PREFIX + detail)


def _query_error(message: str) -> S3Error:
    return S3Error("AuthorizationQueryParametersError", message)


class SigV4Verifier:
    """Verifies SigV4 header and presigned (query) authentication against a secret lookup.

    Derived signing keys are cached per (secret, date, region, service) because deriving one
    costs four HMACs and every request from a client on a given day shares the same key.
    """

    def __init__(
        self,
        lookup: SecretLookup,
        *,
        max_skew_seconds: int = 900,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._lookup = lookup
        self._max_skew = max_skew_seconds
        self._clock = clock
        self._signing_key = lru_cache(maxsize=SIGNING_KEY_CACHE_SIZE)(derive_signing_key)

    def verify(self, req: RequestParts) -> AuthResult:
        """Authenticate ``req`` or raise the ``S3Error`` S3 would answer with."""
        headers = _header_map(req.headers)
        auth = headers.get(b"authorization")
        if auth is not None:
            if req.query_string and b"X-Amz-" in req.query_string:
                names = {n for n, _ in _canonical_query_pairs(req.query_string)}
                if names & _QUERY_AUTH_NAMES:
                    raise S3Error(
                        "InvalidArgument",
                        "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter, "
                        "Signature query string parameter or the Authorization header should be specified",
                        ArgumentName="Authorization",
                    )
            return self._verify_header(req, headers, auth)
        pairs = _canonical_query_pairs(req.query_string)
        for name, _ in pairs:
            if name in _QUERY_AUTH_NAMES:
                return self._verify_presigned(req, headers, pairs)
        if any(name == "AWSAccessKeyId" for name, _ in pairs):
            raise S3Error("InvalidRequest", _V2_MESSAGE)
        raise S3Error("AccessDenied", "Request is not signed")

    # -- header auth -------------------------------------------------------------------

    def _verify_header(
        self, req: RequestParts, headers: dict[bytes, list[bytes]], auth: list[bytes]
    ) -> AuthResult:
        if len(auth) != 1:
            raise _header_error("more than one Authorization header was sent.")
        text = auth[0].decode("latin-1").strip()
        scheme, _, rest = text.partition(" ")
        if scheme != ALGORITHM:
            if scheme == "AWS":
                raise S3Error("InvalidRequest", _V2_MESSAGE)
            if scheme == "AWS4-ECDSA-P256-SHA256":
                raise S3Error("InvalidRequest", "SigV4a is not supported, use AWS4-HMAC-SHA256")
            raise S3Error("InvalidArgument", "Unsupported Authorization Type", ArgumentName="Authorization")
        credential = signed = signature = None
        for part in rest.split(","):
            key, eq, value = part.strip().partition("=")
            if not eq:
                credential = None  # forces the three-components error below
                break
            if key == "Credential" and credential is None:
                credential = value
            elif key == "SignedHeaders" and signed is None:
                signed = value
            elif key == "Signature" and signature is None:
                signature = value
            else:
                credential = None
                break
        if credential is None or signed is None or signature is None:
            raise _header_error(
                "the authorization header requires three components: Credential, SignedHeaders, "
                "and Signature."
            )
        access_key, date, region = _parse_credential(credential, _header_error)
        signed_names = _parse_signed_headers(signed, _header_error)

        amz_date, ts = _request_date(headers)
        if date != amz_date[:8]:
            raise _header_error("Invalid credential date. Date is not the same as X-Amz-Date.")
        now = self._clock()
        if abs(now - ts) > self._max_skew:
            raise S3Error(
                "RequestTimeTooSkewed",
                RequestTime=amz_date,
                ServerTime=_iso(now),
                MaxAllowedSkewMilliseconds=str(self._max_skew * 1000),
            )

        content = headers.get(b"x-amz-content-sha256")
        if content is None:
            raise S3Error("InvalidRequest", "Missing required header for this request: x-amz-content-sha256")
        payload = content[0].decode("latin-1")
        _check_payload_hash(payload)

        secret = self._lookup(access_key)
        if secret is None:
            raise S3Error("InvalidAccessKeyId", AWSAccessKeyId=access_key)
        key = self._signing_key(secret, date, region, SERVICE)
        scope = f"{date}/{region}/{SERVICE}/{TERMINATOR}"
        query = "&".join([f"{n}={v}" for n, v in _canonical_query_pairs(req.query_string)])
        self._check_signature(
            req, headers, signed, signed_names, query, payload, amz_date, scope, key, signature, access_key
        )
        return AuthResult(
            access_key=access_key,
            region=region,
            amz_date=amz_date,
            scope=scope,
            signature=signature,
            signing_key=key,
            content_sha256=payload,
            presigned=False,
        )

    # -- query (presigned) auth --------------------------------------------------------

    def _verify_presigned(
        self, req: RequestParts, headers: dict[bytes, list[bytes]], pairs: list[tuple[str, str]]
    ) -> AuthResult:
        params: dict[str, str] = {}
        for name, value in pairs:
            if name in _V4_QUERY_REQUIRED:
                if name in params:
                    raise _query_error(f"{name} was given more than once.")
                params[name] = unquote(value)
        if len(params) != len(_V4_QUERY_REQUIRED):
            raise _query_error(
                "Query-string authentication version 4 requires the X-Amz-Algorithm, X-Amz-Credential, "
                "X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and X-Amz-Expires parameters."
            )
        if params["X-Amz-Algorithm"] != ALGORITHM:
            raise _query_error('X-Amz-Algorithm only supports "AWS4-HMAC-SHA256"')
        access_key, date, region = _parse_credential(
            params["X-Amz-Credential"], lambda detail: _query_error(_QUERY_CRED_PREFIX + detail)
        )
        signed = params["X-Amz-SignedHeaders"]
        signed_names = _parse_signed_headers(
            signed, lambda detail: _query_error("Error parsing the X-Amz-SignedHeaders parameter; " + detail)
        )
        amz_date = params["X-Amz-Date"]
        ts = _parse_amz_date(amz_date)
        if ts is None:
            raise _query_error("X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"")
        if date != amz_date[:8]:
            raise _query_error(
                _QUERY_CRED_PREFIX + "Invalid credential date. Date is not the same as X-Amz-Date."
            )
        raw_expires = params["X-Amz-Expires"]
        if not _EXPIRES.fullmatch(raw_expires):
            raise _query_error("X-Amz-Expires should be a number")
        if raw_expires.startswith("-"):
            raise _query_error("X-Amz-Expires must be non-negative")
        if len(raw_expires) > 7 or int(raw_expires) > MAX_PRESIGNED_EXPIRES:
            raise _query_error("X-Amz-Expires must be less than a week (in seconds) that is 604800")
        expires = int(raw_expires)
        now = self._clock()
        if now > ts + expires:
            raise S3Error(
                "AccessDenied",
                "Request has expired",
                **{"X-Amz-Expires": raw_expires, "Expires": _iso(ts + expires), "ServerTime": _iso(now)},
            )
        if ts - now > self._max_skew:
            raise S3Error("AccessDenied", "Request is not valid yet")

        # UNSIGNED-PAYLOAD unless the signer pinned a hash in the query or (botocore) a header.
        candidates = [UNSIGNED_PAYLOAD]
        for name, value in pairs:
            if name.lower() == "x-amz-content-sha256":
                candidates = [unquote(value)]
                break
        else:
            content = headers.get(b"x-amz-content-sha256")
            if content is not None:
                candidates.insert(0, content[0].decode("latin-1"))
        for payload in candidates:
            _check_payload_hash(payload)

        secret = self._lookup(access_key)
        if secret is None:
            raise S3Error("InvalidAccessKeyId", AWSAccessKeyId=access_key)
        key = self._signing_key(secret, date, region, SERVICE)
        scope = f"{date}/{region}/{SERVICE}/{TERMINATOR}"
        query = "&".join([f"{n}={v}" for n, v in pairs if n != "X-Amz-Signature"])
        signature = params["X-Amz-Signature"]
        for i, payload in enumerate(candidates):
            try:
                self._check_signature(
                    req,
                    headers,
                    signed,
                    signed_names,
                    query,
                    payload,
                    amz_date,
                    scope,
                    key,
                    signature,
                    access_key,
                )
            except S3Error:
                if i == len(candidates) - 1:
                    raise
                continue
            return AuthResult(
                access_key=access_key,
                region=region,
                amz_date=amz_date,
                scope=scope,
                signature=signature,
                signing_key=key,
                content_sha256=payload,
                presigned=True,
            )
        raise AssertionError("unreachable")  # pragma: no cover

    # -- shared ----------------------------------------------------------------------

    def _check_signature(
        self,
        req: RequestParts,
        headers: dict[bytes, list[bytes]],
        signed: str,
        signed_names: list[str],
        query: str,
        payload: str,
        amz_date: str,
        scope: str,
        key: bytes,
        signature: str,
        access_key: str,
    ) -> None:
        """Rebuild the canonical request and compare signatures in constant time."""
        values = [headers.get(name.lower().encode("ascii"), _NO_VALUE) for name in signed_names]
        head = b"\n".join(
            (
                req.method.upper().encode("ascii", "replace"),
                _canonical_uri(req.raw_path),
                query.encode("ascii"),
                b"",
            )
        )
        tail = b"\n" + signed.encode("ascii") + b"\n" + payload.encode("utf-8", "replace")
        provided = signature.encode("utf-8", "replace")

        canonical_headers = _canonical_headers(signed_names, values)
        canonical = head + canonical_headers + tail
        sts = _string_to_sign(amz_date, scope, canonical)
        if hmac.compare_digest(hmac.digest(key, sts, "sha256").hex().encode("ascii"), provided):
            return
        # http.client sends str header values as latin-1 while botocore hashes them as UTF-8;
        # both readings describe the same bytes on the wire, so accepting either is safe.
        if any(b >= 0x80 for vs in values for v in vs for b in v):
            transcoded = [[v.decode("latin-1").encode("utf-8") for v in vs] for vs in values]
            alt = head + _canonical_headers(signed_names, transcoded) + tail
            if hmac.compare_digest(
                hmac.digest(key, _string_to_sign(amz_date, scope, alt), "sha256").hex().encode("ascii"),
                provided,
            ):
                return
        raise S3Error(
            "SignatureDoesNotMatch",
            AWSAccessKeyId=access_key,
            StringToSign=sts.decode("utf-8", "replace"),
            SignatureProvided=signature,
            CanonicalRequest=canonical.decode("utf-8", "replace"),
        )


_NO_VALUE: list[bytes] = [b""]


def _canonical_headers(names: list[str], values: list[list[bytes]]) -> bytes:
    """``name:trimmed,values\\n`` per signed header, in the order the client listed them."""
    lines = []
    for name, vs in zip(names, values, strict=True):
        # Trimall: strip and squeeze whitespace runs; repeated headers join with ','.
        joined = b" ".join(vs[0].split()) if len(vs) == 1 else b",".join([b" ".join(v.split()) for v in vs])
        lines.append(name.encode("ascii") + b":" + joined + b"\n")
    return b"".join(lines)


def _string_to_sign(amz_date: str, scope: str, canonical: bytes) -> bytes:
    return f"{ALGORITHM}\n{amz_date}\n{scope}\n{hashlib.sha256(canonical).hexdigest()}".encode("ascii")


def _parse_credential(credential: str, error: Callable[[str], S3Error]) -> tuple[str, str, str]:
    """Split ``AK/YYYYMMDD/region/s3/aws4_request``; the access key itself may contain '/'."""
    parts = credential.rsplit("/", 4)
    if len(parts) != 5 or not credential.isascii() or not all(parts) or not _SCOPE_DATE.fullmatch(parts[1]):
        raise error(
            'the Credential is mal-formed; expecting "<YOUR-AKID>/YYYYMMDD/REGION/SERVICE/aws4_request".'
        )
    access_key, date, region, service, terminator = parts
    if service != SERVICE:
        raise error(f'incorrect service "{service}". This endpoint belongs to "{SERVICE}".')
    if terminator != TERMINATOR:
        raise error(f'incorrect terminal "{terminator}". This endpoint uses "{TERMINATOR}".')
    return access_key, date, region


def _parse_signed_headers(signed: str, error: Callable[[str], S3Error]) -> list[str]:
    names = signed.split(";")
    for name in names:
        if not _HEADER_NAME.fullmatch(name):
            raise error(f'the SignedHeaders list "{signed}" is mal-formed.')
    if "host" not in (n.lower() for n in names):
        raise error("the host header must be signed.")
    return names


def _request_date(headers: dict[bytes, list[bytes]]) -> tuple[str, float]:
    """The SigV4 timestamp from X-Amz-Date, else from Date (RFC 1123, reformatted)."""
    x_amz_date = headers.get(b"x-amz-date")
    if x_amz_date is not None:
        amz_date = x_amz_date[0].decode("latin-1")
        ts = _parse_amz_date(amz_date)
        if ts is not None:
            return amz_date, ts
    else:
        date = headers.get(b"date")
        if date is not None:
            try:
                parsed = parsedate_to_datetime(date[0].decode("latin-1"))
            except (TypeError, ValueError, IndexError, OverflowError):
                parsed = None
            if parsed is not None:
                if parsed.tzinfo is None:
                    parsed = parsed.replace(tzinfo=UTC)
                ts = parsed.timestamp()
                return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(ts)), ts
    raise S3Error("AccessDenied", "AWS authentication requires a valid Date or x-amz-date header")


def _check_payload_hash(value: str) -> None:
    if value not in _PAYLOAD_MODES and not _HEX64.fullmatch(value):
        raise S3Error(
            "InvalidArgument",
            "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-UNSIGNED-PAYLOAD-TRAILER, "
            "STREAMING-AWS4-HMAC-SHA256-PAYLOAD, STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER, "
            "or a valid sha256 value.",
            ArgumentName="x-amz-content-sha256",
            ArgumentValue=value[:256],
        )
