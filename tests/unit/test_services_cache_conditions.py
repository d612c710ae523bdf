"""Conditional GETs judged from the cache index before any remote request, on the counting fake
remote (every HEAD and GET it answers is in ``remote.calls``)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import os
import time
from email.utils import formatdate
from pathlib import Path
from typing import Any

import pytest

from app.domain.cache import block_name
from app.domain.conditions import Conditions
from app.domain.errors import S3Error
from app.services.writes.budget import DiskReserve
from tests.fakes.harness import build, fills_settled, read_all
from tests.fakes.remote import InMemoryRemote

BLOCK = 64 * 1024


def test_a_fresh_entry_answers_304_and_412_with_zero_remote_requests(tmp_path: Path) -> None:
    """The index holds a fresh entry whose blocks are gone from disk (evicted files, a wiped
    block store): If-Match, If-None-Match, If-Modified-Since and If-Unmodified-Since are judged
    from the row, before a block is fetched, and also when the disk is too full to cache (where
    the read would otherwise go straight to the remote)."""
    remote = InMemoryRemote()
    remote.create_bucket("b", None)
    data = os.urandom(2 * BLOCK + 10)
    etag = remote.put_object("b", "k", io.BytesIO(data), len(data),
                             base64.b64encode(hashlib.md5(data).digest()).decode(), {}, {}, {})
    svc = build(tmp_path, remote, cache_block=BLOCK)
    cache = svc.cache
    assert cache is not None
    future, past = formatdate(time.time() + 3600, usegmt=True), formatdate(0, usegmt=True)
    refused = {
        "NotModified": [Conditions(if_none_match=f'"{etag}"'), Conditions(if_none_match="*"),
                        Conditions(if_modified_since=future)],
        "PreconditionFailed": [Conditions(if_match='"0123"'), Conditions(if_unmodified_since=past)],
    }

    async def scenario() -> None:
        assert await svc.get("b", "k") == data  # the miss caches it
        await fills_settled(cache)
        for index in range(3):
            assert cache.store.delete(block_name("b", "k", etag, index, BLOCK))
        cache.store.sweep_retired(grace=0)  # gone for good, not only retired (a reader could still use those)
        for disk in (DiskReserve(tmp_path, 0, 0.0), DiskReserve(tmp_path, 1 << 62, 0.0)):  # roomy, then full
            cache.disk = disk
            remote.calls.clear()
            for code, conditions in refused.items():
                for condition in conditions:
                    with pytest.raises(S3Error) as err:
                        await svc.gateway.get_object("b", "k", conditions=condition)
                    assert err.value.code == code, condition
            meta = await svc.gateway.head_object("b", "k")
            assert meta.etag == etag
            assert remote.calls == [], disk
        cache.disk = DiskReserve(tmp_path, 0, 0.0)
        ok = await svc.gateway.get_object("b", "k", conditions=Conditions(if_match=f'"{etag}"'))
        assert await read_all(ok) == data  # conditions that hold: the blocks are fetched again
        assert remote.calls == ["GET b/k"] * 3
        await fills_settled(cache)
        await cache.stop()

    asyncio.run(scenario())


def test_the_service_judges_the_conditions_once_on_every_path(tmp_path: Path) -> None:
    """A buffered version, a cache miss and a cache hit: the gateway itself answers 304/412 (the
    S3 handler no longer judges them again), and a request whose conditions hold has them
    judged exactly once (fails on b0ee640: a miss left them to the handler)."""
    judged: list[str] = []

    class Counted(Conditions):
        __slots__ = ()

        def check(self, etag: str, last_modified: Any) -> None:
            judged.append(etag)
            super().check(etag, last_modified)

    remote = InMemoryRemote()
    remote.create_bucket("b", None)
    data = os.urandom(2 * BLOCK + 10)
    md5 = base64.b64encode(hashlib.md5(data).digest()).decode()
    etag = ""
    for key in ("miss-304", "miss-412", "miss-ok"):
        etag = remote.put_object("b", key, io.BytesIO(data), len(data), md5, {}, {}, {})
    svc = build(tmp_path, remote, cache_block=BLOCK)
    assert svc.cache is not None

    async def refused(key: str, conditions: Conditions, code: str) -> None:
        with pytest.raises(S3Error) as err:
            await svc.gateway.get_object("b", key, conditions=conditions)
        assert err.value.code == code, key

    async def served_once(key: str, tag: str) -> None:
        judged.clear()
        await read_all(await svc.gateway.get_object("b", key, conditions=Counted(if_match=f'"{tag}"')))
        assert judged == [tag], key

    async def scenario() -> None:
        held = await svc.put("b", "buffered", b"held here")
        await refused("buffered", Counted(if_none_match=f'"{held}"'), "NotModified")
        await refused("buffered", Counted(if_match='"0123"'), "PreconditionFailed")
        await served_once("buffered", held)
        await refused("miss-304", Counted(if_none_match=f'"{etag}"'), "NotModified")
        await refused("miss-412", Counted(if_match='"0123"'), "PreconditionFailed")
        await served_once("miss-ok", etag)  # the miss
        await fills_settled(svc.cache)
        await served_once("miss-ok", etag)  # a hit now
        await refused("miss-ok", Counted(if_none_match=f'"{etag}"'), "NotModified")
        await fills_settled(svc.cache)
        await svc.cache.stop()

    asyncio.run(scenario())
