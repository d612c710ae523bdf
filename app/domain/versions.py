"""The journal's records as the services pass them: a version of an object and its stored pieces.

They live in the domain so that services, fakes and adapters share them without services
importing the catalog adapter."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from app.domain.states import VersionState

INLINE_BLOB = "inline"  # a piece whose bytes are in its journal row, not in a blob file


@dataclass(slots=True)
class BlobRef:
    """One stored piece of an object: a whole body, or one multipart part. A small body may be
    kept in its journal row instead of a file (``blob == INLINE_BLOB``, see ``Journal.inline_body``)."""

    blob: str
    size: int
    etag: str  # md5 hex of this piece
    checksums: dict[str, str] = field(default_factory=dict)
    number: int | None = None  # the client's part number (multipart), as used remotely

    @property
    def inline(self) -> bool:
        return self.blob == INLINE_BLOB

    def as_json(self) -> list[object]:
        return [self.blob, self.size, self.etag, self.checksums] + ([self.number] if self.number is not None else [])


@dataclass(slots=True)
class VersionRow:
    seq: int
    bucket: str
    key: str
    op: str
    state: VersionState
    generation: int
    size: int
    etag: str
    blobs: list[BlobRef]
    multipart: bool
    content_headers: dict[str, str]
    metadata: dict[str, str]
    checksums: dict[str, str]
    checksum_algorithm: str | None
    node_id: str
    created_at: datetime
    attempts: int
    last_error: str | None
    next_attempt_at: float
    remote_etag: str | None
    durable_at: datetime | None
    remote_upload_id: str | None = None
    after_seq: int | None = None  # a rename's delete: destaged only once this put row is
    renamed_from: str | None = None  # a rename's put: the key its bytes had

    @property
    def is_delete(self) -> bool:
        return self.op == "delete"


@dataclass(frozen=True, slots=True)
class Replica:
    """A second node's durable copy of a write's blobs (``write_replicas: 2``): its own ids there."""

    node_id: str
    blobs: list[BlobRef]


@dataclass(frozen=True, slots=True)
class VersionDraft:
    """A PUT's version as a write service hands it to the journal: what the row records, as one
    value (a unit of work's ``journal.put``); what commits with it (the key's cached copies
    invalidated, an upload's claim, a replica) is the service's to add to the same unit.
    ``inline``: the body itself, kept in the row (its one piece is ``INLINE_BLOB``)."""

    bucket: str
    key: str
    size: int
    etag: str
    blobs: list[BlobRef]
    content_headers: dict[str, str]
    metadata: dict[str, str]
    checksums: dict[str, str]
    tenant_id: int | None
    multipart: bool = False
    checksum_algorithm: str | None = None
    remote_upload_id: str | None = None  # parts already copied to this remote upload
    inline: bytes | None = None
    renamed_from: str | None = None  # a rename's put: the source key (deleted in the same commit)


class SourceChanged(Exception):
    """A rename's source got a newer version between its read and the rename's commit."""
