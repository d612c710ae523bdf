"""What a handler returns, and the object headers S3 puts on GET/HEAD/PUT answers."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime
from functools import lru_cache

from app.domain.crc_combine import type_of
from app.domain.errors import S3Error
from app.domain.objects import FileSegment, ObjectMeta

XML_TYPE = "application/xml"
RESPONSE_OVERRIDES = {
    "response-content-type": "Content-Type",
    "response-content-language": "Content-Language",
    "response-expires": "Expires",
    "response-cache-control": "Cache-Control",
    "response-content-disposition": "Content-Disposition",
    "response-content-encoding": "Content-Encoding",
}
# What no header value may hold (RFC 9110 field-value: no controls but HTAB): a CR/LF would
# split the answer, and the HTTP server refuses to send it (the connection died mid-answer).
_NOT_IN_A_HEADER = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


@dataclass
class Response:
    status: int = 200
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes | AsyncIterator[bytes] = b""
    length: int | None = None  # for streamed bodies (Content-Length)
    # The streamed body's bytes as local file ranges, when the server can send files itself.
    files: list[FileSegment] | None = None

    @classmethod
    def xml(cls, body: bytes, status: int = 200) -> Response:
        return cls(status, [("Content-Type", XML_TYPE)], body)


def response_overrides(query: Mapping[str, str]) -> dict[str, str]:
    """The headers a GET/HEAD's ``response-*`` parameters set, checked before anything is read:
    a value no header can carry is S3's ``400 InvalidArgument``, not a broken connection."""
    overrides: dict[str, str] = {}
    for name, header in RESPONSE_OVERRIDES.items():
        value = query.get(name)
        if value is None:
            continue
        if _NOT_IN_A_HEADER.search(value):
            raise S3Error("InvalidArgument", f"{name} must not contain control characters (CR, LF, ...)",
                          ArgumentName=name, ArgumentValue=value[:256].encode("unicode_escape").decode("ascii"))
        overrides[header] = value
    return overrides


def with_overrides(overrides: dict[str, str], headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``headers`` with the ``response_overrides`` replacing the object's own."""
    if not overrides:
        return headers
    lowered = {k.lower() for k in overrides}
    return [(k, v) for k, v in headers if k.lower() not in lowered] + list(overrides.items())


def http_date(meta: ObjectMeta) -> str:
    return _http_date(meta.last_modified)


@lru_cache(maxsize=1024)
def _http_date(when: datetime) -> str:
    """Cached: a hot object is answered with the same Last-Modified again and again, and
    ``format_datetime`` is the larger part of a small hit's response headers."""
    when = when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    return format_datetime(when.replace(microsecond=0), usegmt=True)


def object_headers(meta: ObjectMeta) -> list[tuple[str, str]]:
    """ETag, Last-Modified, content headers, user metadata and checksums of an object."""
    headers = [
        ("ETag", f'"{meta.etag}"'),
        ("Last-Modified", http_date(meta)),
        ("Accept-Ranges", "bytes"),
        ("Content-Type", meta.content_type),
    ]
    headers += [(name.title(), value) for name, value in meta.content_headers.items() if name != "content-type"]
    headers += [(f"x-amz-meta-{name}", value) for name, value in meta.metadata.items()]
    if meta.version_id:
        headers.append(("x-amz-version-id", meta.version_id))
    if meta.storage_class and meta.storage_class != "STANDARD":
        headers.append(("x-amz-storage-class", meta.storage_class))
    if meta.parts_count:
        headers.append(("x-amz-mp-parts-count", str(meta.parts_count)))
    return headers


def checksum_headers(checksums: dict[str, str]) -> list[tuple[str, str]]:
    return [(f"x-amz-checksum-{alg.lower()}", value) for alg, value in checksums.items()]


def object_checksum_headers(checksums: dict[str, str]) -> list[tuple[str, str]]:
    """GET/HEAD with checksum mode: the checksums and their type (a composite one ends in -N)."""
    if not checksums:
        return []
    return checksum_headers(checksums) + [("x-amz-checksum-type", type_of(next(iter(checksums.values()))))]
