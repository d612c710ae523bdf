"""The write, read, listing and destage services wired on a fake remote, a real SQLite journal,
read cache, policies and tenancy, and a real blob store in a temporary directory: what
``bootstrap.build`` does, minus the network and the workers. The test drives the destage itself
(``destage_all``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from app.adapters.catalog.cache.index import CacheIndex
from app.adapters.catalog.control.owners import OwnerRepo
from app.adapters.catalog.control.policies import PolicyRepo
from app.adapters.catalog.engine import make_engine
from app.adapters.catalog.journal.journal import Journal
from app.adapters.catalog.migrate import upgrade
from app.adapters.catalog.repo import Catalog
from app.adapters.local.blobstore import BlobStore
from app.adapters.local.cachestore import CacheStore
from app.domain.policy import Policy
from app.services.bodies import ExpectedDigests, ObjectRead, StreamBody
from app.services.cache import ReadCache
from app.services.cache.fill import RemoteBlockSource
from app.services.control.policies import PolicyBook
from app.services.control.tenancy import Tenancy
from app.services.core import GatewayCore
from app.services.destage.destager import Destager
from app.services.gateway import Gateway
from app.services.ports import PeerVersions
from app.services.writes.budget import DiskReserve
from tests.fakes.remote import InMemoryRemote


@dataclass
class QueueExecutor:
    """Collects submitted journal rows; the test decides when they are destaged."""

    queued: list[int] = field(default_factory=list)

    def submit(self, seq: int) -> None:
        self.queued.append(seq)


@dataclass
class Services:
    gateway: Gateway
    journal: Journal
    blobs: BlobStore
    destager: Destager
    executor: QueueExecutor
    remote: InMemoryRemote
    cache: ReadCache

    def destage_all(self) -> list[str]:
        """Destage every queued row once, in order; returns the outcomes."""
        queued, self.executor.queued = self.executor.queued, []
        return [self.destager.destage(seq) for seq in queued]

    async def put(self, bucket: str, key: str, data: bytes) -> str:
        result = await self.gateway.put_object(bucket, key, body(data), {}, {}, ExpectedDigests(declared_size=len(data)))
        return result.etag

    async def get(self, bucket: str, key: str) -> bytes:
        return await read_all(await self.gateway.get_object(bucket, key))


def body(data: bytes, piece: int = 64 * 1024) -> StreamBody:
    async def pieces() -> AsyncIterator[bytes]:
        for i in range(0, len(data), piece):
            yield data[i:i + piece]
            await asyncio.sleep(0)
    return StreamBody(pieces())


async def read_all(read: ObjectRead) -> bytes:
    out = bytearray()
    async for chunk in read.stream:
        out += chunk
    return bytes(out)


def build(tmp_path: Path, remote: InMemoryRemote, *, mode: str = "write-back",
          cache_block: int | None = None, inline_max: int = 0, peers: PeerVersions | None = None) -> Services:
    url = f"sqlite:///{tmp_path / 'ferry.db'}"
    upgrade(url)
    engine = make_engine(url)
    journal = Journal(engine, "unit")
    blobs = BlobStore(tmp_path / "data", fsync=False)
    destager = Destager(journal, blobs, remote, backoff_base=0.0, backoff_cap=0.0)
    executor = QueueExecutor()
    policies = PolicyBook(PolicyRepo(engine), Policy(mode=mode))
    cache = ReadCache(CacheIndex(engine, "unit"), CacheStore(tmp_path / "data"), remote, policies,
                      source=RemoteBlockSource(remote), disk=DiskReserve(tmp_path, 0, 0.0),
                      dirty_bytes=journal.dirty_bytes, **({"block_size": cache_block} if cache_block else {}))
    core = GatewayCore(Catalog(engine, "unit"), blobs, remote, journal=journal, executor=executor, mode=mode,
                       destager=destager, cache=cache, policies=policies, inline_lookups=True, eager_parts=False,
                       tenancy=Tenancy(OwnerRepo(engine, "default"), remote, shared=True), inline_max=inline_max,
                       peers=peers)
    gateway = Gateway(core)
    return Services(gateway, journal, blobs, destager, executor, remote, cache)


async def fills_settled(cache: ReadCache, timeout: float = 10.0) -> None:
    """Until no fill of this process is running (a reader may finish before its fill publishes)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while cache.inflight and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)
    assert not cache.inflight
