"""The prefetcher's predictions (app/services/cache/prefetch.py) over a fake listing: a walk in
key order is fetched ahead within its byte budget and stops with its reader; random reads that
happen to increase cost one listing and fetch nothing; interleaved readers of one walk keep it;
admission's refusal stops it; ``prefetch: prefix`` stages the prefix until admission refuses."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from app.domain.objects import ListPage, ObjectSummary
from app.domain.policy import Policy
from app.services.cache.prefetch import Prefetcher

MiB = 1024 * 1024
WHEN = datetime(2026, 1, 1, tzinfo=UTC)


class Remote:
    def __init__(self, keys: list[str], size: int = 4 * MiB) -> None:
        self.objects = [ObjectSummary(k, size, f"e-{k}", WHEN) for k in sorted(keys)]
        self.lists = 0

    def list_page(self, bucket: str, prefix: str, delimiter: str | None, after: str | None, limit: int) -> ListPage:
        self.lists += 1
        found = [o for o in self.objects if o.key.startswith(prefix) and (after is None or o.key > after)
                 and (delimiter is None or delimiter not in o.key[len(prefix):])]
        return ListPage(found[:limit], [], len(found) > limit, found[:limit][-1].key if found[:limit] else None)


class Harness:
    def __init__(self, remote: Remote, ahead: int = 16 * MiB, admit: Callable[[str], bool | None] | None = None) -> None:
        self.remote = remote
        self.warmed: list[str] = []
        self.admit = admit or (lambda key: True)
        self.tasks: list[asyncio.Future[Any]] = []
        self.prefetch = Prefetcher(remote.list_page, self.decide, self.warm, self.run, self.spawn,
                                   ahead_bytes=ahead, parallel=4)

    def decide(self, bucket: str, obj: ObjectSummary, policy: Policy) -> bool | None:
        return self.admit(obj.key)

    async def warm(self, bucket: str, key: str, policy: Policy, tenant_id: int | None) -> int:
        self.warmed.append(key)
        return 4 * MiB

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args)

    def spawn(self, work: Awaitable[Any]) -> None:
        self.tasks.append(asyncio.ensure_future(work))

    async def settle(self) -> None:
        while any(not t.done() for t in self.tasks):
            await asyncio.gather(*self.tasks)

    async def read(self, *keys: str, policy: Policy = Policy(), prefix: str | None = None) -> None:
        for key in keys:
            self.prefetch.saw("b", key, policy, None, prefix)
            await self.settle()


SHARDS = [f"train/shard-{i:04d}.tar" for i in range(40)]


def test_a_walk_in_key_order_is_fetched_ahead_within_its_budget_and_stops_with_its_reader() -> None:
    h = Harness(Remote(SHARDS))

    async def go() -> None:
        await h.read(*SHARDS[:3])
        assert h.warmed == SHARDS[3:7]  # 16 MiB ahead of the third read: four 4 MiB shards
        await h.read(SHARDS[3])
        assert h.warmed == SHARDS[3:8]  # each read tops the window up by what it consumed
        # the reader stops: nothing more is fetched, whatever time passes
        await asyncio.sleep(0)
        assert h.warmed == SHARDS[3:8]

    asyncio.run(go())
    assert h.remote.lists == 1


def test_random_reads_that_happen_to_increase_cost_one_listing_and_fetch_nothing() -> None:
    h = Harness(Remote(SHARDS))

    async def go() -> None:
        await h.read(SHARDS[1], SHARDS[20], SHARDS[37])  # increasing, but far apart
        await h.read(SHARDS[2], SHARDS[25], SHARDS[39])  # again within the minute: no listing

    asyncio.run(go())
    assert h.warmed == []
    assert h.remote.lists == 1


def test_interleaved_readers_of_one_walk_keep_it_and_a_jump_ends_it() -> None:
    h = Harness(Remote(SHARDS))

    async def go() -> None:
        await h.read(SHARDS[0], SHARDS[2], SHARDS[3], SHARDS[1], SHARDS[5], SHARDS[4])
        assert h.warmed[:4] == SHARDS[4:8] or set(SHARDS[6:9]) <= set(h.warmed)
        fetched = len(h.warmed)
        await h.read(SHARDS[39])  # far past the window: the walk ends
        await h.read(SHARDS[6])
        assert len(h.warmed) == fetched

    asyncio.run(go())


def test_admission_refusing_stops_the_walk_and_cached_objects_are_passed_over() -> None:
    def admit(key: str) -> bool | None:
        if key == SHARDS[3]:
            return None  # cached already
        return key < SHARDS[6]

    h = Harness(Remote(SHARDS), admit=admit)

    async def go() -> None:
        await h.read(*SHARDS[:3])
        assert h.warmed == SHARDS[4:6]  # 3 was cached, 6 refused: nothing after it
        await h.read(SHARDS[3], SHARDS[4])
        assert h.warmed == SHARDS[4:6]

    asyncio.run(go())


def test_prefix_policy_stages_the_prefix_once_until_admission_refuses() -> None:
    keys = [f"ds/{c}/img-{i:03d}.jpg" for c in "abc" for i in range(10)]
    h = Harness(Remote(keys), admit=lambda key: key < "ds/c/img-005.jpg")

    async def go() -> None:
        await h.read("ds/b/img-007.jpg", policy=Policy(prefetch="prefix"), prefix="ds/")
        await h.read("ds/a/img-001.jpg", policy=Policy(prefetch="prefix"), prefix="ds/")

    asyncio.run(go())
    assert sorted(h.warmed) == [k for k in keys if k < "ds/c/img-005.jpg"]
    assert h.remote.lists == 1


def test_prefetch_off_and_non_caching_policies_fetch_nothing() -> None:
    h = Harness(Remote(SHARDS))

    async def go() -> None:
        await h.read(*SHARDS[:5], policy=Policy(prefetch="off"))
        await h.read(*SHARDS[10:15], policy=Policy(mode="bypass"))

    asyncio.run(go())
    assert h.warmed == [] and h.remote.lists == 0
