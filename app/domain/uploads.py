"""A multipart upload's Complete as records: its claim, its kept answer, and the refusals."""

from __future__ import annotations

import json
from dataclasses import dataclass


class UploadNotOpen(Exception):
    """The upload is being completed (``state == 'completing'``), completed, or gone (None)."""

    def __init__(self, state: str | None) -> None:
        super().__init__(state or "gone")
        self.state = state


class ClaimLost(Exception):
    """A Complete's claim expired and another Complete took the upload over."""


@dataclass(frozen=True, slots=True)
class CompletedUpload:
    """What a Complete answered, kept so a repeated Complete gets the same answer."""

    bucket: str
    key: str
    etag: str
    parts: list[tuple[int, str]]  # (part number, md5 hex) as listed by the winning Complete
    checksums: dict[str, str] | None = None  # the object's checksums it answered (a retry answers them too)

    def as_json(self) -> str:
        return json.dumps({"bucket": self.bucket, "key": self.key, "etag": self.etag, "parts": self.parts,
                           "checksums": self.checksums or {}})

    @classmethod
    def from_json(cls, raw: str) -> CompletedUpload:
        d = json.loads(raw)
        return cls(d["bucket"], d["key"], d["etag"], [(int(n), str(e)) for n, e in d["parts"]],
                   dict(d.get("checksums") or {}))  # rows kept before checksums were: none


@dataclass(frozen=True, slots=True)
class UploadClaim:
    """The claim a Complete holds; committing the object checks it (see ``finish_upload``)."""

    upload_id: str
    token: str
    result: CompletedUpload


@dataclass(frozen=True, slots=True)
class PartSource:
    """A node holding a copy of an uploaded part, and the part's blob id on that node's disk
    (the node that took the UploadPart, then its replica's node with ``write_replicas: 2``)."""

    node_id: str | None  # None: recorded before node ids (this node's own disk)
    blob: str
