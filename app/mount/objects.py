"""The mount's view of the gateway: S3 requests through boto3, nothing of FUSE.

The mount is a client of the node's owner (invariant 6): it never opens the data directory.
Every call here blocks; the filesystem layer runs them in threads.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import urllib3
from botocore.config import Config
from botocore.exceptions import ClientError

from app.mount.local_reads import LocalReads, LocalUnavailable

log = logging.getLogger("ferry.mount")

MiB = 1024 * 1024
# A file larger than this is published as a multipart upload of PART_SIZE parts, PARALLEL_PARTS at once.
MULTIPART_THRESHOLD = 64 * MiB
PART_SIZE = 16 * MiB
PARALLEL_PARTS = 8
LOCAL_RETRY_SECONDS = 30  # after the local read socket failed, HTTP only for this long

# S3 error codes as the errno a filesystem caller understands.
ERRNO_OF = {
    "NoSuchKey": errno.ENOENT, "NoSuchBucket": errno.ENOENT, "404": errno.ENOENT, "NotFound": errno.ENOENT,
    "AccessDenied": errno.EACCES, "403": errno.EACCES, "InvalidAccessKeyId": errno.EACCES,
    "SignatureDoesNotMatch": errno.EACCES, "PreconditionFailed": errno.EEXIST, "412": errno.EEXIST,
    "NotImplemented": errno.EOPNOTSUPP, "KeyTooLongError": errno.ENAMETOOLONG, "EntityTooLarge": errno.EFBIG,
    "SlowDown": errno.EAGAIN, "ServiceUnavailable": errno.EAGAIN, "OperationAborted": errno.EAGAIN,
    "InsufficientStorage": errno.ENOSPC, "ExistingObjectIsFile": errno.ENOTDIR,
}


class ObjectError(OSError):
    """An S3 answer as an errno (and the S3 code, for the log)."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(ERRNO_OF.get(code, errno.EIO), f"{code}: {message}" if message else code)
        self.code = code


def _raise(exc: ClientError) -> None:
    err = exc.response.get("Error", {})
    raise ObjectError(str(err.get("Code", "")), str(err.get("Message", ""))) from exc


def error_code(document: bytes) -> str:
    found = re.search(rb"<Code>([^<]+)</Code>", document)
    return found.group(1).decode() if found else ""


def _has_bytes(status: int, error_body: Callable[[], bytes], bucket: str, key: str) -> bool:
    """What a ranged GET's status means to a read, over HTTP or the local socket alike: raise its
    errno (412: the version changed while open, ESTALE), or False past the end (416)."""
    if status == 412:
        raise ObjectError("Stale", f"{bucket}/{key} changed while open")
    if status == 416:
        return False
    if status not in (200, 206):
        raise ObjectError(error_code(error_body()) or str(status), f"GET {bucket}/{key}")
    return True


def _whole(buf: bytearray, got: int, bucket: str, key: str) -> bytearray:
    if got != len(buf):
        raise ObjectError("IncompleteBody", f"{bucket}/{key}: {got} of {len(buf)} bytes")
    return buf


@dataclass(frozen=True, slots=True)
class FileStat:
    size: int
    mtime_ns: int
    etag: str


@dataclass(frozen=True, slots=True)
class Listing:
    """One directory level: names of sub-directories and files (with their stats)."""

    dirs: list[str]
    files: dict[str, FileStat]


def _stat(size: int, modified: Any, etag: str) -> FileStat:
    return FileStat(int(size), int(modified.timestamp() * 1e9), etag.strip('"'))


class GatewayObjects:
    def __init__(self, url: str, access_key: str, secret_key: str, *, region: str = "us-east-1",
                 connections: int = 32, local_socket: Path | None = None) -> None:
        self.client = boto3.client(
            "s3", endpoint_url=url, aws_access_key_id=access_key, aws_secret_access_key=secret_key,
            # The gateway computes the object's MD5 and checks what is sent; a CRC the SDK would add
            # (aws-chunked, in Python, 8 KiB at a time) cost the mount 30 CPU s per GiB, measured.
            region_name=region, config=Config(s3={"addressing_style": "path"}, max_pool_connections=connections,
                                              request_checksum_calculation="when_required",
                                              retries={"max_attempts": 5, "mode": "standard"},
                                              connect_timeout=10, read_timeout=120))
        self.pool = urllib3.PoolManager(maxsize=connections, timeout=urllib3.Timeout(connect=10, read=120))
        self.local = LocalReads(local_socket) if local_socket is not None else None
        self._local_off_until = 0.0  # after the socket failed: HTTP only for a while

    def buckets(self) -> list[str]:
        try:
            return sorted(b["Name"] for b in self.client.list_buckets().get("Buckets", []))
        except ClientError as exc:
            _raise(exc)
            raise

    @staticmethod
    def retries() -> urllib3.Retry:
        """For reads: a connection the gateway closed, or a refused one, is tried again."""
        return urllib3.Retry(3, backoff_factor=0.2)

    def stat(self, bucket: str, key: str) -> FileStat | None:
        try:
            head = self.client.head_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            _raise(exc)
            raise
        return _stat(head["ContentLength"], head["LastModified"], head.get("ETag", ""))

    def has_under(self, bucket: str, prefix: str, beyond: str | None = None) -> bool:
        """Whether any key starts with ``prefix`` (other than ``beyond``): a directory exists."""
        try:
            found = self.client.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=2).get("Contents", [])
        except ClientError as exc:
            _raise(exc)
            raise
        return any(item["Key"] != beyond for item in found)

    def read(self, bucket: str, key: str, start: int, length: int, etag: str) -> bytearray | memoryview:
        """``length`` bytes from ``start`` of the version ``etag`` names: a newer version answers
        ESTALE rather than mixing two versions' bytes into one read. A presigned GET read with
        ``readinto`` into one buffer: no copies of the body in Python."""
        url = self.client.generate_presigned_url("get_object", Params={"Bucket": bucket, "Key": key},
                                                 ExpiresIn=300)
        headers = {"Range": f"bytes={start}-{start + length - 1}", "If-Match": f'"{etag}"'}
        if self.local is not None and time.monotonic() >= self._local_off_until:
            try:
                return self._read_local(self.local, url, headers, bucket, key, length)
            except LocalUnavailable as exc:
                log.info("ferry mount: the local read socket failed (%s); reading over HTTP for %d s",
                         exc, LOCAL_RETRY_SECONDS)
                self._local_off_until = time.monotonic() + LOCAL_RETRY_SECONDS
                self.local.close()  # the other pooled connections are most likely as dead (a restart)
        resp = self.pool.request("GET", url, preload_content=False, retries=self.retries(), headers=headers)
        try:
            if not _has_bytes(resp.status, resp.read, bucket, key):
                return bytearray()
            buf = bytearray(length)
            view = memoryview(buf)
            got = 0
            while got < length and (n := resp.readinto(view[got:])):
                got += n
            return _whole(buf, got, bucket, key)
        finally:
            resp.release_conn()

    @staticmethod
    def _read_local(local: LocalReads, url: str, headers: dict[str, str], bucket: str, key: str,
                    length: int) -> bytearray | memoryview:
        """``read`` over the local read socket: the same request, the same answers; a cached range
        as a map of its cache block (no copy)."""
        status, _, mapped, body = local.get_mapped(url, headers)
        if not _has_bytes(status, lambda: bytes(body), bucket, key):
            return bytearray()
        data = mapped if mapped is not None else body
        if len(data) != length:
            raise ObjectError("IncompleteBody", f"{bucket}/{key}: {len(data)} of {length} bytes")
        return data

    def publish(self, bucket: str, key: str, path: Path) -> FileStat:
        """The whole file as the object: one PUT (or one multipart upload of parts sent 8 at a
        time), acknowledged by the gateway once durable (fsync and journal), never visible in
        part. Bodies go as whole buffers to presigned URLs: boto3's upload_file read the file
        4 KiB at a time and hashed it for the signature (28 CPU s per GiB in the mount, measured)."""
        size = path.stat().st_size
        with open(path, "rb") as fh:
            if size <= MULTIPART_THRESHOLD:
                self._put(self._presigned("put_object", Bucket=bucket, Key=key), os.pread(fh.fileno(), size, 0))
            else:
                self._put_multipart(bucket, key, fh.fileno(), size)
        return self.published(bucket, key)

    def published(self, bucket: str, key: str) -> FileStat:
        """The object just published, as the gateway now describes it."""
        found = self.stat(bucket, key)
        if found is None:
            raise ObjectError("NoSuchKey", f"{bucket}/{key} vanished after its upload")
        return found

    def _presigned(self, operation: str, **params: Any) -> str:
        return str(self.client.generate_presigned_url(operation, Params=params, ExpiresIn=3600))

    def _put(self, url: str, data: bytes) -> str:
        resp = self.pool.request("PUT", url, body=data, headers={"Content-Length": str(len(data))},
                                 retries=urllib3.Retry(total=5, backoff_factor=0.5, allowed_methods=None,
                                                       status_forcelist=(500, 502, 503, 504)))
        if resp.status != 200:
            raise ObjectError(error_code(resp.data) or str(resp.status), "PUT")
        return str(resp.headers.get("ETag", ""))

    def _put_multipart(self, bucket: str, key: str, fd: int, size: int) -> None:
        upload = self.open_upload(bucket, key)
        try:
            with ThreadPoolExecutor(PARALLEL_PARTS) as pool:
                parts = list(pool.map(
                    lambda n: self.send_part(bucket, key, upload, n, fd, (n - 1) * PART_SIZE, PART_SIZE),
                    range(1, (size + PART_SIZE - 1) // PART_SIZE + 1)))
            self.complete_upload(bucket, key, upload, parts)
        except BaseException:
            self.abort_upload(bucket, key, upload)
            raise

    def open_upload(self, bucket: str, key: str) -> str:
        try:
            return str(self.client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"])
        except ClientError as exc:
            _raise(exc)
            raise

    def send_part(self, bucket: str, key: str, upload: str, number: int, fd: int, offset: int,
                  length: int) -> dict[str, Any]:
        """Part ``number``: the file's bytes [offset, offset + length) (fewer at its end)."""
        data = os.pread(fd, length, offset)
        url = self._presigned("upload_part", Bucket=bucket, Key=key, UploadId=upload, PartNumber=number)
        return {"PartNumber": number, "ETag": self._put(url, data)}

    def complete_upload(self, bucket: str, key: str, upload: str, parts: list[dict[str, Any]]) -> None:
        try:
            self.client.complete_multipart_upload(Bucket=bucket, Key=key, UploadId=upload,
                                                  MultipartUpload={"Parts": parts})
        except ClientError as exc:
            _raise(exc)

    def abort_upload(self, bucket: str, key: str, upload: str) -> None:
        with contextlib.suppress(Exception):
            self.client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload)

    def delete(self, bucket: str, key: str) -> None:
        try:
            self.client.delete_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            _raise(exc)

    def rename(self, bucket: str, src: str, dst: str, *, no_replace: bool = False) -> None:
        """RenameObject: one journal commit on the gateway (old name or new, never neither)."""
        extra = {"DestinationIfNoneMatch": "*"} if no_replace else {}
        try:
            self.client.rename_object(Bucket=bucket, Key=dst, RenameSource=f"/{bucket}/{src}", **extra)
        except ClientError as exc:
            _raise(exc)

    def make_dir(self, bucket: str, prefix: str) -> None:
        """A folder marker (an empty ``prefix/`` object), as the S3 consoles make one."""
        try:
            self.client.put_object(Bucket=bucket, Key=prefix, Body=b"")
        except ClientError as exc:
            _raise(exc)
