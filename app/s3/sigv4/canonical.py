"""The canonical request and the signature check (S3's canonicalisation: see the package
docstring), built as bytes straight from the ASGI values."""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Sequence
from functools import lru_cache
from urllib.parse import quote_from_bytes, unquote_to_bytes

from app.domain.errors import S3Error
from app.s3.sigv4.keys import Signer
from app.s3.sigv4.values import ALGORITHM, RequestParts

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
NO_VALUE: list[bytes] = [b""]


def check_signature(
    req: RequestParts,
    headers: dict[bytes, list[bytes]],
    signed: str,
    signed_names: tuple[str, ...],
    query: str,
    payload: str,
    amz_date: str,
    scope: str,
    signer: Signer,
    signature: str,
) -> tuple[bytes, bytes] | None:
    """Rebuild the canonical request and compare in constant time.

    Returns None on a match, else (string to sign, canonical request) for the error report.
    """
    values = [headers.get(name, NO_VALUE) for name in lower_names(signed)]
    head = b"\n".join(
        (
            req.method.upper().encode("ascii", "replace"),
            canonical_uri(req.raw_path),
            query.encode("ascii"),
            b"",
        )
    )
    tail = b"\n" + signed.encode("ascii") + b"\n" + payload.encode("ascii")
    provided = signature.encode("utf-8")
    canonical = head + canonical_headers(signed_names, values) + tail
    sts = string_to_sign(amz_date, scope, canonical)
    if hmac.compare_digest(signer.hexdigest(sts).encode("ascii"), provided):
        return None
    # http.client sends str header values as latin-1 while botocore hashes them as UTF-8;
    # both readings describe the same bytes on the wire, so accepting either is safe.
    if any(b >= 0x80 for vs in values for v in vs for b in v):
        transcoded = [[v.decode("latin-1").encode("utf-8") for v in vs] for vs in values]
        alt = head + canonical_headers(signed_names, transcoded) + tail
        if hmac.compare_digest(signer.hexdigest(string_to_sign(amz_date, scope, alt)).encode(), provided):
            return None
    return sts, canonical


def mismatch(failure: tuple[bytes, bytes], access_key: str, signature: str) -> S3Error:
    sts, canonical = failure
    return S3Error(
        "SignatureDoesNotMatch",
        AWSAccessKeyId=access_key,
        StringToSign=sts.decode("utf-8", "replace"),
        SignatureProvided=signature,
        CanonicalRequest=canonical.decode("utf-8", "replace"),
    )


def canonical_query_pairs(qs: bytes) -> list[tuple[str, str]]:
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


def canonical_uri(raw_path: bytes) -> bytes:
    """The raw path as sent; only bytes that cannot appear in a request target get escaped."""
    if not raw_path:
        return b"/"
    if _URI_SAFE.fullmatch(raw_path):
        return raw_path
    return quote_from_bytes(raw_path, safe=_URI_KEEP).encode("ascii")


def canonical_headers(names: tuple[str, ...], values: list[list[bytes]]) -> bytes:
    """``name:value\\n`` per signed header, in the order the client listed them."""
    lines = []
    for name, vs in zip(names, values, strict=True):
        # Trimall: strip and squeeze whitespace runs; repeated headers join with ','.
        joined = b" ".join(vs[0].split()) if len(vs) == 1 else b",".join([b" ".join(v.split()) for v in vs])
        lines.append(name.encode("ascii") + b":" + joined + b"\n")
    return b"".join(lines)


def string_to_sign(amz_date: str, scope: str, canonical: bytes) -> bytes:
    return f"{ALGORITHM}\n{amz_date}\n{scope}\n{hashlib.sha256(canonical).hexdigest()}".encode("ascii")


@lru_cache(maxsize=256)
def split_signed_headers(signed: str) -> tuple[str, ...] | None:
    # Cached: a client sends the same list on every request of a given kind.
    names = tuple(signed.split(";"))
    return names if all(_HEADER_NAME.fullmatch(n) for n in names) else None


@lru_cache(maxsize=256)
def lower_names(signed: str) -> tuple[bytes, ...]:
    """Signed header names as ASGI header keys (only called on lists that parsed)."""
    return tuple(n.lower().encode("ascii") for n in signed.split(";"))


def header_map(headers: Sequence[tuple[bytes, bytes]]) -> dict[bytes, list[bytes]]:
    """Header values by name; ASGI already lower-cases names, so they are used as they come."""
    out: dict[bytes, list[bytes]] = {}
    for name, value in headers:
        values = out.get(name)
        if values is None:
            out[name] = [value]
        else:
            values.append(value)
    return out
