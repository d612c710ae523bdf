"""What the mount knows of the gateway's names: bucket lists, directory listings and file stats,
each kept for ``cache_seconds`` (the documented delay before a change made through S3 shows),
and dropped at once where this mount made the change."""

from __future__ import annotations

import errno
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pyfuse3

from app.mount.inodes import ROOT, Where, child, parent_of
from app.mount.objects import FileStat, GatewayObjects, Listing

Call = Callable[..., Awaitable[Any]]  # runs a blocking GatewayObjects call in a thread


class Metadata:
    def __init__(self, objects: GatewayObjects, call: Call, cache_seconds: float, only_bucket: str | None) -> None:
        self.objects = objects
        self.call = call
        self.cache_seconds = cache_seconds
        self.only_bucket = only_bucket
        self._listings: dict[Where, tuple[float, Listing]] = {}
        self._stats: dict[Where, tuple[float, FileStat | None]] = {}

    def _fresh(self, at: float) -> bool:
        return time.monotonic() - at < self.cache_seconds

    async def buckets(self) -> list[str]:
        if self.only_bucket:
            return [self.only_bucket]
        cached = self.fresh_listing(ROOT)
        if cached is not None:
            return cached.dirs
        try:
            names: list[str] = await self.call(self.objects.buckets)
        except (OSError, pyfuse3.FUSEError) as exc:
            # The remote is out (ListBuckets is the remote's): the buckets seen last still resolve,
            # so files buffered in them by any node stay readable; a new bucket waits for the remote.
            # (``call`` answers a gateway error as the FUSEError the kernel gets, errno and all.)
            stale = self._listings.get(ROOT)
            if exc.errno != errno.EAGAIN or stale is None:
                raise
            return stale[1].dirs
        self._listings[ROOT] = (time.monotonic(), Listing(names, {}))
        return names

    def fresh_listing(self, where: Where) -> Listing | None:
        cached = self._listings.get(where)
        return cached[1] if cached and self._fresh(cached[0]) else None

    async def listing(self, where: Where) -> Listing:
        cached = self.fresh_listing(where)
        if cached is not None:
            return cached
        listing: Listing = await self.call(self.objects.list_dir, where[0], where[1])
        now = time.monotonic()
        self._listings[where] = (now, listing)
        for name, found in listing.files.items():
            self._stats[child(where, name, directory=False)] = (now, found)
        return listing

    async def file_stat(self, where: Where) -> FileStat | None:
        cached = self._stats.get(where)
        if cached and self._fresh(cached[0]):
            return cached[1]
        found: FileStat | None = await self.call(self.objects.stat, *where)
        self._stats[where] = (time.monotonic(), found)
        return found

    def known(self, where: Where) -> FileStat | None:
        """The last stat seen of ``where``, however old (for a time to show, never for existence)."""
        cached = self._stats.get(where)
        return cached[1] if cached else None

    def forget(self, where: Where) -> None:
        self._listings.pop(where, None)

    def changed(self, where: Where, found: FileStat | None = None) -> None:
        """This mount changed ``where``: its own caches must not show the old state."""
        self._listings.pop(parent_of(where), None)
        if found is None:
            self._stats.pop(where, None)
        else:
            self._stats[where] = (time.monotonic(), found)
