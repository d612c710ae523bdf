"""The orphan sweep over a real SQLite cache index and data directory, in one pass and in many
(the bounded-memory path of a big cache)."""

from __future__ import annotations

import hashlib
import os
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from app.adapters.catalog.cache.index import CacheIndex
from app.adapters.catalog.control.policies import PolicyRepo
from app.adapters.catalog.engine import make_engine
from app.adapters.catalog.migrate import upgrade
from app.adapters.local.cachestore import CacheStore
from app.domain.cache import block_name
from app.domain.objects import ObjectMeta
from app.domain.policy import Policy
from app.services.cache import ReadCache, orphans
from app.services.cache.fill import RemoteBlockSource
from app.services.control.policies import PolicyBook
from app.services.writes.budget import DiskReserve
from tests.fakes.remote import InMemoryRemote

BLOCK = 1000


def make_cache(tmp_path: Path, url: str | None = None, node_id: str = "node-a") -> ReadCache:
    url = url or f"sqlite:///{tmp_path / 'ferry.db'}"
    upgrade(url)
    engine = make_engine(url, synchronous="NORMAL")
    index = CacheIndex(engine, node_id)
    remote = InMemoryRemote()
    return ReadCache(index, CacheStore(tmp_path), remote, PolicyBook(PolicyRepo(engine), Policy()),
                     source=RemoteBlockSource(remote), disk=DiskReserve(tmp_path, 0, 0.0), dirty_bytes=lambda: 0,
                     block_size=BLOCK)


def cached(cache: ReadCache, key: str, size: int) -> list[str]:
    """An entry of ``size`` bytes with every block file present; returns the block names."""
    meta = ObjectMeta(key=key, size=size, etag=hashlib.md5(key.encode()).hexdigest(),
                      last_modified=datetime.now(UTC), content_headers={}, metadata={}, checksums={})
    assert cache.index.put_ready(meta, "bkt", BLOCK, None, False, time.time() - 1, size)
    names = []
    for index in range(max(1, -(-size // BLOCK))):
        name = block_name("bkt", key, meta.etag, index, BLOCK)
        path = cache.store.path(name)
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"b" * min(BLOCK, size - index * BLOCK))
        names.append(name)
    return names


def stray(cache: ReadCache, size: int = 10) -> str:
    name = hashlib.sha256(os.urandom(8)).hexdigest()
    path = cache.store.path(name)
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(b"s" * size)
    return name


@pytest.mark.parametrize("names_per_pass", [1_000_000, 7])
def test_sweep_keeps_owned_blocks_and_deletes_the_rest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       names_per_pass: int) -> None:
    monkeypatch.setattr(orphans, "ORPHAN_NAMES_PER_PASS", names_per_pass)  # 7: 8 passes of 32 shards
    cache = make_cache(tmp_path)
    owned = [name for i in range(20) for name in cached(cache, f"obj/{i}", 2500)]  # 60 blocks
    gone = cached(cache, "evicted", 1500)
    entry = cache.index.get("bkt", "evicted")
    assert entry is not None and cache.index.remove(entry)  # the row went, the crash kept the files
    strays = [stray(cache) for _ in range(25)]

    assert cache.sweep_orphans(grace=600) == (0, 0)  # everything was published just now
    assert cache.sweep_orphans(grace=0) == (27, 1500 + 25 * 10)
    assert all(cache.store.path(name).exists() for name in owned)
    assert not any(cache.store.path(name).exists() for name in gone + strays)
    assert cache.sweep_orphans(grace=0) == (0, 0)


def test_sweep_on_postgresql_counts_only_this_nodes_rows(tmp_path: Path, postgres_url: str) -> None:
    """Fleet catalog: another node's rows own nothing in this node's data directory."""
    node = f"sweep-{uuid.uuid4().hex[:8]}"
    cache = make_cache(tmp_path, postgres_url, node)
    other = make_cache(tmp_path / "other", postgres_url, node + "-other")
    try:
        owned = cached(cache, "shared/key", 2500)
        foreign = cached(other, "only/there", 1500)
        for name in foreign:  # the same block names, but in this node's directory
            path = cache.store.path(name)
            path.parent.mkdir(exist_ok=True)
            path.write_bytes(b"f" * 750)
        assert cache.index.block_count() == 3
        assert cache.sweep_orphans(grace=0) == (2, 1500)
        assert all(cache.store.path(name).exists() for name in owned)
        assert all(other.store.path(name).exists() for name in foreign)
    finally:
        for c in (cache, other):
            c.index.delete_all()
            c.index.engine.dispose()


def test_a_second_sweeper_of_the_same_data_dir_steps_aside(tmp_path: Path) -> None:
    """Worker processes of one node share the data directory: one sweeps, the others return."""
    import multiprocessing

    cache = make_cache(tmp_path)
    name = stray(cache)
    assert cache.store.try_lock(orphans.SWEEP_LOCK)  # this process is sweeping
    try:
        with multiprocessing.get_context("fork").Pool(1) as pool:
            assert pool.apply(_sweep_in_another_process, (str(tmp_path),)) == (0, 0)
        assert cache.store.path(name).exists()
    finally:
        cache.store.unlock(orphans.SWEEP_LOCK)
    assert cache.sweep_orphans(grace=0) == (1, 10)


def _sweep_in_another_process(data_dir: str) -> tuple[int, int]:
    return make_cache(Path(data_dir)).sweep_orphans(grace=0)
