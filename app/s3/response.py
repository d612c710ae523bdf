"""What a handler returns, and the object headers S3 puts on GET/HEAD/PUT answers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import format_datetime
from functools import lru_cache

from app.domain.crc_combine import type_of
from app.domain.objects import FileSegment, ObjectMeta

XML_TYPE = "application/xml"


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
