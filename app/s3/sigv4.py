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
  ``urllib.parse.parse_qsl`` reads it); a literal plus arrives as ``%2B`` from every SDK.
  The router must decode the query the same way (``parse_qsl(qs, keep_blank_values=True)``)
  so the parameters it acts on are exactly the ones that were signed.

The canonical request is built as bytes straight from the ASGI values: no decode/encode round
trip for paths and header values, which is both faster and byte-exact for clients (botocore,
Go, Java) that put UTF-8 header values on the wire and sign those same bytes.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, date
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
_AMZ_DATE = re.compile(r"\d{8}T\d{6}Z", re.ASCII)
_SCOPE_DATE = re.compile(r"\d{8}", re.ASCII)
_EXPIRES = re.compile(r"-?\d+", re.ASCII)
# A query string that is already canonical: unreserved characters, and upper-case escapes of
# everything else (never of an unreserved one). botocore and the other SDKs always send this,
# so the decode/re-encode round trip is skipped for them. Two cheap scans instead of one regex
# with a per-character alternation, which costs ~10x more on a presigned query.
_QUERY_CHARS = re.compile(rb"[A-Za-z0-9\-._~%=&]*")
_NON_CANONICAL_ESCAPE = re.compile(rb"%(?![0189A-F][0-9A-F]|2[0-9A-CF]|3[A-F]|40|5[B-E]|60|7[B-DF])")
# Printable ASCII minus space: the bytes a well-formed request target is made of.
_URI_SAFE = re.compile(rb"[!-~]*")
_URI_KEEP = "".join(chr(c) for c in range(0x21, 0x7F))
_HEADER_NAME = re.compile(r"[!-~]+", re.ASCII)  # visible ASCII; ';' and ',' never reach here
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_IPAD = bytes(x ^ 0x36 for x in range(256))
_OPAD = bytes(x ^ 0x5C for x in range(256))
_QUERY_AUTH_NAMES = frozenset({"X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Signature"})
_V4_QUERY_PARAMS = (
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
_NO_VALUE: list[bytes] = [b""]


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
        if name == b"authorization":
            return True
    qs = req.query_string
    if not qs or (b"X-Amz-" not in qs and b"AWSAccessKeyId" not in qs and b"%" not in qs):
        return False
    names = {name for name, _ in _canonical_query_pairs(qs)}
    return bool(names & _QUERY_AUTH_NAMES) or "AWSAccessKeyId" in names


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
        self._signer = lru_cache(maxsize=SIGNING_KEY_CACHE_SIZE)(_new_signer)

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

    def _verify_header(
        self, req: RequestParts, headers: dict[bytes, list[bytes]], auth: list[bytes]
    ) -> AuthResult:
        fields = _authorization_fields(auth)
        access_key, cred_date, region = _parse_credential(fields["Credential"], _header_error)
        signed = fields["SignedHeaders"]
        signed_names = _parse_signed_headers(signed, _header_error)
        signature = fields["Signature"]

        amz_date, ts = _request_date(headers)
        if cred_date != amz_date[:8]:
            raise _header_error("Invalid credential date. Date is not the same as X-Amz-Date.")
        self._check_skew(amz_date, ts)
        payload = _header_payload_hash(headers)
        signer, scope = self._signer_for(access_key, cred_date, region)
        query = "&".join([f"{n}={v}" for n, v in _canonical_query_pairs(req.query_string)])
        failure = _check_signature(
            req, headers, signed, signed_names, query, payload, amz_date, scope, signer, signature
        )
        if failure is not None:
            raise _mismatch(failure, access_key, signature)
        return AuthResult(access_key=access_key, region=region, amz_date=amz_date, scope=scope,
                          signature=signature, signing_key=signer.key, content_sha256=payload, presigned=False)

    def _check_skew(self, amz_date: str, ts: float) -> None:
        now = self._clock()
        if abs(now - ts) > self._max_skew:
            raise S3Error(
                "RequestTimeTooSkewed",
                RequestTime=amz_date,
                ServerTime=_iso(now),
                MaxAllowedSkewMilliseconds=str(self._max_skew * 1000),
            )

    def _signer_for(self, access_key: str, cred_date: str, region: str) -> tuple[_Signer, str]:
        """The key's signer and the credential scope; an unknown key is InvalidAccessKeyId."""
        secret = self._lookup(access_key)
        if secret is None:
            raise S3Error("InvalidAccessKeyId", AWSAccessKeyId=access_key)
        return self._signer(secret, cred_date, region, SERVICE), f"{cred_date}/{region}/{SERVICE}/{TERMINATOR}"

    def _verify_presigned(
        self, req: RequestParts, headers: dict[bytes, list[bytes]], pairs: list[tuple[str, str]]
    ) -> AuthResult:
        params, pinned = _presigned_params(pairs)
        access_key, cred_date, region = _parse_credential(
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
        if cred_date != amz_date[:8]:
            raise _query_error(
                _QUERY_CRED_PREFIX + "Invalid credential date. Date is not the same as X-Amz-Date."
            )
        self._check_validity(params["X-Amz-Expires"], ts)
        _refuse_unsigned_amz_headers(headers, signed)
        candidates = _payload_candidates(pinned, headers)
        signer, scope = self._signer_for(access_key, cred_date, region)
        query = "&".join([f"{n}={v}" for n, v in pairs if n != "X-Amz-Signature"])
        signature = params["X-Amz-Signature"]
        failure: tuple[bytes, bytes] | None = None
        for payload in candidates:
            failure = _check_signature(
                req, headers, signed, signed_names, query, payload, amz_date, scope, signer, signature
            )
            if failure is None:
                return AuthResult(access_key=access_key, region=region, amz_date=amz_date, scope=scope,
                                  signature=signature, signing_key=signer.key, content_sha256=payload,
                                  presigned=True)
        assert failure is not None
        raise _mismatch(failure, access_key, signature)

    def _check_validity(self, raw_expires: str, ts: float) -> None:
        """X-Amz-Expires is a number of seconds up to a week, and now is inside [date, date + it]."""
        if not _EXPIRES.fullmatch(raw_expires):
            raise _query_error("X-Amz-Expires should be a number")
        if raw_expires.startswith("-"):
            raise _query_error("X-Amz-Expires must be non-negative")
        digits = raw_expires.lstrip("0") or "0"
        if len(digits) > 7 or int(digits) > MAX_PRESIGNED_EXPIRES:  # no int() of a 10 kB number
            raise _query_error("X-Amz-Expires must be less than a week (in seconds) that is 604800")
        expires = int(digits)
        now = self._clock()
        if now > ts + expires:
            raise S3Error(
                "AccessDenied",
                "Request has expired",
                **{"X-Amz-Expires": raw_expires, "Expires": _iso(ts + expires), "ServerTime": _iso(now)},
            )
        if ts - now > self._max_skew:
            raise S3Error("AccessDenied", "Request is not valid yet")


def _authorization_fields(auth: list[bytes]) -> dict[str, str]:
    """Credential, SignedHeaders and Signature of the one AWS4-HMAC-SHA256 Authorization header."""
    if len(auth) != 1:
        raise _header_error("more than one Authorization header was sent.")
    scheme, _, rest = auth[0].decode("latin-1").strip().partition(" ")
    if scheme != ALGORITHM:
        if scheme == "AWS":
            raise S3Error("InvalidRequest", _V2_MESSAGE)
        if scheme == "AWS4-ECDSA-P256-SHA256":
            raise S3Error("InvalidRequest", "SigV4a is not supported, use AWS4-HMAC-SHA256")
        raise S3Error("InvalidArgument", "Unsupported Authorization Type", ArgumentName="Authorization")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        key, eq, value = part.strip().partition("=")
        if not eq or key in fields or key not in ("Credential", "SignedHeaders", "Signature"):
            fields.clear()
            break
        fields[key] = value
    if len(fields) != 3:
        raise _header_error(
            "the authorization header requires three components: Credential, SignedHeaders, "
            "and Signature."
        )
    return fields


def _header_payload_hash(headers: dict[bytes, list[bytes]]) -> str:
    """The one x-amz-content-sha256 a header-signed request must carry, checked for its form."""
    content = headers.get(b"x-amz-content-sha256")
    if content is None:
        raise S3Error("InvalidRequest", "Missing required header for this request: x-amz-content-sha256")
    if len(content) != 1:
        raise S3Error("InvalidArgument", "x-amz-content-sha256 was sent more than once")
    payload = content[0].decode("latin-1")
    _check_payload_hash(payload)
    return payload


def _presigned_params(pairs: list[tuple[str, str]]) -> tuple[dict[str, str], str | None]:
    """The six X-Amz-* query parameters (each once), and a payload hash pinned in the query."""
    params: dict[str, str] = {}
    pinned: str | None = None
    for name, value in pairs:
        if name in _V4_QUERY_PARAMS:
            if name in params:
                raise _query_error(f"{name} was given more than once.")
            params[name] = unquote(value)
        elif name.lower() == "x-amz-content-sha256":
            pinned = unquote(value)
    if len(params) != len(_V4_QUERY_PARAMS):
        raise _query_error(
            "Query-string authentication version 4 requires the X-Amz-Algorithm, X-Amz-Credential, "
            "X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and X-Amz-Expires parameters."
        )
    if params["X-Amz-Algorithm"] != ALGORITHM:
        raise _query_error('X-Amz-Algorithm only supports "AWS4-HMAC-SHA256"')
    return params, pinned


def _refuse_unsigned_amz_headers(headers: dict[bytes, list[bytes]], signed: str) -> None:
    """A presigned URL is a bearer token: without this, its holder could add headers such as
    x-amz-copy-source or x-amz-acl that change what the signed request does."""
    signed_lower = _lower_names(signed)
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
        _check_payload_hash(pinned)
        return [pinned]
    candidates = [UNSIGNED_PAYLOAD]
    content = headers.get(b"x-amz-content-sha256")
    if content is not None:
        value = content[0].decode("latin-1")
        if value in _PAYLOAD_MODES or _HEX64.fullmatch(value):
            candidates.insert(0, value)
    return candidates


class _Signer:
    """A derived key with its HMAC pads pre-hashed.

    Signing then costs two hash-object copies instead of a full HMAC set-up, which under
    OpenSSL 3 is one of the most expensive steps of a verify.
    """

    __slots__ = ("_inner", "_outer", "key")

    def __init__(self, key: bytes) -> None:
        self.key = key
        block = key.ljust(64, b"\0")  # a derived key (32 bytes) is shorter than the SHA-256 block
        self._inner = hashlib.sha256(block.translate(_IPAD))
        self._outer = hashlib.sha256(block.translate(_OPAD))

    def hexdigest(self, msg: bytes) -> str:
        inner = self._inner.copy()
        inner.update(msg)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.hexdigest()


def _new_signer(secret: str, date: str, region: str, service: str) -> _Signer:
    return _Signer(derive_signing_key(secret, date, region, service))


def _check_signature(
    req: RequestParts,
    headers: dict[bytes, list[bytes]],
    signed: str,
    signed_names: tuple[str, ...],
    query: str,
    payload: str,
    amz_date: str,
    scope: str,
    signer: _Signer,
    signature: str,
) -> tuple[bytes, bytes] | None:
    """Rebuild the canonical request and compare in constant time.

    Returns None on a match, else (string to sign, canonical request) for the error report.
    """
    values = [headers.get(name, _NO_VALUE) for name in _lower_names(signed)]
    head = b"\n".join(
        (
            req.method.upper().encode("ascii", "replace"),
            _canonical_uri(req.raw_path),
            query.encode("ascii"),
            b"",
        )
    )
    tail = b"\n" + signed.encode("ascii") + b"\n" + payload.encode("ascii")
    provided = signature.encode("utf-8")
    canonical = head + _canonical_headers(signed_names, values) + tail
    sts = _string_to_sign(amz_date, scope, canonical)
    if hmac.compare_digest(signer.hexdigest(sts).encode("ascii"), provided):
        return None
    # http.client sends str header values as latin-1 while botocore hashes them as UTF-8;
    # both readings describe the same bytes on the wire, so accepting either is safe.
    if any(b >= 0x80 for vs in values for v in vs for b in v):
        transcoded = [[v.decode("latin-1").encode("utf-8") for v in vs] for vs in values]
        alt = head + _canonical_headers(signed_names, transcoded) + tail
        if hmac.compare_digest(signer.hexdigest(_string_to_sign(amz_date, scope, alt)).encode(), provided):
            return None
    return sts, canonical


def _mismatch(failure: tuple[bytes, bytes], access_key: str, signature: str) -> S3Error:
    sts, canonical = failure
    return S3Error(
        "SignatureDoesNotMatch",
        AWSAccessKeyId=access_key,
        StringToSign=sts.decode("utf-8", "replace"),
        SignatureProvided=signature,
        CanonicalRequest=canonical.decode("utf-8", "replace"),
    )


def _canonical_query_pairs(qs: bytes) -> list[tuple[str, str]]:
    """Decode then AWS-encode every query parameter, sorted by name then value.

    Segments without ``=`` become ``name=`` (``?uploads``); empty segments are skipped, like
    ``parse_qsl``. Decoding goes to bytes so invalid UTF-8 survives the round trip unchanged.
    """
    if not qs:
        return []
    if _QUERY_CHARS.fullmatch(qs) and not _NON_CANONICAL_ESCAPE.search(qs):
        # Only a second '=' inside a value can still need escaping.
        pairs = [
            (name, value.replace("=", "%3D") if "=" in value else value)
            for name, eq, value in (segment.partition("=") for segment in qs.decode("ascii").split("&"))
            if name or eq
        ]
    else:
        pairs = [
            (_requote(name), _requote(value))
            for name, eq, value in (segment.partition(b"=") for segment in qs.split(b"&"))
            if name or eq
        ]
    pairs.sort()
    return pairs


def _requote(part: bytes) -> str:
    return quote_from_bytes(unquote_to_bytes(part.replace(b"+", b" ")), safe="-_.~")


def _canonical_uri(raw_path: bytes) -> bytes:
    """The raw path as sent; only bytes that cannot appear in a request target get escaped."""
    if not raw_path:
        return b"/"
    if _URI_SAFE.fullmatch(raw_path):
        return raw_path
    return quote_from_bytes(raw_path, safe=_URI_KEEP).encode("ascii")


def _canonical_headers(names: tuple[str, ...], values: list[list[bytes]]) -> bytes:
    """``name:value\\n`` per signed header, in the order the client listed them."""
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
    access_key, cred_date, region, service, terminator = parts
    if service != SERVICE:
        raise error(f'incorrect service "{service}". This endpoint belongs to "{SERVICE}".')
    if terminator != TERMINATOR:
        raise error(f'incorrect terminal "{terminator}". This endpoint uses "{TERMINATOR}".')
    return access_key, cred_date, region


def _parse_signed_headers(signed: str, error: Callable[[str], S3Error]) -> tuple[str, ...]:
    names = _split_signed_headers(signed) if len(signed) <= 1024 else None
    if names is None:
        raise error(f'the SignedHeaders list "{signed[:256]}" is mal-formed.')
    if b"host" not in _lower_names(signed):
        raise error("the host header must be signed.")
    return names


@lru_cache(maxsize=256)
def _split_signed_headers(signed: str) -> tuple[str, ...] | None:
    # Cached: a client sends the same list on every request of a given kind.
    names = tuple(signed.split(";"))
    return names if all(_HEADER_NAME.fullmatch(n) for n in names) else None


@lru_cache(maxsize=256)
def _lower_names(signed: str) -> tuple[bytes, ...]:
    """Signed header names as ASGI header keys (only called on lists that parsed)."""
    return tuple(n.lower().encode("ascii") for n in signed.split(";"))


def _parse_amz_date(value: str) -> float | None:
    """Seconds since the epoch for ``YYYYMMDDTHHMMSSZ``, or None if it is not one."""
    return _parse_amz_date_cached(value) if len(value) == 16 else None


@lru_cache(maxsize=256)
def _parse_amz_date_cached(value: str) -> float | None:
    # Cached: every request signed within the same second carries the same timestamp.
    if not _AMZ_DATE.fullmatch(value):
        return None
    try:
        day = date(int(value[0:4]), int(value[4:6]), int(value[6:8])).toordinal()  # validates the day
    except ValueError:
        return None
    hour, minute, second = int(value[9:11]), int(value[11:13]), int(value[13:15])
    if hour > 23 or minute > 59 or second > 59:
        return None
    return float((day - _EPOCH_ORDINAL) * 86400 + hour * 3600 + minute * 60 + second)


def _request_date(headers: dict[bytes, list[bytes]]) -> tuple[str, float]:
    """The SigV4 timestamp from X-Amz-Date, else from Date (RFC 1123, reformatted)."""
    x_amz_date = headers.get(b"x-amz-date")
    if x_amz_date is not None:
        amz_date = x_amz_date[0].decode("latin-1")
        ts = _parse_amz_date(amz_date)
        if ts is not None:
            return amz_date, ts
    else:
        http_date = headers.get(b"date")
        if http_date is not None:
            try:
                parsed = parsedate_to_datetime(http_date[0].decode("latin-1"))
            except (TypeError, ValueError, IndexError, OverflowError):
                parsed = None
            if parsed is not None:
                if parsed.tzinfo is None:
                    parsed = parsed.replace(tzinfo=UTC)
                ts = parsed.timestamp()
                return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(ts)), ts
    raise S3Error("AccessDenied", "AWS authentication requires a valid Date or x-amz-date header")


def _header_map(headers: Sequence[tuple[bytes, bytes]]) -> dict[bytes, list[bytes]]:
    """Header values by name; ASGI already lower-cases names, so they are used as they come."""
    out: dict[bytes, list[bytes]] = {}
    for name, value in headers:
        values = out.get(name)
        if values is None:
            out[name] = [value]
        else:
            values.append(value)
    return out


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


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _header_error(detail: str) -> S3Error:
    return S3Error("AuthorizationHeaderMalformed", _HEADER_PREFIX + detail)


def _query_error(message: str) -> S3Error:
    return S3Error("AuthorizationQueryParametersError", message)
