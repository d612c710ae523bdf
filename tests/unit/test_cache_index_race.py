"""A discovery's row against a concurrent commit that replaces the key (issue 16's ordering flake).

The read-order test once read version 6 after 7: a staging discovery fetched 6 from the remote,
checked that no write of the key was dirty or destaged since it began, was preempted, and wrote
its row after the destage of 7 had committed (and invalidated the key). On SQLite the checks ran
outside the insert's transaction (pysqlite begins one only at the first write). Here the other
commit is forced into each window of ``put_ready``: before its first statement that writes, and
just before its insert.
"""

from __future__ import annotations

import hashlib
import time
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine

from app.adapters.catalog.cache.entry_rows import invalidate_key
from app.adapters.catalog.cache.index import CacheIndex
from app.domain.objects import ObjectMeta
from app.domain.states import CacheState
from tests.support.commit_gaps import other_commit_in_the_gap


def _meta(body: bytes) -> ObjectMeta:
    return ObjectMeta(key="k", size=len(body), etag=hashlib.md5(body).hexdigest(), last_modified=datetime.now(UTC),
                      content_headers={}, metadata={}, checksums={})


@pytest.mark.parametrize("window", ["DELETE", "INSERT"])
def test_a_destage_committing_inside_put_ready_never_leaves_the_old_version_current(engine: Engine, window: str) -> None:
    """One commit (as in life: a second would invalidate the row the first let through)."""
    index = CacheIndex(engine, "node-a")

    def destage_commits() -> None:  # what Journal.mark_durable does to the cache, in its own transaction
        with engine.begin() as conn:
            invalidate_key(conn, "b", "k")

    destage_commits()  # the pool holds a connection for the other commit: it is not slowed by a connect
    time.sleep(0.01)
    started = time.time()
    head = f"{window} {'FROM' if window == 'DELETE' else 'INTO'} CACHE_ENTRIES"
    with other_commit_in_the_gap(engine, head, destage_commits):  # commits now, or waits for put_ready's lock
        index.put_ready(_meta(b"version 6"), "b", 1024, None, False, started, 9)
    entry = index.get("b", "k")
    assert entry is None or entry.state != CacheState.READY, "version 6 is served as current after 7 replaced it"
    # And the tombstone still refuses a later insert of a discovery that began before it.
    assert index.put_ready(_meta(b"version 6"), "b", 1024, None, False, started, 9) is None


def test_a_discovery_that_began_after_the_commit_is_recorded(engine: Engine) -> None:
    index = CacheIndex(engine, "node-a")
    with engine.begin() as conn:
        invalidate_key(conn, "b", "k")
    time.sleep(0.01)
    entry = index.put_ready(_meta(b"version 7"), "b", 1024, None, False, time.time(), 9)
    assert entry is not None and index.get("b", "k") == entry
