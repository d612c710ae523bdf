"""Copies of other nodes' blocks (app/services/cache/copies.py) on the fake remote, with a real
SQLite index and block store: a source stands in for the fleet (it says which blocks a peer owns
and marks the bodies it would get from that peer). A first read of an object peers own whole is
served whole and kept nowhere; the ``copy_reads``-th read keeps it; an object with a block this
node owns, or ``copy_reads`` 1, is kept at the first read."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, BinaryIO

from app.domain.objects import ObjectMeta
from app.domain.ranges import RangeRequest
from app.domain.states import CacheState
from app.services.cache.fill import RemoteBlockSource
from tests.fakes.harness import Services, build, fills_settled, read_all
from tests.fakes.remote import InMemoryRemote, remote_with_object

BLOCK = 64 * 1024


class FromPeer:
    """A body as a peer's answer says it is one."""

    from_peer = True

    def __init__(self, body: BinaryIO) -> None:
        self.body = body

    def read(self, amt: int = -1) -> bytes:
        return self.body.read(amt)

    def close(self) -> None:
        self.body.close()


class FleetSource(RemoteBlockSource):
    """The remote's bytes, as if blocks ``peers_own`` (all when None) came from their owner."""

    def __init__(self, remote: InMemoryRemote, peers_own: set[int] | None = None) -> None:
        super().__init__(remote)
        self.peers_own = peers_own

    def from_peer(self, bucket: str, key: str, index: int) -> bool:
        return self.peers_own is None or index in self.peers_own

    def get_object(self, bucket: str, key: str, byte_range: str | None = None,
                   if_match: str | None = None) -> tuple[ObjectMeta, Any]:
        meta, body = super().get_object(bucket, key, byte_range, if_match)
        first = int(byte_range[6:].split("-")[0]) if byte_range else 0
        return meta, FromPeer(body) if self.from_peer(bucket, key, first // BLOCK) else body


def setup(tmp_path: Path, size: int, peers_own: set[int] | None = None,
          copy_reads: int = 2) -> tuple[Services, InMemoryRemote, bytes]:
    remote, data = remote_with_object(size)
    svc = build(tmp_path, remote, cache_block=BLOCK)
    assert svc.cache is not None
    svc.cache.source = FleetSource(remote, peers_own)
    svc.cache.copies.copy_reads = copy_reads
    return svc, remote, data


async def read(svc: Services) -> bytes:
    got = await read_all(await svc.gateway.get_object("b", "k"))
    assert svc.cache is not None
    await fills_settled(svc.cache)
    return got


def block_files(tmp_path: Path) -> list[Path]:
    return [p for p in (tmp_path / "data" / "cache").rglob("*") if p.is_file() and p.parent.name != "cache"]


def ready(svc: Services) -> bool:
    assert svc.cache is not None
    entry = svc.cache.index.get("b", "k")
    return entry is not None and entry.state == CacheState.READY and entry.cached_bytes == entry.size


def test_a_first_read_of_a_peers_object_is_served_whole_and_kept_only_at_the_second(tmp_path: Path) -> None:
    async def run() -> None:
        svc, remote, data = setup(tmp_path, 3 * BLOCK + 17)
        assert await read(svc) == data
        assert not ready(svc) and svc.cache is not None and svc.cache.index.get("b", "k") is None
        assert block_files(tmp_path) == [], "nothing is kept"
        assert await read(svc) == data  # the second read: kept
        assert ready(svc)
        gets = len(remote.calls)
        assert await read(svc) == data  # the third: a hit
        assert len(remote.calls) == gets

    asyncio.run(run())


def test_an_object_with_a_block_this_node_owns_is_kept_at_the_first_read(tmp_path: Path) -> None:
    async def run() -> None:
        svc, _, data = setup(tmp_path, 3 * BLOCK + 17, peers_own={0, 1, 3})
        assert await read(svc) == data
        assert ready(svc)

    asyncio.run(run())


def test_copy_reads_1_keeps_every_peer_read(tmp_path: Path) -> None:
    async def run() -> None:
        svc, _, data = setup(tmp_path, BLOCK - 5, copy_reads=1)
        assert await read(svc) == data
        assert ready(svc)

    asyncio.run(run())


def test_a_small_relayed_object_is_served_from_memory_whole_or_in_a_range(tmp_path: Path) -> None:
    """At most SMALL_RELAY bytes: read whole with the GET's headers and served from memory, no
    fill and no file; the ranged read that follows is the second read and keeps it."""
    async def run() -> None:
        svc, remote, data = setup(tmp_path, 5000)
        assert svc.cache is not None
        opened = await svc.gateway.get_object("b", "k", RangeRequest.from_header("bytes=10-99"))
        assert not svc.cache.inflight, "no fill was started"
        assert await read_all(opened) == data[10:100]
        assert block_files(tmp_path) == [] and svc.cache.index.get("b", "k") is None
        assert await read(svc) == data
        assert ready(svc)
        assert remote.calls.count("GET b/k") == 2

    asyncio.run(run())
