"""Reads of another node's buffered writes (fleet): two gateways share one journal (SQLite here,
PostgreSQL in a fleet) and each has its own data directory. The newest buffered version is served
from the node that holds it, and never an older one from the remote while that node is gone."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from app.adapters.catalog.cache.index import CacheIndex
from app.adapters.catalog.control.nodes import NodeRegistry
from app.adapters.catalog.control.owners import OwnerRepo
from app.adapters.catalog.control.policies import PolicyRepo
from app.adapters.catalog.journal.journal import Journal
from app.adapters.catalog.journal.replicas import ReplicaRepo
from app.adapters.catalog.repo import Catalog
from app.adapters.local.blobstore import BlobStore
from app.adapters.local.cachestore import CacheStore
from app.domain.errors import S3Error
from app.domain.policy import Policy, PolicyRule
from app.domain.ranges import RangeRequest
from app.services.bodies import StreamBody
from app.services.cache import ReadCache
from app.services.cache.fill import RemoteBlockSource
from app.services.control.policies import PolicyBook
from app.services.control.tenancy import Tenancy
from app.services.core import GatewayCore
from app.services.destage.destager import Destager
from app.services.destage.replicas import ReplicaKeeper
from app.services.gateway import Gateway
from app.services.writes.budget import DiskReserve, WriteBudget
from tests.fakes.harness import QueueExecutor, Services, build, read_all
from tests.fakes.peers import InProcessPeers, _once
from tests.fakes.remote import InMemoryRemote


def second_node(first: Services, tmp_path: Path, node_id: str, peers: InProcessPeers | None = None) -> Services:
    """Another node on the same catalog, with its own blob store."""
    engine = first.journal.engine
    journal = Journal(engine, node_id)
    blobs = BlobStore(tmp_path / f"data-{node_id}", fsync=False)
    destager = Destager(journal, blobs, first.remote, backoff_base=0.0, backoff_cap=0.0)
    executor = QueueExecutor()
    policies = PolicyBook(PolicyRepo(engine), Policy(mode="write-back"))
    cache = ReadCache(CacheIndex(engine, node_id), CacheStore(tmp_path / f"data-{node_id}"), first.remote, policies,
                      source=RemoteBlockSource(first.remote), disk=DiskReserve(tmp_path, 0, 0.0),
                      dirty_bytes=journal.dirty_bytes)
    core = GatewayCore(Catalog(engine, node_id), blobs, first.remote, journal=journal, executor=executor,
                       mode="write-back", destager=destager, inline_lookups=True, eager_parts=False, cache=cache,
                       policies=policies, tenancy=Tenancy(OwnerRepo(engine, "default"), first.remote, shared=True),
                       peers=peers)
    gateway = Gateway(core)
    return Services(gateway, journal, blobs, destager, executor, first.remote, cache)


def fleet(tmp_path: Path) -> tuple[Services, Services, InProcessPeers, InProcessPeers]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    remote = InMemoryRemote()
    remote.create_bucket("b", None)
    peers_a, peers_b = InProcessPeers("unit"), InProcessPeers("b")  # each node's view of the two
    a = build(tmp_path, remote, peers=peers_a)  # node id "unit"
    b = second_node(a, tmp_path, "b", peers=peers_b)
    for peers in (peers_a, peers_b):
        peers.nodes.update({"unit": a.gateway, "b": b.gateway})
    return a, b, peers_a, peers_b


def test_a_write_on_one_node_is_read_whole_and_in_ranges_from_another(tmp_path: Path) -> None:
    a, b, _, peers_b = fleet(tmp_path)
    data = bytes(range(256)) * 1000

    async def scenario() -> None:
        await a.put("b", "k", data)
        assert await b.get("b", "k") == data
        part = await b.gateway.get_object("b", "k", RangeRequest.from_header("bytes=1000-1999"))
        assert await read_all(part) == data[1000:2000]
        assert (await b.gateway.head_object("b", "k")).size == len(data)
        assert peers_b.asked and all(node == "unit" for node, _ in peers_b.asked)
        # Durable: the remote serves it, and the node is no longer asked.
        a.destage_all()
        asked = len(peers_b.asked)
        assert await b.get("b", "k") == data
        assert len(peers_b.asked) == asked

    asyncio.run(scenario())


def test_a_gone_node_answers_503_never_the_older_remote_version(tmp_path: Path) -> None:
    a, b, _, peers_b = fleet(tmp_path)

    async def scenario() -> None:
        await a.put("b", "k", b"old")
        a.destage_all()  # the remote holds "old"
        await a.put("b", "k", b"new")  # buffered on node "unit" only
        del peers_b.nodes["unit"]  # node "unit" is gone
        with pytest.raises(S3Error) as err:
            await b.get("b", "k")
        assert err.value.code == "ServiceUnavailable"
        meta = await b.gateway.head_object("b", "k")  # HEAD answers from the row
        assert meta.size == 3
        listing = await b.gateway.list_objects("b", "", None, None, 1000)
        assert [(c.key, c.size) for c in listing.contents] == [("k", 3)]

    asyncio.run(scenario())


def test_a_write_destaged_while_a_peer_asks_is_served_from_the_remote(tmp_path: Path) -> None:
    a, b, _, _ = fleet(tmp_path)

    async def scenario() -> None:
        await a.put("b", "k", b"v1")
        row = a.journal.latest_dirty("b", "k")
        assert row is not None
        a.destage_all()  # durable, blobs dropped: the holder answers "not here"
        assert await b.gateway.open_held_version(row.seq, RangeRequest()) is None
        assert await a.gateway.open_held_version(row.seq, RangeRequest()) is None
        assert await b.get("b", "k") == b"v1"

    asyncio.run(scenario())


def test_overwrites_from_two_nodes_keep_the_journal_order_everywhere(tmp_path: Path) -> None:
    """Node A writes, node B overwrites: both nodes read B's, and after both destage (A's first
    or last) the remote holds B's: the older row is superseded."""
    for first in ("a", "b"):
        a, b, _, _ = fleet(tmp_path / first)

        async def scenario(first: str = first, a: Services = a, b: Services = b) -> None:
            await a.put("b", "k", b"from-a")
            await b.put("b", "k", b"from-b")
            assert await a.get("b", "k") == b"from-b"
            assert await b.get("b", "k") == b"from-b"
            order = [a, b] if first == "a" else [b, a]
            outcomes = [svc.destage_all() for svc in order]
            assert sorted(o for out in outcomes for o in out) == ["durable", "superseded"]
            assert a.remote.buckets["b"]["k"].data == b"from-b"
            assert await a.get("b", "k") == b"from-b"

        asyncio.run(scenario())


# ------------------------------------------------------------------ write_replicas: 2


def replicated(tmp_path: Path) -> tuple[Services, Services, InProcessPeers, InProcessPeers]:
    a, b, peers_a, peers_b = fleet(tmp_path)
    repo = PolicyRepo(a.journal.engine)
    repo.upsert(PolicyRule(bucket="*", write_replicas=2))
    for svc in (a, b):
        svc.gateway.core.policies = PolicyBook(repo, Policy(mode="write-back"), refresh_seconds=0)
    return a, b, peers_a, peers_b


def test_a_replicated_write_is_taken_over_and_destaged_when_its_node_is_lost(tmp_path: Path) -> None:
    a, b, _, peers_b = replicated(tmp_path)
    engine = a.journal.engine
    NodeRegistry(engine, "b", "test", "dir-b").register(30)  # only b heartbeats: node "unit" is lost
    keeper_b = ReplicaKeeper(ReplicaRepo(engine, "b"), b.blobs, b.executor.submit, stale_after=30)
    keeper_a = ReplicaKeeper(ReplicaRepo(engine, "unit"), a.blobs, a.executor.submit, stale_after=30)

    async def scenario() -> None:
        await a.put("b", "k", b"v1")
        a.destage_all()  # the remote holds v1
        assert keeper_b.sweep() == 0  # nothing dirty to take; v1's copy is dropped
        await a.put("b", "k", b"v2-acknowledged")
        assert ReplicaRepo(engine, "b").held() == 1  # committed with the row
        del peers_b.nodes["unit"]
        a.executor.queued.clear()  # node "unit" died before destaging it
        assert keeper_a.sweep() == 0  # "unit" holds no copy of anything: takes nothing
        assert keeper_b.sweep() == 1
        row = b.journal.latest_dirty("b", "k")
        assert row is not None and row.node_id == "b"
        assert await b.get("b", "k") == b"v2-acknowledged"  # now served from b's copy
        assert b.destage_all() == ["durable"]
        assert b.remote.buckets["b"]["k"].data == b"v2-acknowledged"
        assert ReplicaRepo(engine, "b").held() == 0

    asyncio.run(scenario())


def test_replicas_of_destaged_writes_are_dropped_and_a_write_without_a_second_node_is_refused(
        tmp_path: Path) -> None:
    a, b, peers_a, _ = replicated(tmp_path)
    engine = a.journal.engine
    for node in ("unit", "b"):
        NodeRegistry(engine, node, "test", f"dir-{node}").register(30)
    keeper_b = ReplicaKeeper(ReplicaRepo(engine, "b"), b.blobs, b.executor.submit, stale_after=30)

    async def scenario() -> None:
        await a.put("b", "k", b"v1")
        copy = json.loads(replica_blobs(engine))[0][0]
        assert b.blobs.path(copy).read_bytes() == b"v1"
        assert keeper_b.sweep() == 0  # "unit" is alive: nothing is taken over
        assert a.destage_all() == ["durable"]
        keeper_b.sweep()
        assert not b.blobs.path(copy).exists()  # the copy went with the row's destage
        del peers_a.nodes["b"]  # no second node: the write is refused, nothing is committed
        with pytest.raises(S3Error) as err:
            await a.put("b", "k", b"v2")
        assert err.value.code == "SlowDown"
        assert a.journal.latest_dirty("b", "k") is None
        assert await a.get("b", "k") == b"v1"

    asyncio.run(scenario())


def replica_blobs(engine: Engine) -> str:
    with engine.connect() as conn:
        return str(conn.execute(text("SELECT blobs_json FROM journal_replicas")).scalar_one())



def test_a_copy_whose_write_never_committed_is_dropped_by_the_holders_sweep(tmp_path: Path) -> None:
    """The origin died between the copy and its row's commit: no record names the copy. The
    holder's sweep drops it once it is ``orphan_after`` old (not only at its next restart),
    and keeps the copies a committed row still needs."""
    a, b, _, _ = replicated(tmp_path)
    engine = a.journal.engine
    for node in ("unit", "b"):
        NodeRegistry(engine, node, "test", f"dir-{node}").register(30)

    def keeper(orphan_after: float) -> ReplicaKeeper:
        return ReplicaKeeper(ReplicaRepo(engine, "b"), b.blobs, b.executor.submit, stale_after=30,
                             referenced=b.journal.blobs_referenced, orphan_after=orphan_after)

    async def scenario() -> None:
        await a.put("b", "k", b"v1")  # committed with its copy on b
        held = json.loads(replica_blobs(engine))[0][0]
        data = b"the origin died before its row"
        orphan = await b.gateway.accept_replica(StreamBody(_once(data)), len(data), hashlib.md5(data).hexdigest())
        assert b.blobs.path(orphan).read_bytes() == data
        keeper(3600).sweep()
        assert b.blobs.path(orphan).exists(), "a young copy may still be committed by its origin"
        keeper(0).sweep()
        assert not b.blobs.path(orphan).exists()
        assert b.blobs.path(held).read_bytes() == b"v1", "a copy a buffered row needs stays"

    asyncio.run(scenario())


def test_copies_held_for_other_nodes_count_in_the_holders_write_buffer(tmp_path: Path) -> None:
    """A copy is bytes on the holder's disk that wait for a destage: its buffer counts them, and
    a holder whose buffer is full refuses a copy (the write finds no second node: SlowDown)."""
    a, b, _, _ = replicated(tmp_path)

    async def scenario() -> None:
        await a.put("b", "k", b"x" * 1000)
        assert a.journal.dirty_bytes() == 1000
        assert b.journal.dirty_bytes() == 1000, "b holds a copy of the buffered write"
        b.gateway.core.admission.budget = WriteBudget(1500)
        b.gateway.core.admission.dirty_read_at = 0.0  # re-read the buffer's fill now
        with pytest.raises(S3Error) as err:
            await a.put("b", "k2", b"y" * 1000)
        assert err.value.code == "SlowDown"
        assert a.journal.latest_dirty("b", "k2") is None
        a.destage_all()
        assert b.journal.dirty_bytes() == 0, "durable: the copy no longer counts"

    asyncio.run(scenario())
