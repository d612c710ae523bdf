"""Prefetch: objects fetched into the cache before a reader asks for them.

Two predictions, both bounded, both asking frequency admission (admission.py) before any byte is
fetched, with the size the listing gave, so a prefetch never pushes out what the cache would
keep and never fetches what it would not:

- **Sequential** (``prefetch: sequential``, the default). Three reads of one directory in
  increasing key order, near neighbours in its listing (one LIST tells; random reads that happen
  to increase are told apart and the directory is not listed again for 10 s), are a walk:
  shards of a dataset read in order, by one reader or several interleaved. The next objects of
  the directory, in S3's byte order, are fetched ahead of the walk's furthest read, up to
  ``ahead_bytes``. Each read tops the window up again; a read far past the window ends the walk,
  and a reader that stops stops it (nothing is fetched but on a read), so a wrong guess costs at
  most ``ahead_bytes`` per walk, counted in ``ferry_cache_prefetch_unread_bytes_total``.
- **Prefix** (``prefetch: prefix``). The first miss under the rule's prefix stages the whole
  prefix in the background, ``parallel`` objects at a time, in key order, until admission refuses
  (the cache will keep no more) or the prefix is done: a shuffled first epoch then reads objects
  the gateway fetched at its own parallelism. Once per prefix and process per ``RESTAGE_SECONDS``.

Within one large object, read-ahead of its blocks is serve.py's (``fetch_concurrency``).
Everything here runs on the event loop of one process; listings and admission run in threads.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from app import metrics
from app.domain.objects import ListPage, ObjectSummary
from app.domain.policy import Policy

log = logging.getLogger("ferry.cache")

RUN_TO_PREFETCH = 3  # reads in increasing key order that make a candidate walk
STEP = 2  # ... if each is at most STEP listed objects after the one before (other readers interleave)
NEAR = 16  # a walk's read within this many listed objects past its frontier keeps it going
RANDOM_SECONDS = 10.0  # a directory whose candidate was no walk is not listed again for this long
IDLE_SECONDS = 30.0  # a walk not read for this long is over
WALKS_MAX = 1024  # walks remembered per process (the idle ones go first)
LIST_PAGE = 100
RESTAGE_SECONDS = 3600.0

# (bucket, prefix, delimiter, start_after, max_keys): the remote's listing, in S3's byte order
ListPageFn = Callable[[str, str, str | None, str | None, int], ListPage]
# Whether to fetch this listed object: True (admitted), False (refused), None (cached already)
Decide = Callable[[str, ObjectSummary, Policy], bool | None]
WarmFn = Callable[[str, str, Policy, int | None], Awaitable[int]]
RunFn = Callable[..., Awaitable[Any]]


def directory_of(key: str) -> str:
    """The prefix a key's siblings share (up to its last '/', '' at the top)."""
    cut = key.rfind("/")
    return key[: cut + 1] if cut >= 0 else ""


@dataclass
class Walk:
    """What the reads of one directory show, and what was fetched ahead of them."""

    seen_at: float
    recent: list[str] = field(default_factory=list)  # the last distinct keys read, oldest first
    checking: bool = False  # a listing is on its way to tell whether ``recent`` is a walk
    random_until: float = 0.0  # found not to be walked: no listing before then
    walking: bool = False
    frontier: str = ""  # the furthest key read since the walk was found
    listed: list[ObjectSummary] = field(default_factory=list)  # listed after the frontier, not queued
    marker: str | None = None  # the listing goes on after this key
    exhausted: bool = False
    refused: bool = False  # admission said no: the cache keeps no more of this
    ahead: dict[str, int] = field(default_factory=dict)  # fetched ahead and not read yet
    topping: bool = False

    def bytes_ahead(self) -> int:
        return sum(size for key, size in self.ahead.items() if key > self.frontier)


class Prefetcher:
    """Watches reads (``saw``) and fetches ahead what they predict."""

    def __init__(self, list_page: ListPageFn, decide: Decide, warm: WarmFn, run: RunFn,
                 spawn: Callable[[Awaitable[Any]], None], *, ahead_bytes: int, parallel: int,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.list_page = list_page
        self.decide = decide
        self.warm = warm
        self.run = run  # runs a blocking call in a thread
        self.spawn = spawn
        self.ahead_bytes = ahead_bytes
        self.clock = clock
        self.parallel = max(1, parallel)
        self._slots = asyncio.Semaphore(self.parallel)
        self._walks: dict[tuple[str, str], Walk] = {}
        self._staged: dict[tuple[str, str], float] = {}

    # ---- what reads tell ---------------------------------------------------------------------
    def saw(self, bucket: str, key: str, policy: Policy, tenant_id: int | None, prefix: str | None = None) -> None:
        """A read of ``bucket/key`` (hit or miss). ``prefix``: the rule prefix of a ``prefetch:
        prefix`` policy, staged on its first read."""
        if not policy.caches or policy.prefetch == "off" or not self.ahead_bytes:
            return
        if policy.prefetch == "prefix" and prefix is not None:
            self._stage_prefix(bucket, prefix, policy, tenant_id)
            return
        self._follow(bucket, key, policy, tenant_id)

    def _follow(self, bucket: str, key: str, policy: Policy, tenant_id: int | None) -> None:
        """Three reads in increasing key order make a candidate; one listing tells whether they
        were near neighbours (a walk) or happened to increase (random reads: no listing of the
        directory for ``RANDOM_SECONDS``). A walk follows its furthest read; a read far past it
        ends the walk (reads a little behind it are other readers of the same walk)."""
        now = self.clock()
        where = (bucket, directory_of(key))
        walk = self._walks.get(where)
        if walk is not None and now - walk.seen_at > IDLE_SECONDS:
            self._end(walk)
            walk = None
        if walk is None:
            self._prune()
            walk = self._walks[where] = Walk(now)
        walk.seen_at = now
        if walk.walking:
            expected = walk.ahead.pop(key, None) is not None
            if key <= walk.frontier:
                return
            if expected or self._near(walk, key):
                walk.frontier = key
                self._top_up_soon(bucket, where[1], walk, policy, tenant_id)
                return
            self._end(walk)
        if walk.recent and walk.recent[-1] == key:
            return  # another range of the same object
        walk.recent = [*walk.recent[-(RUN_TO_PREFETCH - 1):], key]
        if (len(walk.recent) == RUN_TO_PREFETCH and walk.recent == sorted(set(walk.recent))
                and not walk.checking and now >= walk.random_until):
            walk.checking = True
            self.spawn(self._check(bucket, where[1], walk, list(walk.recent), policy, tenant_id))

    @staticmethod
    def _near(walk: Walk, key: str) -> bool:
        """Whether ``key`` is among the next ``NEAR`` listed objects after the frontier."""
        return any(obj.key == key for obj in walk.listed[:NEAR])

    async def _check(self, bucket: str, directory: str, walk: Walk, keys: list[str], policy: Policy,
                     tenant_id: int | None) -> None:
        try:
            page = await self.run(self.list_page, bucket, directory, "/", keys[0], LIST_PAGE)
            at = {obj.key: i for i, obj in enumerate(page.contents)}  # keys[0] itself is at -1
            places = [-1, *(at.get(k, len(at) + NEAR) for k in keys[1:])]
            if any(b - a > STEP for a, b in itertools.pairwise(places)):
                walk.random_until = self.clock() + RANDOM_SECONDS
                return
            walk.walking, walk.frontier = True, keys[-1]
            walk.listed = [obj for obj in page.contents if obj.key > walk.frontier]
            walk.marker = page.contents[-1].key if page.contents else keys[-1]
            walk.exhausted = not page.is_truncated
            walk.refused = False
            self._top_up_soon(bucket, directory, walk, policy, tenant_id)
        except Exception:
            log.warning("prefetch: listing s3://%s/%s failed", bucket, directory, exc_info=True)
            walk.random_until = self.clock() + RANDOM_SECONDS
        finally:
            walk.checking = False

    def _top_up_soon(self, bucket: str, directory: str, walk: Walk, policy: Policy, tenant_id: int | None) -> None:
        if not walk.topping and not walk.refused:
            walk.topping = True
            self.spawn(self._top_up(bucket, directory, walk, policy, tenant_id))

    def _end(self, walk: Walk) -> None:
        """The walk is over: what was fetched for it and not read was a wrong guess."""
        unread = sum(walk.ahead.values())
        if unread:
            metrics.prefetch_unread(unread)
        walk.ahead.clear()
        walk.walking, walk.listed, walk.recent, walk.exhausted, walk.marker = False, [], [], False, None

    def _prune(self) -> None:
        if len(self._walks) < WALKS_MAX:
            return
        for where, walk in sorted(self._walks.items(), key=lambda item: item[1].seen_at)[: WALKS_MAX // 2]:
            self._end(walk)
            del self._walks[where]

    # ---- sequential ----------------------------------------------------------------------------
    async def _top_up(self, bucket: str, directory: str, walk: Walk, policy: Policy, tenant_id: int | None) -> None:
        """Queue the walk's next objects until ``ahead_bytes`` are ahead of its frontier."""
        try:
            while walk.walking and walk.bytes_ahead() < self.ahead_bytes and not walk.refused:
                nxt = await self._next(bucket, directory, walk)
                if nxt is None:
                    return
                verdict = await self.run(self.decide, bucket, nxt, policy)
                if verdict is None:
                    walk.ahead[nxt.key] = 0  # cached already: part of the walk, nothing to fetch
                    continue
                if not verdict:
                    walk.refused = True  # the cache is full of what it would rather keep
                    return
                walk.ahead[nxt.key] = nxt.size
                await self._slots.acquire()
                self.spawn(self._fetch(bucket, nxt, policy, tenant_id, "sequential"))
        except Exception:
            log.warning("prefetch after s3://%s/%s failed", bucket, walk.frontier, exc_info=True)
        finally:
            walk.topping = False

    async def _next(self, bucket: str, directory: str, walk: Walk) -> ObjectSummary | None:
        """The first listed object after both the reader and what is already ahead of it."""
        floor = max([walk.frontier, *walk.ahead])
        while True:
            while walk.listed:
                candidate = walk.listed.pop(0)
                if candidate.key > floor:
                    return candidate
            if walk.exhausted:
                return None
            after = max(floor, walk.marker or "")
            page = await self.run(self.list_page, bucket, directory, "/", after, LIST_PAGE)
            walk.listed = list(page.contents)
            walk.marker = page.next_marker or (page.contents[-1].key if page.contents else after)
            walk.exhausted = not page.is_truncated

    async def _fetch(self, bucket: str, obj: ObjectSummary, policy: Policy, tenant_id: int | None, kind: str) -> None:
        """One object warmed (the slot was taken by the caller)."""
        try:
            fetched = await self.warm(bucket, obj.key, policy, tenant_id)
            if fetched:
                metrics.prefetched(kind, fetched)
        except Exception as exc:
            log.info("prefetch of %s/%s failed: %s", bucket, obj.key, exc)
        finally:
            self._slots.release()

    # ---- prefix ------------------------------------------------------------------------------
    def _stage_prefix(self, bucket: str, prefix: str, policy: Policy, tenant_id: int | None) -> None:
        now = self.clock()
        staged = self._staged.get((bucket, prefix))
        if staged is not None and now - staged < RESTAGE_SECONDS:
            return
        self._staged[(bucket, prefix)] = now
        log.info("prefetch: staging s3://%s/%s (policy prefetch: prefix)", bucket, prefix)
        self.spawn(self._stage(bucket, prefix, policy, tenant_id))

    def _verdicts(self, bucket: str, batch: list[ObjectSummary], policy: Policy) -> list[bool | None]:
        """The verdicts of up to ``parallel`` listed objects in one thread, up to the first refusal
        (nothing after it is admitted): a thread hop per object cost the stage a context switch
        or two each, on a loop that a cold epoch keeps busy."""
        verdicts: list[bool | None] = []
        for obj in batch:
            verdicts.append(self.decide(bucket, obj, policy))
            if verdicts[-1] is False:
                break
        return verdicts

    async def _stage(self, bucket: str, prefix: str, policy: Policy, tenant_id: int | None) -> None:
        after: str | None = None
        running: set[asyncio.Task[None]] = set()
        try:
            while True:
                page = await self.run(self.list_page, bucket, prefix, None, after, 1000)
                listed = [obj for obj in page.contents if obj.size]
                for first in range(0, len(listed), self.parallel):
                    batch = listed[first:first + self.parallel]
                    for obj, verdict in zip(batch, await self.run(self._verdicts, bucket, batch, policy), strict=False):
                        if verdict is None:
                            continue
                        if not verdict:
                            log.info("prefetch of s3://%s/%s stopped at %s: the cache keeps no more", bucket, prefix,
                                     obj.key)
                            return
                        await self._slots.acquire()
                        task = asyncio.ensure_future(self._fetch(bucket, obj, policy, tenant_id, "prefix"))
                        running.add(task)
                        task.add_done_callback(running.discard)
                if not page.is_truncated or not page.contents:
                    return
                after = page.next_marker or page.contents[-1].key
        except Exception:
            log.warning("prefetch of s3://%s/%s failed", bucket, prefix, exc_info=True)
        finally:
            if running:
                await asyncio.gather(*running, return_exceptions=True)
