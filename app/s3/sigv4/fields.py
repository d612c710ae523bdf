"""Parsing the signed fields (credential scope, signed header list, dates, payload hash) and
the errors S3 answers for malformed ones."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from datetime import UTC, date
from email.utils import parsedate_to_datetime
from functools import lru_cache

from app.domain.errors import S3Error
from app.s3.sigv4.canonical import lower_names, split_signed_headers
from app.s3.sigv4.keys import SERVICE, TERMINATOR
from app.s3.sigv4.values import PAYLOAD_MODES

HEX64 = re.compile(r"[0-9a-fA-F]{64}", re.ASCII)
_AMZ_DATE = re.compile(r"\d{8}T\d{6}Z", re.ASCII)
_SCOPE_DATE = re.compile(r"\d{8}", re.ASCII)
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_HEADER_PREFIX = "The authorization header is malformed; "
QUERY_CRED_PREFIX = "Error parsing the X-Amz-Credential parameter; "
V2_MESSAGE = "Signature version 2 is not supported, use AWS4-HMAC-SHA256"


def parse_credential(credential: str, error: Callable[[str], S3Error]) -> tuple[str, str, str]:
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


def parse_signed_headers(signed: str, error: Callable[[str], S3Error]) -> tuple[str, ...]:
    names = split_signed_headers(signed) if len(signed) <= 1024 else None
    if names is None:
        raise error(f'the SignedHeaders list "{signed[:256]}" is mal-formed.')
    if b"host" not in lower_names(signed):
        raise error("the host header must be signed.")
    return names


def parse_amz_date(value: str) -> float | None:
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


def request_date(headers: dict[bytes, list[bytes]]) -> tuple[str, float]:
    """The SigV4 timestamp from X-Amz-Date, else from Date (RFC 1123, reformatted)."""
    x_amz_date = headers.get(b"x-amz-date")
    if x_amz_date is not None:
        amz_date = x_amz_date[0].decode("latin-1")
        ts = parse_amz_date(amz_date)
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


def check_payload_hash(value: str) -> None:
    if value not in PAYLOAD_MODES and not HEX64.fullmatch(value):
        raise S3Error(
            "InvalidArgument",
            "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, STREAMING-UNSIGNED-PAYLOAD-TRAILER, "
            "STREAMING-AWS4-HMAC-SHA256-PAYLOAD, STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER, "
            "or a valid sha256 value.",
            ArgumentName="x-amz-content-sha256",
            ArgumentValue=value[:256],
        )


def iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def header_error(detail: str) -> S3Error:
    return S3Error("AuthorizationHeaderMalformed", _HEADER_PREFIX + detail)


def query_error(message: str) -> S3Error:
    return S3Error("AuthorizationQueryParametersError", message)
