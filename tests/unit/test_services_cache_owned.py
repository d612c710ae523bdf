"""Reads by name (app/services/cache/owned.py) with a real SQLite index and block store: the
owner's answer from a block file named by (bucket, key, ETag, size, block size), and the asking
node's choice between that, the usual way and a copy. One cache plays both nodes: a source
stands in for the fleet, answering ``read_owned`` from the same store's ``owned.open``."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from app.domain.cache import Entry, OwnedEntry, block_name
from app.domain.conditions import NO_CONDITIONS, Conditions
from app.domain.errors import S3Error
from app.domain.policy import Policy
from app.domain.ranges import RangeRequest
from app.services.cache.fill import RemoteBlockSource
from tests.fakes.harness import Services, build, fills_settled, read_all
from tests.fakes.remote import InMemoryRemote, remote_with_object

BLOCK = 256 * 1024
OWNER = "node-owner"


class OwnerSource(RemoteBlockSource):
    """The remote, and an owner (``OWNER``, of every block) that answers by name from ``svc``."""

    def __init__(self, remote: InMemoryRemote) -> None:
        super().__init__(remote)
        self.svc: Services | None = None
        self.asked: list[tuple[int, int]] = []

    def owner_of(self, bucket: str, key: str, index: int) -> str | None:
        return OWNER

    def read_owned(self, owner: str, entry: Entry, first: int, last: int, tenant_id: int | None) -> bytes | None:
        assert self.svc is not None and self.svc.cache is not None and owner == OWNER
        self.asked.append((first, last))
        found = self.svc.cache.owned.open(entry.bucket, entry.key, entry.etag, entry.size, entry.block_size,
                                          first, last, False)
        if found is None or isinstance(found, bytes):
            return found
        return asyncio.run_coroutine_threadsafe(_joined(found), self.loop).result()

    loop: asyncio.AbstractEventLoop


async def _joined(stream: Any) -> bytes:
    return b"".join([bytes(chunk) async for chunk in stream])


def setup(tmp_path: Path, size: int) -> tuple[Services, OwnerSource, bytes]:
    remote, data = remote_with_object(size)
    svc = build(tmp_path, remote, cache_block=BLOCK)
    assert svc.cache is not None
    source = OwnerSource(remote)
    source.svc = svc
    return svc, source, data


async def cached(svc: Services, source: OwnerSource) -> Entry:
    """The object read into the cache (the owner's copy), then the source put in place."""
    assert svc.cache is not None
    await read_all(await svc.gateway.get_object("b", "k"))
    await fills_settled(svc.cache)
    entry = svc.cache.index.get("b", "k")
    assert entry is not None
    source.loop = asyncio.get_running_loop()
    svc.cache.source = source
    return entry


async def read_owned(svc: Services, entry: Entry, wanted: RangeRequest = RangeRequest(),
                     conditions: Conditions = NO_CONDITIONS) -> bytes:
    """A GET whose lookup found no row here and the owner's ``entry``: by name when it can be."""
    assert svc.cache is not None
    fetched = await asyncio.to_thread(svc.cache.owned.fetch_now, OwnedEntry(OWNER, entry), wanted, Policy(), None,
                                      conditions)
    found = await svc.cache.read("b", "k", wanted, Policy(), None, None, owned=fetched, conditions=conditions)
    assert found is not None
    return b"".join([bytes(c) async for c in found.stream])


def test_the_owner_answers_a_named_block_from_its_file_and_nothing_else(tmp_path: Path) -> None:
    async def run() -> None:
        svc, source, data = setup(tmp_path, 2 * BLOCK + 100)
        entry = await cached(svc, source)
        owned = svc.cache.owned  # type: ignore[union-attr]
        args = ("b", "k", entry.etag, entry.size, BLOCK)
        assert await _joined(owned.open(*args, 10, 1009, False)) == data[10:1010]  # a block past 64 KiB: streamed
        assert owned.open(*args, 2 * BLOCK, 2 * BLOCK + 99, False) == data[2 * BLOCK:]  # a small last block: bytes
        assert owned.open(*args, BLOCK - 1, BLOCK, False) is None, "across two blocks"
        assert owned.open(*args, 2 * BLOCK, 2 * BLOCK + 100, False) is None, "past the object"
        assert owned.open("b", "k", "0" * 32, entry.size, BLOCK, 0, 9, False) is None, "another version's name"
        assert owned.open("b", "k", entry.etag, entry.size, BLOCK // 2, 0, 9, False) is None, "another block size"
        name = block_name("b", "k", entry.etag, 2, BLOCK)
        svc.cache.store.delete(name)  # type: ignore[union-attr]  # retired: not a published block any more
        assert owned.open(*args, 2 * BLOCK, 2 * BLOCK + 99, False) is None

    asyncio.run(run())


def test_a_first_read_here_is_answered_by_name_and_keeps_nothing(tmp_path: Path) -> None:
    async def run() -> None:
        svc, source, data = setup(tmp_path, BLOCK)
        entry = await cached(svc, source)
        svc.cache.copies.copy_reads = 255  # type: ignore[union-attr]  # (the owner's own read above counted)
        assert await read_owned(svc, entry) == data
        assert await read_owned(svc, entry, RangeRequest.from_header("bytes=100-199")) == data[100:200]
        assert source.asked == [(0, BLOCK - 1), (100, 199)]
        with pytest.raises(S3Error) as failed:  # judged on the owner's row: no bytes asked for
            await read_owned(svc, entry, conditions=Conditions(if_none_match=f'"{entry.etag}"'))
        assert failed.value.code == "NotModified" and len(source.asked) == 2

    asyncio.run(run())


def test_a_key_read_often_enough_here_keeps_a_copy_while_there_is_room_and_else_is_read_by_name(
        tmp_path: Path) -> None:
    async def run() -> None:
        svc, source, data = setup(tmp_path, BLOCK)
        entry = await cached(svc, source)
        cache = svc.cache
        assert cache is not None
        for _ in range(cache.copy_reads):
            cache.admission.record("b", "k")
        assert cache.copies.wants_copy("b", "k")
        assert await read_owned(svc, entry) == data
        assert source.asked == [], "room to keep a copy: the usual way (a hit of the copy here)"
        admission = cache.admission
        admission.budget_bytes = entry.size  # full, as last measured a moment ago
        admission._measured, admission._since, admission._measured_at = entry.size, 0, admission.clock()
        assert not admission.has_room(entry.size, Policy())
        assert await read_owned(svc, entry) == data
        assert source.asked == [(0, BLOCK - 1)], "no room: by name, nothing pushed out for a copy"

    asyncio.run(run())


def test_a_stale_or_unready_owners_row_is_not_read_by_name(tmp_path: Path) -> None:
    async def run() -> None:
        svc, source, _ = setup(tmp_path, BLOCK)
        entry = await cached(svc, source)
        cache = svc.cache
        assert cache is not None
        old = Entry(**{**entry.__dict__, "validated_at": time.time() - 10 * 86400})
        policy = Policy(ttl_seconds=60)
        assert not cache.owned.usable(OwnedEntry(OWNER, old), policy)
        assert cache.owned.usable(OwnedEntry(OWNER, entry), policy)
        other_size = Entry(**{**entry.__dict__, "block_size": BLOCK * 2})
        assert not cache.owned.usable(OwnedEntry(OWNER, other_size), policy), "cut at another block size"

    asyncio.run(run())
