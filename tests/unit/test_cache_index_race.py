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
import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Engine, event

from app.adapters.catalog.cache_index import CacheIndex, invalidate_key
from app.domain.objects import ObjectMeta
from app.domain.states import CacheState


def _meta(body: bytes) -> ObjectMeta:
    return ObjectMeta(key="k", size=len(body), etag=hashlib.md5(body).hexdigest(), last_modified=datetime.now(UTC),
                      content_headers={}, metadata={}, checksums={})


@pytest.mark.parametrize("window", ["DELETE", "INSERT"])
def test_a_destage_committing_inside_put_ready_never_leaves_the_old_version_current(engine: Engine, window: str) -> None:
    """One commit (as in life: a second would invalidate the row the first let through)."""
    index = CacheIndex(engine, "node-a")
    commits: list[threading.Thread] = []

    def destage_commits() -> None:  # what Journal.mark_durable does to the cache, in its own transaction
        with engine.begin() as conn:
            invalidate_key(conn, "b", "k")

    def in_a_window(_conn: Any, _cursor: Any, statement: str, _params: Any, _context: Any, _many: bool) -> None:
        head = statement.lstrip().upper()
        if commits or not head.startswith(f"{window} {'FROM' if window == 'DELETE' else 'INTO'} CACHE_ENTRIES"):
            return
        commit = threading.Thread(target=destage_commits, name=window)
        commits.append(commit)
        commit.start()
        commit.join(2.0)  # it either commits now (the window is open) or waits for put_ready's lock

    destage_commits()  # the pool holds a connection for the other commit: it is not slowed by a connect
    time.sleep(0.01)
    started = time.time()
    event.listen(engine, "before_cursor_execute", in_a_window)
    try:
        index.put_ready(_meta(b"version 6"), "b", 1024, None, False, started, 9)
    finally:
        event.remove(engine, "before_cursor_execute", in_a_window)
        for commit in commits:
            commit.join(30)
    assert len(commits) == 1, "put_ready never reached the window"
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
