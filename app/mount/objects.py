"""The mount's view of the gateway: S3 requests through boto3, nothing of FUSE.

The mount is a client of the node's owner (invariant 6): it never opens the data directory.
Every call here blocks; the filesystem layer runs them in threads.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import ClientError

MiB = 1024 * 1024
# A file larger than this is published as a multipart upload of PART_SIZE parts, 8 at once.
MULTIPART_THRESHOLD = 64 * MiB
PART_SIZE = 16 * MiB

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
                 connections: int = 32) -> None:
        self.client = boto3.client(
            "s3", endpoint_url=url, aws_access_key_id=access_key, aws_secret_access_key=secret_key,
            region_name=region, config=Config(s3={"addressing_style": "path"}, max_pool_connections=connections,
                                              retries={"max_attempts": 5, "mode": "standard"},
                                              connect_timeout=10, read_timeout=120))
        self.transfer = TransferConfig(multipart_threshold=MULTIPART_THRESHOLD, multipart_chunksize=PART_SIZE,
                                       max_concurrency=8, use_threads=True)

    def buckets(self) -> list[str]:
        try:
            return sorted(b["Name"] for b in self.client.list_buckets().get("Buckets", []))
        except ClientError as exc:
            _raise(exc)
            raise

    def list_dir(self, bucket: str, prefix: str) -> Listing:
        """Every key one level under ``prefix`` ('' or ending in '/'), as the gateway lists them
        (buffered writes merged in); the prefix's own folder marker is not an entry."""
        dirs: list[str] = []
        files: dict[str, FileStat] = {}
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(
                    Bucket=bucket, Prefix=prefix, Delimiter="/"):
                dirs.extend(p["Prefix"][len(prefix):-1] for p in page.get("CommonPrefixes", []))
                for item in page.get("Contents", []):
                    name = item["Key"][len(prefix):]
                    if name:
                        files[name] = _stat(item["Size"], item["LastModified"], item.get("ETag", ""))
        except ClientError as exc:
            _raise(exc)
        return Listing(dirs, files)

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

    def read(self, bucket: str, key: str, start: int, length: int, etag: str) -> bytes:
        """``length`` bytes from ``start`` of the version ``etag`` names: a newer version answers
        ESTALE rather than mixing two versions' bytes into one read."""
        try:
            got = self.client.get_object(Bucket=bucket, Key=key, Range=f"bytes={start}-{start + length - 1}",
                                         IfMatch=f'"{etag}"')
            return bytes(got["Body"].read())
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code")
            if code in ("PreconditionFailed", "412"):
                raise ObjectError("Stale", f"{bucket}/{key} changed while open") from exc
            if code == "InvalidRange":
                return b""
            _raise(exc)
            raise

    def publish(self, bucket: str, key: str, path: Path) -> FileStat:
        """The whole file as the object: one PUT (or one multipart upload), acknowledged by the
        gateway once durable (fsync and journal) — never visible in part."""
        try:
            self.client.upload_file(str(path), bucket, key, Config=self.transfer)
        except ClientError as exc:
            _raise(exc)
        except Exception as exc:  # boto3's S3UploadFailedError wraps the ClientError
            cause = exc.__cause__ or exc.__context__
            if isinstance(cause, ClientError):
                _raise(cause)
            raise ObjectError("UploadFailed", str(exc)) from exc
        found = self.stat(bucket, key)
        if found is None:
            raise ObjectError("NoSuchKey", f"{bucket}/{key} vanished after its upload")
        return found

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
