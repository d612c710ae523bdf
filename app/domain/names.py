"""Bucket-name and key rules. Keys are data, never paths: they are only checked, never joined."""

from __future__ import annotations

import re

from app.domain.errors import S3Error

MAX_KEY_BYTES = 1024
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")
_IP = re.compile(r"^\d+\.\d+\.\d+\.\d+$")


def validate_bucket_name(name: str) -> None:
    """S3's DNS-compatible naming rules, so every bucket maps 1:1 onto any remote."""
    if not _BUCKET.match(name) or ".." in name or _IP.match(name) or name.startswith("xn--"):
        raise S3Error("InvalidBucketName", BucketName=name)


def validate_key(key: str) -> None:
    """Length in UTF-8 bytes and no NUL (XML cannot carry it, so S3 listings could not either)."""
    if not key:
        raise S3Error("InvalidArgument", "Object key must not be empty")
    if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        raise S3Error("KeyTooLongError", Size=str(len(key.encode("utf-8", "surrogatepass"))))
    if "\x00" in key:
        raise S3Error("InvalidArgument", "Object key must not contain NUL")
