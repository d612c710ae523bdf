"""An in-memory remote implementing ``app.services.ports.RemotePort`` with S3's answers."""

from __future__ import annotations

import base64
import hashlib
import io
import itertools
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import BinaryIO

from app.domain.errors import S3Error
from app.domain.objects import BucketInfo, ListPage, ObjectMeta, ObjectSummary, PartAttributes
from app.domain.profiles import DEFAULT_PROFILE, RemoteProfile
from app.domain.ranges import parse_range


@dataclass
class Stored:
    """One object as the fake remote holds it."""

    data: bytes
    etag: str
    content_headers: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    checksums: dict[str, str] = field(default_factory=dict)
    modified: datetime = field(default_factory=lambda: datetime.now(UTC).replace(microsecond=0))

    def meta(self, key: str) -> ObjectMeta:
        return ObjectMeta(key, len(self.data), self.etag, self.modified, dict(self.content_headers),
                          dict(self.metadata), dict(self.checksums))


class InMemoryRemote:
    """Buckets and objects in dicts; multipart uploads assembled on Complete."""

    def __init__(self, *, conditional: bool = True, profile: RemoteProfile = DEFAULT_PROFILE) -> None:
        self.profile_of = profile
        self.buckets: dict[str, dict[str, Stored]] = {}
        self.created: dict[str, datetime] = {}
        self.uploads: dict[str, tuple[str, str, dict[int, tuple[bytes, str]]]] = {}
        self.conditional = conditional
        self.calls: list[str] = []  # every object request (HEAD, GET, PUT, DELETE), in order
        self._ids = itertools.count(1)

    # ---- buckets -------------------------------------------------------------------------------
    def profile(self, bucket: str) -> RemoteProfile:
        return self.profile_of

    def _bucket(self, bucket: str) -> dict[str, Stored]:
        if bucket not in self.buckets:
            raise S3Error("NoSuchBucket", BucketName=bucket)
        return self.buckets[bucket]

    def list_buckets(self) -> list[BucketInfo]:
        return [BucketInfo(name, self.created[name]) for name in sorted(self.buckets)]

    def create_bucket(self, bucket: str, location: str | None) -> None:
        if bucket in self.buckets:
            raise S3Error("BucketAlreadyOwnedByYou", BucketName=bucket)
        self.buckets[bucket] = {}
        self.created[bucket] = datetime.now(UTC)

    def head_bucket(self, bucket: str) -> None:
        self._bucket(bucket)

    def delete_bucket(self, bucket: str) -> None:
        if self._bucket(bucket):
            raise S3Error("BucketNotEmpty", BucketName=bucket)
        del self.buckets[bucket]

    def bucket_location(self, bucket: str) -> str | None:
        self._bucket(bucket)
        return None

    def list_as_listed(self, bucket: str, prefix: str, start_after: str | None, max_keys: int) -> ListPage:
        return self.list_objects(bucket, prefix, None, start_after, max_keys)

    def list_objects(self, bucket: str, prefix: str, delimiter: str | None, start_after: str | None,
                     max_keys: int) -> ListPage:
        names: list[tuple[str, ObjectSummary | None]] = []
        seen: set[str] = set()
        for key in sorted(self._bucket(bucket)):
            if not key.startswith(prefix) or (start_after and key <= start_after):
                continue
            rest = key[len(prefix):]
            if delimiter and delimiter in rest:
                common = prefix + rest[: rest.index(delimiter) + len(delimiter)]
                if common not in seen and not (start_after and common <= start_after):
                    seen.add(common)
                    names.append((common, None))
                continue
            obj = self.buckets[bucket][key]
            names.append((key, ObjectSummary(key, len(obj.data), obj.etag, obj.modified)))
        page, truncated = names[:max_keys], len(names) > max_keys
        return ListPage([s for _, s in page if s is not None], [n for n, s in page if s is None], truncated,
                        page[-1][0] if truncated and page else None)

    # ---- objects -------------------------------------------------------------------------------
    def _object(self, bucket: str, key: str) -> Stored:
        found = self._bucket(bucket).get(key)
        if found is None:
            raise S3Error("NoSuchKey", Key=key)
        return found

    def head_object(self, bucket: str, key: str, if_none_match: str | None = None) -> ObjectMeta:
        self.calls.append(f"HEAD {bucket}/{key}")
        obj = self._object(bucket, key)
        if if_none_match and if_none_match.strip('"') == obj.etag:
            raise S3Error("NotModified")
        return obj.meta(key)

    def object_parts(self, bucket: str, key: str) -> tuple[str, list[PartAttributes]] | None:
        return None

    def get_object(self, bucket: str, key: str, byte_range: str | None = None,
                   if_match: str | None = None) -> tuple[ObjectMeta, BinaryIO]:
        self.calls.append(f"GET {bucket}/{key}")
        obj = self._object(bucket, key)
        if if_match and if_match.strip('"') != obj.etag:
            raise S3Error("PreconditionFailed", Condition="If-Match")
        rng = parse_range(byte_range, len(obj.data)) if byte_range else None
        data = obj.data[rng.first: rng.last + 1] if rng else obj.data
        return obj.meta(key), io.BytesIO(data)

    def put_object(self, bucket: str, key: str, body: BinaryIO, size: int, content_md5: str,
                   content_headers: dict[str, str], metadata: dict[str, str], checksums: dict[str, str], *,
                   if_match: str | None = None, if_none_match: str | None = None) -> str:
        self.calls.append(f"PUT {bucket}/{key}")
        data = body.read(size)
        if len(data) != size:
            raise S3Error("IncompleteBody")
        if base64.b64encode(hashlib.md5(data).digest()).decode() != content_md5:
            raise S3Error("BadDigest")
        self._check_write(bucket, key, if_match, if_none_match)
        etag = hashlib.md5(data).hexdigest()
        self.buckets[bucket][key] = Stored(data, etag, dict(content_headers), dict(metadata), dict(checksums))
        return etag

    def _check_write(self, bucket: str, key: str, if_match: str | None, if_none_match: str | None) -> None:
        current = self._bucket(bucket).get(key)
        if not self.conditional:
            return
        if if_match and (current is None or current.etag != if_match.strip('"')):
            raise S3Error("PreconditionFailed", Condition="If-Match")
        if if_none_match == "*" and current is not None:
            raise S3Error("PreconditionFailed", Condition="If-None-Match")

    def copy_object(self, bucket: str, key: str, src_bucket: str, src_key: str, replace: bool,
                    content_headers: dict[str, str], metadata: dict[str, str]) -> tuple[str, datetime]:
        src = self._object(src_bucket, src_key)
        headers, meta = (content_headers, metadata) if replace else (src.content_headers, src.metadata)
        copied = Stored(src.data, src.etag, dict(headers), dict(meta), dict(src.checksums))
        self._bucket(bucket)[key] = copied
        return copied.etag, copied.modified

    def delete_object(self, bucket: str, key: str, if_match: str | None = None) -> None:
        self.calls.append(f"DELETE {bucket}/{key}")
        self._check_write(bucket, key, if_match, None)
        self._bucket(bucket).pop(key, None)

    def delete_objects(self, bucket: str, keys: list[str]) -> dict[str, tuple[str, str]]:
        for key in keys:
            self.delete_object(bucket, key)
        return {}

    def current_etag(self, bucket: str, key: str) -> str | None:
        found = self._bucket(bucket).get(key)
        return found.etag if found else None

    def conditional_writes(self, bucket: str) -> bool:
        return self.conditional

    # ---- multipart -----------------------------------------------------------------------------
    def create_multipart(self, bucket: str, key: str, content_headers: dict[str, str],
                         metadata: dict[str, str], checksum_algorithm: str | None,
                         checksum_type: str | None = None) -> str:
        self._bucket(bucket)
        upload_id = f"remote-upload-{next(self._ids)}"
        self.uploads[upload_id] = (bucket, key, {})
        return upload_id

    def upload_part(self, bucket: str, key: str, upload_id: str, number: int, body: BinaryIO, size: int,
                    content_md5: str, checksums: dict[str, str]) -> str:
        data = body.read(size)
        if len(data) != size:
            raise S3Error("IncompleteBody")
        if upload_id not in self.uploads:
            raise S3Error("NoSuchUpload", UploadId=upload_id)
        etag = hashlib.md5(data).hexdigest()
        self.uploads[upload_id][2][number] = (data, etag)
        return etag

    def complete_multipart(self, bucket: str, key: str, upload_id: str,
                           parts: list[tuple[int, str, dict[str, str]]]) -> str:
        if upload_id not in self.uploads:
            raise S3Error("NoSuchUpload", UploadId=upload_id)
        _, _, held = self.uploads.pop(upload_id)
        chosen = [held[number] for number, _etag, _ in parts]
        joined = b"".join(bytes.fromhex(e) for _, e in chosen)
        etag = f"{hashlib.md5(joined).hexdigest()}-{len(chosen)}"
        self._bucket(bucket)[key] = Stored(b"".join(d for d, _ in chosen), etag)
        return etag

    def list_parts(self, bucket: str, key: str, upload_id: str) -> dict[int, str]:
        if upload_id not in self.uploads:
            raise S3Error("NoSuchUpload", UploadId=upload_id)
        return {n: e for n, (_, e) in self.uploads[upload_id][2].items()}

    def abort_multipart(self, bucket: str, key: str, upload_id: str) -> None:
        self.uploads.pop(upload_id, None)

    def list_multipart(self, bucket: str) -> list[tuple[str, str, datetime]]:
        return [(k, u, datetime.now(UTC)) for u, (b, k, _) in self.uploads.items() if b == bucket]


def remote_with_object(size: int, bucket: str = "b", key: str = "k") -> tuple[InMemoryRemote, bytes]:
    """A remote holding one object of ``size`` random bytes (with its Content-MD5), and the bytes."""
    remote = InMemoryRemote()
    remote.create_bucket(bucket, None)
    data = os.urandom(size)
    remote.put_object(bucket, key, io.BytesIO(data), size, base64.b64encode(hashlib.md5(data).digest()).decode(),
                      {}, {}, {})
    return remote, data
