"""Deleted cache blocks are retired, not unlinked (issue 25): a reader that decided to serve a
version still opens its blocks after the entry is replaced, dropped or evicted, in any process,
until the retired sweep (grace by ctime, under the data dir's retired lock)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from app.adapters.local.blockformat import DATA_OFFSET
from app.adapters.local.cachestore import CacheStore
from app.domain.objects import FileSegment
from app.s3.app import _open_segment
from app.services.cache.eviction import RETIRED_LOCK
from tests.unit.test_cache_sweep import make_cache


def _block(store: CacheStore, name: str, data: bytes) -> None:
    fill = store.open_fill(name)
    fill.write(data)
    store.publish(fill)


def test_a_deleted_block_is_still_opened_by_name_and_by_segment_until_swept(tmp_path: Path) -> None:
    store = CacheStore(tmp_path)
    name = "ab" * 32
    _block(store, name, b"old bytes")
    segment = FileSegment(store.file_of(name), DATA_OFFSET, 9, store.open_file)
    assert store.delete(name) == 9  # counted freed at once
    assert not store.has(name, 9) and store.size_of(name) is None  # a fill would fetch it again
    assert store.servable(name, 9)
    for fd in (store.open_block(name), _open_segment(segment)):
        try:
            assert os.pread(fd, 9, DATA_OFFSET) == b"old bytes"
        finally:
            os.close(fd)
    assert not list(store.block_files(name[:2]))  # the orphan sweep and the scrub never see it
    assert store.sweep_retired() == (0, 0)  # within the grace
    assert store.sweep_retired(grace=0.0)[0] == 1
    assert not store.servable(name, 9)
    try:
        store.open_block(name)
        raise AssertionError("swept")
    except FileNotFoundError:
        pass


def test_the_grace_runs_from_the_rename_and_need_frees_the_oldest(tmp_path: Path) -> None:
    store = CacheStore(tmp_path)
    old, new = "01" * 32, "02" * 32
    _block(store, old, b"x" * 100)
    _block(store, new, b"y" * 100)
    past = time.time() - 3600
    os.utime(store.file_of(old), (past, past))  # an old mtime: the rename's ctime decides
    store.delete(old)
    time.sleep(0.05)
    store.delete(new)
    assert store.sweep_retired(grace=600.0) == (0, 0)
    files, freed = store.sweep_retired(grace=600.0, need=1)
    assert files == 1 and freed == DATA_OFFSET + 100
    assert not os.path.exists(store.retired_of(old)) and os.path.exists(store.retired_of(new))


def test_the_retired_sweep_holds_the_data_dirs_lock(tmp_path: Path) -> None:
    cache = make_cache(tmp_path)
    store = cache.store
    assert isinstance(store, CacheStore)
    name = "cd" * 32
    _block(store, name, b"z")
    store.delete(name)
    assert store.try_lock(RETIRED_LOCK)
    try:
        # Locks of cache/locks are per process: a child stands in for another worker.
        pid = os.fork()
        if pid == 0:
            os._exit(0 if cache.sweep_retired(grace=0.0) == (0, 0) else 1)
        assert os.waitpid(pid, 0)[1] == 0, "swept without the lock"
    finally:
        store.unlock(RETIRED_LOCK)
    assert cache.sweep_retired(grace=0.0)[0] == 1


def test_wipe_removes_retired_blocks(tmp_path: Path) -> None:
    store = CacheStore(tmp_path)
    name = "ef" * 32
    _block(store, name, b"w")
    store.delete(name)
    store.wipe()
    assert not os.listdir(store.retired) and not store.servable(name, 1)


def test_a_stream_begun_before_its_blocks_are_deleted_serves_the_old_bytes(tmp_path: Path) -> None:
    import asyncio

    from tests.unit.test_cache_sweep import BLOCK, cached

    cache = make_cache(tmp_path)
    names = cached(cache, "k", 40 * BLOCK)
    for name in names:  # as fills publish them: with their header
        _block(cache.store, name, b"b" * BLOCK)  # type: ignore[arg-type]
    entry = cache.index.get("bkt", "k")
    assert entry is not None and all(cache.store.has(n, BLOCK) for n in names)

    async def run() -> bytes:
        body = bytearray()
        stream = cache.serving.stream(entry, 0, entry.size - 1, "hit")
        async for chunk in stream:
            body += chunk
            if len(body) == BLOCK:
                cache.drop_now(entry)  # the entry replaced/dropped: every block deleted
                assert not any(cache.store.has(n, BLOCK) for n in names)
        return bytes(body)

    assert asyncio.run(run()) == b"b" * (40 * BLOCK)
