"""``RemoteStore``: the remote durable bucket, over one client: its operations live in three
parts it is composed of (``buckets``: buckets and listings, ``objects``, ``multipart``); the
store's own methods only name which part answers, so a reader finds each behaviour in one place."""

from __future__ import annotations

from datetime import datetime
from typing import BinaryIO

from app import metrics
from app.adapters.remote.buckets import BucketOps
from app.adapters.remote.circuit import CircuitBreaker
from app.adapters.remote.client import RemoteConfig, make_client
from app.adapters.remote.get import LeanGetter
from app.adapters.remote.multipart import MultipartOps
from app.adapters.remote.objects import ObjectOps
from app.adapters.remote.put import LeanPutter
from app.domain.objects import BucketInfo, ListPage, ObjectMeta, PartAttributes


class RemoteStore:
    """One boto3 client (thread-safe) per remote; connection pool sized for parallel transfers."""

    def __init__(self, cfg: RemoteConfig) -> None:
        self.cfg = cfg
        self.client = make_client(cfg)
        metrics.instrument_boto_client(self.client)  # latency and errors by operation
        self.circuit = CircuitBreaker(cfg.endpoint or "aws", cfg.circuit_failures, cfg.circuit_cooldown)
        self.circuit.instrument(self.client)
        self.lean = LeanGetter(self.client, cfg.addressing_style, cfg.max_attempts, cfg.deadline, self.circuit)
        self.buckets = BucketOps(self.client, self.lean)
        self.putter = LeanPutter(self.client, self.lean, enabled=cfg.raw_writes, connect_timeout=cfg.connect_timeout,
                                 read_timeout=cfg.read_timeout, max_connections=cfg.max_connections,
                                 circuit=self.circuit)
        self.objects = ObjectOps(self.client, self.lean, self.buckets, self.putter)
        self.multipart = MultipartOps(self.client, self.putter)

    # ---- buckets -------------------------------------------------------------------------------
    def list_buckets(self) -> list[BucketInfo]:
        return self.buckets.list_buckets()

    def create_bucket(self, bucket: str, location: str | None) -> None:
        self.buckets.create_bucket(bucket, location)

    def head_bucket(self, bucket: str) -> None:
        self.buckets.head_bucket(bucket)

    def delete_bucket(self, bucket: str) -> None:
        self.buckets.delete_bucket(bucket)

    def bucket_location(self, bucket: str) -> str | None:
        return self.buckets.bucket_location(bucket)

    def list_objects(self, bucket: str, prefix: str, delimiter: str | None, start_after: str | None,
                     max_keys: int) -> ListPage:
        return self.buckets.list_objects(bucket, prefix, delimiter, start_after, max_keys)

    def list_object_versions(self, bucket: str, prefix: str, delimiter: str | None, key_marker: str | None,
                             max_keys: int) -> ListPage:
        return self.buckets.list_object_versions(bucket, prefix, delimiter, key_marker, max_keys)

    # ---- objects -------------------------------------------------------------------------------
    def head_object(self, bucket: str, key: str, if_none_match: str | None = None) -> ObjectMeta:
        return self.objects.head_object(bucket, key, if_none_match)

    def object_parts(self, bucket: str, key: str) -> tuple[str, list[PartAttributes]] | None:
        return self.objects.object_parts(bucket, key)

    def get_object(self, bucket: str, key: str, byte_range: str | None = None,
                   if_match: str | None = None) -> tuple[ObjectMeta, BinaryIO]:
        return self.objects.get_object(bucket, key, byte_range, if_match)

    def put_object(self, bucket: str, key: str, body: BinaryIO, size: int, content_md5: str,
                   content_headers: dict[str, str], metadata: dict[str, str],
                   checksums: dict[str, str], *, if_match: str | None = None,
                   if_none_match: str | None = None) -> str:
        return self.objects.put_object(bucket, key, body, size, content_md5, content_headers, metadata, checksums,
                                       if_match=if_match, if_none_match=if_none_match)

    def copy_object(self, bucket: str, key: str, src_bucket: str, src_key: str, replace: bool,
                    content_headers: dict[str, str], metadata: dict[str, str]) -> tuple[str, datetime]:
        return self.objects.copy_object(bucket, key, src_bucket, src_key, replace, content_headers, metadata)

    def delete_object(self, bucket: str, key: str, if_match: str | None = None) -> None:
        self.objects.delete_object(bucket, key, if_match)

    def delete_objects(self, bucket: str, keys: list[str]) -> dict[str, tuple[str, str]]:
        return self.objects.delete_objects(bucket, keys)

    def current_etag(self, bucket: str, key: str) -> str | None:
        return self.objects.current_etag(bucket, key)

    def conditional_writes(self, bucket: str) -> bool:
        return self.objects.conditional_writes(bucket)

    # ---- multipart -----------------------------------------------------------------------------
    def create_multipart(self, bucket: str, key: str, content_headers: dict[str, str],
                         metadata: dict[str, str], checksum_algorithm: str | None,
                         checksum_type: str | None = None) -> str:
        return self.multipart.create_multipart(bucket, key, content_headers, metadata, checksum_algorithm,
                                               checksum_type)

    def upload_part(self, bucket: str, key: str, upload_id: str, number: int, body: BinaryIO, size: int,
                    content_md5: str, checksums: dict[str, str]) -> str:
        return self.multipart.upload_part(bucket, key, upload_id, number, body, size, content_md5, checksums)

    def complete_multipart(self, bucket: str, key: str, upload_id: str,
                           parts: list[tuple[int, str, dict[str, str]]]) -> str:
        return self.multipart.complete_multipart(bucket, key, upload_id, parts)

    def list_parts(self, bucket: str, key: str, upload_id: str) -> dict[int, str]:
        return self.multipart.list_parts(bucket, key, upload_id)

    def list_multipart(self, bucket: str) -> list[tuple[str, str, datetime]]:
        return self.multipart.list_multipart(bucket)

    def abort_multipart(self, bucket: str, key: str, upload_id: str) -> None:
        self.multipart.abort_multipart(bucket, key, upload_id)
