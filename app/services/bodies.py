"""Bodies and results the write and read services pass: what a client sent and what it gets."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Protocol

from app.domain.checksums import BodyDigests
from app.domain.objects import (
    FileSegment,
    ObjectMeta,
)
from app.domain.ranges import ByteRange
from app.services.ports import StagedBody

WRITE_CHUNK = 4 * 1024 * 1024
READ_CHUNK = 1024 * 1024
INLINE_BODY = 256 * 1024
MAX_PUT_SIZE = 5 * 1024**3
MIN_PART_SIZE = 5 * 1024 * 1024
MAX_PART_NUMBER = 10_000
BUCKET_TRUST_SECONDS = 300.0
CLAIM_POLL_SECONDS = 0.05


class PayloadCheck(Protocol):
    """A digest the body's consumer feeds and checks (``x-amz-content-sha256``) off the event loop."""

    def update(self, data: bytes | bytearray | memoryview) -> None: ...

    def verify(self) -> None: ...


class BodyStream(Protocol):
    """A request body as decoded payload pieces (views of immutable bytes at most); trailers are
    known once it is exhausted."""

    def __aiter__(self) -> AsyncIterator[bytes | memoryview]: ...

    @property
    def trailers(self) -> dict[str, str]: ...

    def take_payload_hash(self) -> PayloadCheck | None: ...


class StreamBody:
    """An object being read (a copy source) used as the body of a write; it has no trailers."""

    def __init__(self, stream: AsyncIterator[bytes]) -> None:
        self.stream = stream
        self.trailers: dict[str, str] = {}

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self.stream

    def take_payload_hash(self) -> PayloadCheck | None:
        return None  # bytes read back from a stored object: nothing declared to check


@dataclass
class ExpectedDigests:
    """What the client claimed about the body, checked before the body is accepted."""

    content_md5: str | None = None
    checksums: dict[str, str] = field(default_factory=dict)
    algorithms: set[str] = field(default_factory=set)
    declared_size: int | None = None

    def with_trailers(self, trailers: dict[str, str]) -> dict[str, str]:
        merged = dict(self.checksums)
        for name, value in trailers.items():
            if name.startswith("x-amz-checksum-"):
                merged[name[len("x-amz-checksum-"):].upper()] = value
        return merged


@dataclass
class PutResult:
    etag: str
    checksums: dict[str, str]
    version_id: str | None = None


@dataclass
class ObjectRead:
    """An open object: metadata, the range served, and its bytes as an async stream."""

    meta: ObjectMeta
    byte_range: ByteRange | None
    stream: AsyncIterator[bytes]
    close: Callable[[], None]
    files: list[FileSegment] | None = None  # the same bytes as local file ranges (cache hits)
    data: bytes | None = None  # the same bytes, already read (a small hit): sent as one body


@dataclass
class ReceivedBody:
    staging: StagedBody
    digests: BodyDigests
    checksums: dict[str, str]
    data: bytes | None = None  # the whole body, when it was small enough to be held in memory


def multipart_etag(part_md5s: list[str]) -> str:
    joined = b"".join(bytes.fromhex(m) for m in part_md5s)
    return f"{hashlib.md5(joined).hexdigest()}-{len(part_md5s)}"
