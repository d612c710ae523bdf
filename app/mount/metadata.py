"""What the mount knows of the gateway's names: bucket lists, directory listings and file stats,
each kept for ``cache_seconds`` (the documented delay before a change made through S3 shows),
and dropped at once where this mount made the change.

A directory is listed once however many callers want it at the same moment (``ls -l`` and the
kernel's lookups of its names wait for the one listing), and a listing of a small tree fills
the listings of every directory below it (app/mount/listing.py), each as fresh as that request.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from app.mount import protocol as fuse
from app.mount.inodes import ROOT, Where, child, parent_of
from app.mount.listing import Lister
from app.mount.objects import FileStat, GatewayObjects, Listing

Call = Callable[..., Awaitable[Any]]  # runs a blocking GatewayObjects call in a thread


class Shared:
    """Concurrent identical gateway requests wait for the first one's answer: six processes whose
    cached entry of one name expired together send one lookup, not six (measured: 7 listings ->
    2 for six concurrent ``ls -l`` of one directory)."""

    def __init__(self, call: Call) -> None:
        self.call = call
        self._pending: dict[tuple[Any, ...], tuple[trio.Event, list[Any]]] = {}

    async def __call__(self, fn: Callable[..., Any], *args: Any) -> Any:
        key = (getattr(fn, "__name__", fn), *args)
        pending = self._pending.get(key)
        if pending is not None:
            await pending[0].wait()
            if not pending[1]:  # the first caller was cancelled: ask again
                return await self(fn, *args)
            if isinstance(pending[1][0], Exception):
                raise pending[1][0]
            return pending[1][0]
        done, answer = trio.Event(), list[Any]()
        self._pending[key] = (done, answer)
        try:
            result = await self.call(fn, *args)
            answer.append(result)
            return result
        except Exception as exc:
            answer.append(exc)
            raise
        finally:
            del self._pending[key]
            done.set()


class Metadata:
    def __init__(self, objects: GatewayObjects, call: Call, cache_seconds: float, only_bucket: str | None) -> None:
        self.objects = objects
        self.call = call
        self.cache_seconds = cache_seconds
        self.only_bucket = only_bucket
        self._listings: dict[Where, tuple[float, Listing]] = {}
        self._stats: dict[Where, tuple[float, FileStat | None]] = {}
        self.lister = Lister(objects)
        self.shared = Shared(call)
        self._listing_now: dict[Where, trio.Lock] = {}  # one listing of a directory at a time
        self._large: set[Where] = set()  # directories whose tree did not fit one page: listed by level

    def _fresh(self, at: float) -> bool:
        return time.monotonic() - at < self.cache_seconds

    async def buckets(self) -> list[str]:
        if self.only_bucket:
            return [self.only_bucket]
        cached = self.fresh_listing(ROOT)
        if cached is not None:
            return cached.dirs
        try:
            names: list[str] = await self.shared(self.objects.buckets)
        except (OSError, fuse.FUSEError) as exc:
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
        lock = self._listing_now.setdefault(where, trio.Lock())
        async with lock:
            cached = self.fresh_listing(where)  # listed while this caller waited
            if cached is not None:
                return cached
            bucket, prefix = where
            listings, whole = await self.call(self.lister.directory, bucket, prefix, whole=where not in self._large)
        if not lock.locked() and not lock.statistics().tasks_waiting:
            self._listing_now.pop(where, None)
        if not whole:
            self._mark_large(where)
        now = time.monotonic()
        for below, listing in listings.items():
            self._keep((bucket, below), listing, now)
        return listings[prefix]

    def _keep(self, where: Where, listing: Listing, at: float) -> None:
        self._listings[where] = (at, listing)
        for name, found in listing.files.items():
            self._stats[child(where, name, directory=False)] = (at, found)

    def _mark_large(self, where: Where) -> None:
        """A tree too large for one page: so are the trees that hold it."""
        while where != ROOT and where not in self._large:
            self._large.add(where)
            where = parent_of(where)

    def relistable(self, where: Where) -> bool:
        """Whether ``where`` was listed before and its tree fitted one page: a name in it is then
        answered by listing it again (one request for every name of it) rather than by a HEAD
        per name (``grep -r`` opening files after their directory's listing expired)."""
        return where in self._listings and where not in self._large and where != ROOT

    async def relisted(self, where: Where) -> Listing | None:
        """A fresh listing of ``where`` when it is relistable, else None (and None when the
        remote is out: the caller's HEAD still finds a file buffered on the gateway)."""
        if not self.relistable(where):
            return None
        try:
            return await self.listing(where)
        except fuse.FUSEError as exc:
            if exc.errno != errno.EAGAIN:
                raise
            return None

    async def file_stat(self, where: Where) -> FileStat | None:
        cached = self._stats.get(where)
        if cached and self._fresh(cached[0]):
            return cached[1]
        parent = parent_of(where)
        listing = await self.relisted(parent)
        if listing is not None:
            return listing.files.get(where[1][len(parent[1]):])
        found: FileStat | None = await self.shared(self.objects.stat, *where)
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
