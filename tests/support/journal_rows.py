"""Journal rows for a test's set-up, committed as the write services commit them: one unit of
work (``journal.units``) that invalidates the key's cached copies and adds the row."""

from __future__ import annotations

from app.adapters.catalog.journal.journal import Journal
from app.domain.versions import VersionDraft, VersionRow


def append_put(journal: Journal, draft: VersionDraft) -> VersionRow:
    with journal.units.begin() as work:
        work.cache.invalidate(draft.bucket, draft.key)
        return work.journal.put(draft)


def append_delete(journal: Journal, bucket: str, key: str, tenant_id: int | None = None, *,
                  invalidate: bool = True) -> VersionRow:
    with journal.units.begin() as work:
        if invalidate:
            work.cache.invalidate(bucket, key)
        return work.journal.delete(bucket, key, tenant_id)
