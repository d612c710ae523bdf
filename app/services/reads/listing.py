"""Listing: the remote's pages merged with the journal's not-yet-durable rows."""

from __future__ import annotations

from app.domain.objects import (
    ListPage,
    ObjectSummary,
)
from app.domain.versions import VersionRow
from app.services.buckets import BucketsService
from app.services.core import GatewayCore

EMPTIED_PREFIX_ROWS = 1000  # local rows read to judge whether buffered deletes emptied a prefix
MERGE_ROUNDS = 1000  # merged stretches read for one page (each at least one name further)


class ListingService:
    """ListObjects and ListObjectVersions over the merged view."""

    def __init__(self, core: GatewayCore, buckets: BucketsService) -> None:
        self.journal = core.journal
        self.remote = core.remote
        self._run = core.run
        self.buckets = buckets

    async def list_objects(self, bucket: str, prefix: str, delimiter: str | None, marker: str | None,
                           max_keys: int) -> ListPage:
        """S3's page: ``max_keys`` entries when truncated (merged stretches that deletes thinned
        are read on until full), and truncated only if an entry follows (read one past)."""
        if max_keys <= 0:
            await self.buckets.head_bucket(bucket)
            return ListPage([], [], False, None)
        start_after = listing_start(marker, prefix, delimiter)
        contents: list[ObjectSummary] = []
        common: list[str] = []
        more = False
        for _ in range(MERGE_ROUNDS):
            wanted = max_keys + 1 - len(contents) - len(common)
            page = await self._list_merged(bucket, prefix, delimiter, marker, start_after, wanted)
            contents += page.contents
            common += page.common_prefixes
            more = page.is_truncated
            if not page.is_truncated or len(contents) + len(common) > max_keys:
                break
            # Read on from the position reached: after the last entry, or, with none, the merge's
            # limit (not a name the client saw); past what either rolls up when it is a common
            # prefix (a limit that is one was listed, or emptied by buffered deletes: read from it
            # again, it rolls up the same keys again and the listing goes no further).
            start_after = listing_start(page.next_marker, prefix, delimiter)
        page = _first(contents, common, max_keys)
        if more and not page.is_truncated:
            # Out of rounds before a full page: what was read is complete up to where the reading
            # stopped; the client reads on from there (never a listing that ends early).
            page.is_truncated, page.next_marker = True, start_after
        return page

    async def _list_merged(self, bucket: str, prefix: str, delimiter: str | None, marker: str | None,
                           start_after: str | None, max_keys: int) -> ListPage:
        # Local rows first, then the remote: a row that turns durable in between is then seen on
        # one side or both (merged), never on neither.
        fetch = max_keys + 1
        local = await self._run(self.journal.dirty_under, bucket, prefix, start_after, fetch)
        page = await self._run(self.remote.list_objects, bucket, prefix, delimiter, start_after, max_keys)
        if marker:
            page.common_prefixes = [p for p in page.common_prefixes if p > marker]
            page.contents = [c for c in page.contents if c.key > marker]
        if not local:
            return page
        if delimiter and page.common_prefixes:
            await self._drop_emptied_prefixes(bucket, page, local)
        return merge_listing(page, local, prefix, delimiter, max_keys, local_complete=len(local) < fetch)

    async def _drop_emptied_prefixes(self, bucket: str, page: ListPage, local: list[VersionRow]) -> None:
        """A remote common prefix whose every object has a buffered delete is gone for the client:
        ask, for each prefix with a local delete under it, whether anything else is left."""
        for common in [p for p in page.common_prefixes if any(r.is_delete and r.key.startswith(p) for r in local)]:
            if not await self._prefix_has_objects(bucket, common):
                page.common_prefixes.remove(common)

    async def _prefix_has_objects(self, bucket: str, prefix: str) -> bool:
        rows = await self._run(self.journal.dirty_under, bucket, prefix, None, EMPTIED_PREFIX_ROWS + 1)
        if len(rows) > EMPTIED_PREFIX_ROWS or any(not r.is_delete for r in rows):
            return True  # a buffered put lives there (or too many rows to judge: keep the prefix)
        deleted = {r.key for r in rows}
        page = await self._run(self.remote.list_objects, bucket, prefix, None, None, len(deleted) + 1)
        return page.is_truncated or any(c.key not in deleted for c in page.contents)

    async def list_versions(self, bucket: str, prefix: str, delimiter: str | None, key_marker: str | None,
                            max_keys: int) -> ListPage:
        """Unversioned buckets: every object is its one ``null`` version."""
        page = await self.list_objects(bucket, prefix, delimiter, key_marker, max_keys)
        for item in page.contents:
            item.version_id = "null"
        return page


def listing_start(marker: str | None, prefix: str, delimiter: str | None) -> str | None:
    """Where the next page starts: after the marker, and past everything rolled up under it when
    the marker is a common prefix (its first delimiter after the prefix is its end). A key that
    merely ends with the delimiter (a merged page's limit) is not one: what follows it may still
    roll up into a shorter prefix not listed yet."""
    if not marker or not delimiter or not marker.startswith(prefix):
        return marker
    rest = marker[len(prefix):]
    if rest.endswith(delimiter) and rest.find(delimiter) == len(rest) - len(delimiter):
        return marker + "\U0010ffff"
    return marker


def merge_listing(page: ListPage, local: list[VersionRow], prefix: str, delimiter: str | None,
                  max_keys: int, *, local_complete: bool = True) -> ListPage:
    """Merge the remote's page with not-yet-durable local rows (puts added, deletes hidden).

    When the remote page is truncated, only names up to its last one are complete, so the merge
    stops there and the next page continues from the last name returned.
    """
    entries: dict[str, ObjectSummary | None] = {c.key: c for c in page.contents}
    prefixes = set(page.common_prefixes)
    limit = page.next_marker if page.is_truncated else None
    if not local_complete:
        # More local rows exist past the last one fetched: names beyond it are not complete.
        limit = min(limit, local[-1].key) if limit is not None else local[-1].key
    for row in local:
        if limit is not None and row.key > limit:
            break
        rest = row.key[len(prefix):]
        if delimiter and delimiter in rest:
            if not row.is_delete:
                prefixes.add(prefix + rest[: rest.index(delimiter) + len(delimiter)])
            continue
        if row.is_delete:
            entries.pop(row.key, None)
        else:
            entries[row.key] = ObjectSummary(row.key, row.size, row.etag, row.created_at)
    names = sorted([(k, False) for k in entries] + [(p, True) for p in prefixes])
    if limit is not None:
        names = [n for n in names if n[0] <= limit]
    chosen = names[:max_keys]
    truncated = len(names) > max_keys or page.is_truncated or not local_complete
    contents = [e for name, is_prefix in chosen if not is_prefix and (e := entries[name]) is not None]
    common = [name for name, is_prefix in chosen if is_prefix]
    next_marker = (chosen[-1][0] if chosen else limit) if truncated else None
    return ListPage(contents, common, truncated, next_marker)


def _first(contents: list[ObjectSummary], common: list[str], max_keys: int) -> ListPage:
    """The first ``max_keys`` names of what was read; truncated when more were read."""
    by_name: dict[str, ObjectSummary | None] = {p: None for p in common}
    by_name.update({c.key: c for c in contents})
    names = sorted(by_name.items(), key=lambda n: n[0])
    chosen = names[:max_keys]
    truncated = len(names) > max_keys
    return ListPage([c for _, c in chosen if c is not None], [n for n, c in chosen if c is None], truncated,
                    chosen[-1][0] if truncated and chosen else None)
