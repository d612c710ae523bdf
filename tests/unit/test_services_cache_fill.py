"""The block fill's steps (fetch -> verify -> account -> publish, app/services/cache/fill.py) on the
fault-injecting fake remote, with a real SQLite cache index and a real block store: whatever
fails mid-fill, nothing is published, no reader is served a partial object as a whole one, no
byte stays counted, and every lock is released (checked from another process, as another
worker would see it)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.domain.cache import block_name, meta_lock_name
from app.domain.errors import S3Error
from app.domain.states import CacheState
from app.services.cache import ReadCache
from tests.fakes.faulty import Fault, FaultyRemote
from tests.fakes.harness import Services, build, fills_settled

BLOCK = 64 * 1024
ROOT = Path(__file__).resolve().parents[2]


def store(remote: FaultyRemote, key: str, data: bytes) -> str:
    md5 = base64.b64encode(hashlib.md5(data).digest()).decode()
    return remote.put_object("b", key, io.BytesIO(data), len(data), md5, {}, {}, {})


def setup(tmp_path: Path, key: str, data: bytes) -> tuple[FaultyRemote, Services, ReadCache, str]:
    remote = FaultyRemote()
    remote.create_bucket("b", None)
    etag = store(remote, key, data)
    svc = build(tmp_path, remote, cache_block=BLOCK)
    assert svc.cache is not None
    return remote, svc, svc.cache, etag


def lock_is_free(tmp_path: Path, name: str) -> bool:
    """Whether another process can take the cache lock ``name`` (locks belong to the process that
    holds them, so only another process can tell that this one released it)."""
    code = ("import sys; from pathlib import Path; from app.adapters.local.cachestore import CacheStore; "
            "print(CacheStore(Path(sys.argv[1])).try_lock(sys.argv[2]))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "data"), name], capture_output=True, text=True,
                         check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return out.stdout.strip() == "True"


async def read_until_error(svc: Services, key: str) -> tuple[bytes, S3Error]:
    """What a client gets: the bytes that came before the stream failed, and its error."""
    read = await svc.gateway.get_object("b", key)
    got = bytearray()
    with pytest.raises(S3Error) as err:
        async for chunk in read.stream:
            got += chunk
    return bytes(got), err.value


@pytest.mark.parametrize("kind", ["truncate", "reset", "5xx"])
def test_a_failed_block_fill_publishes_nothing_and_releases_its_lock(tmp_path: Path, kind: str) -> None:
    data = os.urandom(BLOCK + BLOCK // 2)  # block 0 from the discovery's GET, block 1 from the source
    remote, svc, cache, etag = setup(tmp_path, "k", data)
    second = block_name("b", "k", etag, 1, BLOCK)
    # The discovery's GET passes (a zero-second "slow"); the fill of block 1 meets the fault.
    remote.inject("get_object", Fault("slow", 0.0), Fault(kind, keep=1000))

    async def scenario() -> None:
        got, err = await read_until_error(svc, "k")
        assert err.code == "ServiceUnavailable"  # the answer ends in an error, never short and whole
        assert len(got) < len(data) and data.startswith(got)
        await fills_settled(cache)
        assert not cache.store.path(second).exists()  # nothing published
        assert list(cache.store.tmp.iterdir()) == []  # the fill file is gone
        entry = cache.index.get("b", "k")
        assert entry is not None and entry.cached_bytes == BLOCK  # only block 0 is counted
        assert lock_is_free(tmp_path, second)
        remote.calls.clear()
        assert await svc.get("b", "k") == data  # the next read refetches the block, whole
        assert remote.calls == ["GET b/k"]
        await fills_settled(cache)
        assert cache.store.has(second, BLOCK // 2)
        await cache.stop()

    asyncio.run(scenario())


def test_a_truncated_discovery_body_writes_no_row_and_releases_both_locks(tmp_path: Path) -> None:
    """A one-block object's row is written with its block: a short body leaves neither."""
    data = os.urandom(BLOCK // 2)
    remote, svc, cache, etag = setup(tmp_path, "small", data)
    only = block_name("b", "small", etag, 0, BLOCK)
    remote.inject("get_object", Fault("truncate", keep=1000))

    async def scenario() -> None:
        got, err = await read_until_error(svc, "small")
        assert err.code == "ServiceUnavailable"
        assert got == data[:1000]
        await fills_settled(cache)
        assert cache.index.get("b", "small") is None  # no row
        assert not cache.store.path(only).exists() and list(cache.store.tmp.iterdir()) == []
        assert lock_is_free(tmp_path, only) and lock_is_free(tmp_path, meta_lock_name("b", "small"))
        assert await svc.get("b", "small") == data
        await fills_settled(cache)
        entry = cache.index.get("b", "small")
        assert entry is not None and entry.cached_bytes == len(data) and cache.store.has(only, len(data))
        await cache.stop()

    asyncio.run(scenario())


def test_an_etag_changed_between_discovery_and_fill_invalidates_and_publishes_nothing(tmp_path: Path) -> None:
    """The fill of a later block asks If-Match the discovered ETag: bytes of two versions never mix."""
    old = os.urandom(BLOCK + 100)
    remote, svc, cache, etag = setup(tmp_path, "k", old)
    second = block_name("b", "k", etag, 1, BLOCK)

    async def scenario() -> None:
        read = await svc.gateway.get_object("b", "k")  # discovered: the old version
        new = os.urandom(BLOCK + 100)
        store(remote, "k", new)  # replaced behind the cache before block 1 is fetched
        got = bytearray()
        with pytest.raises(S3Error) as err:
            async for chunk in read.stream:
                got += chunk
        assert err.value.code == "ServiceUnavailable" and "PreconditionFailed" in str(err.value.message)
        assert len(got) <= BLOCK and old.startswith(bytes(got))  # never a byte of the new version
        await fills_settled(cache)
        assert not cache.store.path(second).exists() and list(cache.store.tmp.iterdir()) == []
        entry = cache.index.get("b", "k")
        assert entry is None or entry.state != CacheState.READY  # the entry is invalidated
        assert lock_is_free(tmp_path, second)
        assert await svc.get("b", "k") == new
        await cache.stop()

    asyncio.run(scenario())


async def read_settled(svc: Services, key: str = "k") -> bytes:
    """A whole GET of ``key``, once every fill it started has settled."""
    assert svc.cache is not None
    got = await svc.gateway.get_object("b", key)
    body = b"".join([chunk async for chunk in got.stream])
    await fills_settled(svc.cache)
    return body


@pytest.mark.parametrize("janitor_ran", [True, False])
def test_a_rediscovered_version_counts_its_bytes_once(tmp_path: Path, janitor_ran: bool) -> None:
    """The same bytes written again (same ETag) leave the old row invalid with its count; the next
    miss takes that count over only for the blocks still on disk, so a block fetched again is not
    counted twice (test_mcp once saw 18 cached bytes of a 9-byte object)."""
    import time

    data = b"hello mcp"
    _remote, svc, cache, etag = setup(tmp_path, "k", data)

    async def scenario() -> None:
        assert await read_settled(svc) == data
        first = cache.index.get("b", "k")
        assert first is not None and first.state == CacheState.READY and first.cached_bytes == len(data)
        cache.index.invalidate("b", "k")  # a write of the same bytes, now durable
        if janitor_ran:  # the janitor deleted the invalid row's block, not yet its row
            cache.store.delete(block_name("b", "k", etag, 0, BLOCK))
        time.sleep(0.01)  # the next discovery begins after the write's tombstone
        assert await read_settled(svc) == data
        entry = cache.index.get("b", "k")
        assert entry is not None and entry.state == CacheState.READY and entry.etag == etag
        assert entry.cached_bytes == len(data), entry.cached_bytes
        assert cache.store.has(block_name("b", "k", etag, 0, BLOCK), len(data))

    asyncio.run(scenario())


def test_the_janitor_leaves_the_blocks_a_rediscovery_took_over(tmp_path: Path) -> None:
    """The janitor read the invalid row before a rediscovery of the same version replaced it:
    the blocks now belong to the new row, which counts them, so they stay (deleted, the next
    read fetched them again and the row counted 18 bytes of a 9-byte object). While a discovery
    of the key runs in this process, the janitor leaves the key alone."""
    import time

    data = b"hello mcp"
    _remote, svc, cache, etag = setup(tmp_path, "k", data)
    name = block_name("b", "k", etag, 0, BLOCK)

    async def scenario() -> None:
        assert await read_settled(svc) == data
        cache.index.invalidate("b", "k")
        stale = cache.index.invalid_entries()
        assert [e.key for e in stale] == ["k"]
        cache.discovering[("b", "k")] = asyncio.get_running_loop().create_future()
        cache._drop_invalid(stale[0])  # a discovery of the key is running here: left alone
        assert cache.store.has(name, len(data)) and cache.index.invalid_entries()
        del cache.discovering[("b", "k")]
        time.sleep(0.01)
        assert await read_settled(svc) == data  # the rediscovery takes the block over
        cache._drop_invalid(stale[0])  # the janitor's stale list
        assert cache.store.has(name, len(data))
        assert await read_settled(svc) == data
        entry = cache.index.get("b", "k")
        assert entry is not None and entry.state == CacheState.READY and entry.cached_bytes == len(data)
        assert lock_is_free(tmp_path, meta_lock_name("b", "k"))

    asyncio.run(scenario())
