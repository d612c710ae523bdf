"""Capability profiles of remotes: what a kind of store can hold, so the gateway refuses up front
only what *this* bucket's remote would lose or rename.

A write-back write is acknowledged before the remote sees it, so a key the remote would store
under another name (or refuse) must be refused at the gateway. Which keys those are depends on
the remote: a filesystem-backed store (SeaweedFS, MinIO on a filesystem) maps '/' to
directories, while AWS S3 holds any key of up to 1024 bytes. Measured on SeaweedFS: see
``app/domain/names.py``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RemoteProfile:
    """What the gateway must check before accepting a key for a remote of this kind."""

    name: str
    path_keys: bool  # keys are filesystem paths: no '//', leading '/', '\\', '.'/'..', segments <= 255 bytes
    empty_folders: bool  # a key ending in '/' is a directory: it cannot hold bytes
    ordered_listing: bool  # LIST pages are in S3's byte order: a key absent from a page's span is gone
    http_date_expires: bool  # Expires must be an HTTP date ('Wed, 21 Oct 2015 07:28:00 GMT') or is refused
    description: str


AWS = RemoteProfile("aws", path_keys=False, empty_folders=False, ordered_listing=True, http_date_expires=False,
                    description="AWS S3 (and stores that keep keys as opaque strings): every key S3 accepts")
SEAWEEDFS = RemoteProfile("seaweedfs", path_keys=True, empty_folders=True, ordered_listing=False,
                          http_date_expires=True,
                          description="a filesystem-backed store (SeaweedFS, MinIO): keys are paths")

PROFILES: dict[str, RemoteProfile] = {p.name: p for p in (AWS, SEAWEEDFS)}
PROFILE_NAMES = tuple(PROFILES)
DEFAULT_PROFILE = SEAWEEDFS  # today's behaviour: the strictest checks


def profile_named(name: str | None) -> RemoteProfile:
    """The profile called ``name`` (None: the default); ValueError for an unknown one."""
    if name is None:
        return DEFAULT_PROFILE
    try:
        return PROFILES[name]
    except KeyError:
        raise ValueError(f"unknown remote profile {name!r}: one of {', '.join(PROFILE_NAMES)}") from None
