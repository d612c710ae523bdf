"""Bucket-name and key rules. Keys are data, never paths: they are only checked, never joined."""

from __future__ import annotations

import re

from app.domain.errors import S3Error
from app.domain.profiles import DEFAULT_PROFILE, RemoteProfile

MAX_KEY_BYTES = 1024
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")
_IP = re.compile(r"^\d+\.\d+\.\d+\.\d+$")


def validate_bucket_name(name: str) -> None:
    """S3's DNS-compatible naming rules, so every bucket maps 1:1 onto any remote."""
    if not _BUCKET.match(name) or ".." in name or _IP.match(name) or name.startswith("xn--"):
        raise S3Error("InvalidBucketName", BucketName=name)


def validate_key(key: str, profile: RemoteProfile = DEFAULT_PROFILE) -> None:
    """Length in UTF-8 bytes and no NUL (XML cannot carry it, so S3 listings could not either);
    for a remote whose keys are paths (``profile.path_keys``), only keys it stores 1:1."""
    if not key:
        raise S3Error("InvalidArgument", "Object key must not be empty")
    if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        raise S3Error("KeyTooLongError", Size=str(len(key.encode("utf-8", "surrogatepass"))))
    if "\x00" in key:
        raise S3Error("InvalidArgument", "Object key must not contain NUL")
    if profile.path_keys:
        _check_portable(key)


# Keys S3 accepts but a filesystem-backed remote (measured on SeaweedFS, the reference remote)
# would store under a *different* name or refuse: "a//b", "/a" and "a\\b" are silently stored
# as "a/b", "a" and "a/b" (so a GET of one would return another object), and "." / ".."
# segments are refused with a bare 400. Refusing them up front keeps every key 1:1 with the
# remote object, with an error that says why.
MAX_SEGMENT_BYTES = 255  # filesystem-backed remotes (SeaweedFS, MinIO) refuse longer path segments


def _check_portable(key: str) -> None:
    # With write-back the remote sees a key only after the client got its answer: a key the
    # remote would refuse must be refused here, before the write is acknowledged.
    for segment in key.split("/"):
        if len(segment.encode("utf-8", "surrogatepass")) > MAX_SEGMENT_BYTES:
            raise S3Error("KeyTooLongError", "A '/'-separated segment of the key is longer than 255 bytes, "
                          "which filesystem-backed remotes cannot store")
    if key.startswith("/") or "//" in key:
        raise S3Error("InvalidArgument", "Object key must not start with '/' or contain '//': the remote "
                      "would store it under a different name")
    if "\\" in key:
        raise S3Error("InvalidArgument", "Object key must not contain '\\': the remote would store it "
                      "under a different name")
    if any(segment in (".", "..") for segment in key.split("/")):
        raise S3Error("InvalidArgument", "Object key must not contain '.' or '..' path segments")


def validate_object_size(key: str, size: int, profile: RemoteProfile = DEFAULT_PROFILE) -> None:
    """On a filesystem-backed remote a key ending in '/' is a folder marker: the remote keeps
    it, but drops its bytes. AWS keeps them."""
    if size and key.endswith("/") and profile.empty_folders:
        raise S3Error("InvalidArgument", "An object whose key ends with '/' must be empty: the remote "
                      "stores such keys as folders and would lose the data")
