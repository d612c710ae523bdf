"""Values the services hand to entry points: object metadata, listings, uploads."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

# Content headers S3 stores with an object and returns on GET/HEAD.
CONTENT_HEADERS = ("content-type", "content-encoding", "content-disposition", "content-language",
                   "cache-control", "expires")


@dataclass(slots=True)
class ObjectMeta:
    key: str
    size: int
    etag: str  # without quotes
    last_modified: datetime
    content_headers: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)  # x-amz-meta-* without the prefix
    checksums: dict[str, str] = field(default_factory=dict)  # ALG -> base64
    version_id: str | None = None
    storage_class: str = "STANDARD"
    parts_count: int | None = None

    @property
    def content_type(self) -> str:
        return self.content_headers.get("content-type", "binary/octet-stream")


@dataclass(frozen=True, slots=True)
class PartAttributes:
    """One part of a multipart object as GetObjectAttributes lists it."""

    number: int
    size: int
    checksums: dict[str, str] = field(default_factory=dict)  # ALG -> base64 of the part


@dataclass(frozen=True, slots=True)
class ObjectAttributes:
    """What GetObjectAttributes answers: the object's metadata and, for a multipart object whose
    parts are known, its parts in order (None for a single-part object, or parts not known)."""

    meta: ObjectMeta
    parts: list[PartAttributes] | None = None


@dataclass(frozen=True, slots=True)
class FileSegment:
    """Bytes ``offset .. offset+length-1`` of a local file: a hit the server may send zero-copy.
    ``opener`` opens ``path`` read-only (the block store's: a block deleted since the lookup is
    still found where the store retired it); None: ``os.open`` of the path."""

    path: str
    offset: int
    length: int
    opener: Callable[[str], int] | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class FileRange:
    """Bytes ``offset .. offset+length-1`` of an open descriptor, yielded instead of a chunk by a
    stream opened with ``file_ranges``: the server sends them without copying them through
    Python. Valid only until the stream is resumed (the stream owns and closes the descriptor)."""

    fd: int
    offset: int
    length: int

    def __len__(self) -> int:
        return self.length


@dataclass(slots=True)
class ObjectSummary:
    key: str
    size: int
    etag: str
    last_modified: datetime
    storage_class: str = "STANDARD"
    version_id: str | None = None
    is_latest: bool = True
    is_delete_marker: bool = False


@dataclass(slots=True)
class ListPage:
    """One page of a listing; ``next_marker`` is the last key or prefix it returned."""

    contents: list[ObjectSummary]
    common_prefixes: list[str]
    is_truncated: bool
    next_marker: str | None = None


@dataclass(slots=True)
class BucketInfo:
    name: str
    created: datetime


@dataclass(slots=True)
class PartInfo:
    part_number: int
    size: int
    etag: str
    last_modified: datetime
    checksums: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class UploadInfo:
    upload_id: str
    bucket: str
    key: str
    initiated: datetime
    checksum_algorithm: str | None = None
    checksum_type: str | None = None  # COMPOSITE / FULL_OBJECT, from CreateMultipartUpload
    tenant_id: int | None = None  # whose upload it is: its object's journal row is theirs
