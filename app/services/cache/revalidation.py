"""Revalidation: a stale entry is checked with a conditional HEAD before it is served; in bulk,
a bucket's entries are compared with the remote listing (one LIST per 1000 keys), dropping those
whose object changed or was deleted.

Under ``serve_stale`` a read waits at most ``STALE_WAIT`` for its HEAD: a hung or slow remote must
not hold an answer the cache already has. The HEAD goes on in the background (one per entry, shared
by every reader of it) and its answer still updates the index: validated, or dropped if changed.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

from app import metrics
from app.domain.cache import Entry
from app.domain.errors import S3Error
from app.domain.objects import ObjectMeta
from app.domain.policy import Policy
from app.services.cache.base import CacheBase

log = logging.getLogger("ferry.cache")

STALE_WAIT = 0.25  # seconds a serve-stale read waits for its revalidation before answering stale


def _settled(running: dict[int, Any], tasks: list[Any], entry_id: int, task: asyncio.Future[Any]) -> None:
    """A background revalidation ended: forget it, and take its error so nothing warns of it."""
    if running.get(entry_id) is task:
        del running[entry_id]
    if task in tasks:
        tasks.remove(task)
    if not task.cancelled() and task.exception() is not None:
        err = task.exception()
        if not isinstance(err, S3Error):
            log.warning("revalidation of an entry failed: %r", err)


def _before(key: str) -> str:
    """A string that sorts just before ``key``, so a listing that starts after it includes key."""
    if not key:
        return ""
    code = ord(key[-1]) - 1
    if 0xD800 <= code <= 0xDFFF:
        code = 0xD7FF
    return key[:-1] + (chr(code) + "\U0010ffff" if code >= 0 else "")


class Revalidation:
    """Checking entries against the remote."""

    def __init__(self, cache: CacheBase) -> None:
        self.cache = cache

    async def revalidate(self, entry: Entry, bucket: str, key: str, policy: Policy) -> tuple[Entry | None, str]:
        """A stale entry: revalidate it; under serve-stale, answer 'stale' at once if the remote has
        not answered within ``STALE_WAIT`` and let the HEAD finish in the background."""
        if not policy.serve_stale:
            return await self._check(entry, bucket, key, policy)
        running = self.cache.revalidating
        task = running.get(entry.id)
        if task is None:
            task = asyncio.ensure_future(self._check(entry, bucket, key, policy))
            running[entry.id] = task
            self.cache.tasks.append(task)  # stop() cancels what is left
            task.add_done_callback(functools.partial(_settled, running, self.cache.tasks, entry.id))
        await asyncio.wait({task}, timeout=STALE_WAIT)
        if task.done():
            return task.result()
        metrics.revalidated("deferred")
        return entry, "stale"

    async def _check(self, entry: Entry, bucket: str, key: str, policy: Policy) -> tuple[Entry | None, str]:
        """One conditional HEAD. 304 or the same ETag keeps it ('hit'); a new ETag
        drops it ('miss'); a deleted object drops it and raises; a remote error gives 'stale' if
        the policy serves stale, else ServiceUnavailable."""
        try:
            meta = await self.cache.run(self._conditional_head, bucket, key, entry.etag)
        except S3Error as err:
            if err.code == "NotModified":
                metrics.revalidated("unchanged")
                await self.cache.run(self.cache.index.validated, [entry.id])
                return entry, "hit"
            if err.code in ("NoSuchKey", "NoSuchBucket"):
                metrics.revalidated("deleted")
                await self.cache.drop(entry)
                raise
            if err.status >= 500:
                metrics.revalidated("error")
                if policy.serve_stale:
                    return entry, "stale"
                raise S3Error("ServiceUnavailable", "The remote region is unreachable and the cached copy of this "
                              "object is past its revalidation policy (serve-stale is off).") from err
            raise
        if meta.etag == entry.etag:  # the remote ignored If-None-Match
            metrics.revalidated("unchanged")
            await self.cache.run(self.cache.index.validated, [entry.id])
            return entry, "hit"
        metrics.revalidated("changed")
        await self.cache.drop(entry)
        return None, "miss"

    def _conditional_head(self, bucket: str, key: str, etag: str) -> ObjectMeta:
        return self.cache.remote.head_object(bucket, key, if_none_match=etag)

    def revalidate_bucket(self, bucket: str, prefix: str = "") -> dict[str, int]:
        """Compare this node's entries with the remote listing, one LIST per 1000 keys; drop
        entries whose object changed or was deleted, mark the rest validated."""
        stats = {"unchanged": 0, "changed": 0, "deleted": 0, "lists": 0}
        after_key: str | None = None
        while True:
            batch = self.cache.index.under(bucket, prefix, after_key, 1000)
            if not batch:
                return stats
            after_key = batch[-1].key
            entries = [e for e in batch if self.cache.policies.for_key(bucket, e.key).revalidate != "immutable"]
            # Some servers (SeaweedFS) list directory by directory, not in S3's byte order, so a
            # key can be missing from a page that spans it; their profile says so.
            ordered = self.cache.remote.profile(bucket).ordered_listing
            pos = 0
            while pos < len(entries):
                page = self.cache.remote.list_as_listed(bucket, prefix, _before(entries[pos].key), 1000)
                stats["lists"] += 1
                remote = {c.key: c.etag for c in page.contents}
                horizon = page.contents[-1].key if page.is_truncated and page.contents else None
                fresh: list[int] = []
                while pos < len(entries) and (horizon is None or entries[pos].key <= horizon):
                    entry = entries[pos]
                    etag = remote.get(entry.key)
                    if etag is None and not ordered:
                        # Absent from a page that spans it, on a remote that may list out of
                        # byte order: ask about it directly before dropping anything.
                        etag = self._current_etag(bucket, entry.key)
                        stats["heads"] = stats.get("heads", 0) + 1
                    result = "unchanged" if etag == entry.etag else ("deleted" if etag is None else "changed")
                    stats[result] += 1
                    metrics.revalidated(result)
                    if result == "unchanged":
                        fresh.append(entry.id)
                    else:
                        self.cache.drop_now(entry)
                    pos += 1
                self.cache.index.validated(fresh)

    def _current_etag(self, bucket: str, key: str) -> str | None:
        try:
            return self.cache.remote.head_object(bucket, key).etag
        except S3Error as err:
            if err.code in ("NoSuchKey", "NoSuchBucket"):
                return None
            raise

    def revalidate_all(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for bucket in self.cache.index.buckets():
            try:
                for name, n in self.revalidate_bucket(bucket).items():
                    totals[name] = totals.get(name, 0) + n
            except S3Error as err:
                if err.code == "NoSuchBucket":
                    continue
                log.warning("revalidation of %s failed: %s", bucket, err.message)
        return totals
