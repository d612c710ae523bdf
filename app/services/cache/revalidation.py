"""Revalidation: a stale entry is checked with a conditional HEAD before it is served; in bulk,
a bucket's entries are compared with the remote listing (one LIST per 1000 keys), dropping those
whose object changed or was deleted.
"""

from __future__ import annotations

import logging

from app import metrics
from app.domain.cache import Entry
from app.domain.errors import S3Error
from app.domain.objects import ObjectMeta
from app.domain.policy import Policy
from app.services.cache.base import CacheBase

log = logging.getLogger("ferry.cache")


def _before(key: str) -> str:
    """A string that sorts just before ``key``, so a listing that starts after it includes key."""
    if not key:
        return ""
    code = ord(key[-1]) - 1
    if 0xD800 <= code <= 0xDFFF:
        code = 0xD7FF
    return key[:-1] + (chr(code) + "\U0010ffff" if code >= 0 else "")


class Revalidation(CacheBase):
    """Checking entries against the remote."""

    async def _revalidate(self, entry: Entry, bucket: str, key: str, policy: Policy) -> tuple[Entry | None, str]:
        """A stale entry: one conditional HEAD. 304 or the same ETag keeps it ('hit'); a new ETag
        drops it ('miss'); a deleted object drops it and raises; a remote error gives 'stale' if
        the policy serves stale, else ServiceUnavailable."""
        try:
            meta = await self._run(self._conditional_head, bucket, key, entry.etag)
        except S3Error as err:
            if err.code == "NotModified":
                metrics.revalidated("unchanged")
                await self._run(self.index.validated, [entry.id])
                return entry, "hit"
            if err.code in ("NoSuchKey", "NoSuchBucket"):
                metrics.revalidated("deleted")
                await self.drop(entry)
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
            await self._run(self.index.validated, [entry.id])
            return entry, "hit"
        metrics.revalidated("changed")
        await self.drop(entry)
        return None, "miss"

    def _conditional_head(self, bucket: str, key: str, etag: str) -> ObjectMeta:
        return self.remote.head_object(bucket, key, if_none_match=etag)

    def revalidate_bucket(self, bucket: str, prefix: str = "") -> dict[str, int]:
        """Compare this node's entries with the remote listing, one LIST per 1000 keys; drop
        entries whose object changed or was deleted, mark the rest validated."""
        stats = {"unchanged": 0, "changed": 0, "deleted": 0, "lists": 0}
        after_key: str | None = None
        while True:
            batch = self.index.under(bucket, prefix, after_key, 1000)
            if not batch:
                return stats
            after_key = batch[-1].key
            entries = [e for e in batch if self.policies.for_key(bucket, e.key).revalidate != "immutable"]
            # Some servers (SeaweedFS) list directory by directory, not in S3's byte order, so a
            # key can be missing from a page that spans it; their profile says so.
            ordered = self.remote.profile(bucket).ordered_listing
            pos = 0
            while pos < len(entries):
                page = self.remote.list_objects(bucket, prefix, None, _before(entries[pos].key), 1000)
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
                        self._drop_sync(entry)
                    pos += 1
                self.index.validated(fresh)

    def _current_etag(self, bucket: str, key: str) -> str | None:
        try:
            return self.remote.head_object(bucket, key).etag
        except S3Error as err:
            if err.code in ("NoSuchKey", "NoSuchBucket"):
                return None
            raise

    def revalidate_all(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for bucket in self.index.buckets():
            try:
                for name, n in self.revalidate_bucket(bucket).items():
                    totals[name] = totals.get(name, 0) + n
            except S3Error as err:
                if err.code == "NoSuchBucket":
                    continue
                log.warning("revalidation of %s failed: %s", bucket, err.message)
        return totals
