"""What every part of the read cache shares: its collaborators, its per-process state, and the
few helpers each part uses (threads, unawaited tasks, block names, dropping an entry).

``ReadCache`` (readcache.py) is this state and the facade over one part per capability (serve,
fill, discovery, eviction, revalidation, orphans), each a plain class built with this object;
each part's module says what it owns. They hold one object because they share its state: the
fills in flight, the running discoveries, the buffered access times and the background tasks.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from app.domain.cache import Entry, block_name
from app.domain.objects import ObjectSummary
from app.domain.policy import Policy
from app.domain.states import CacheState
from app.services.cache.admission import FrequencyAdmission
from app.services.cache.prefetch import Prefetcher
from app.services.cache.scrub import Scrub
from app.services.cache.sizing import SizingRecorder
from app.services.control.policies import PolicyBook
from app.services.ports import BlockSource, BlockStore, CacheIndex, RemotePort
from app.services.threads import ThreadHops
from app.services.writes.budget import DiskReserve

if TYPE_CHECKING:
    from app.services.cache.copies import PeerCopies
    from app.services.cache.discovery import Discovery
    from app.services.cache.eviction import Eviction
    from app.services.cache.fill import Fill, Filling
    from app.services.cache.owned import OwnedReads
    from app.services.cache.serve import Serving

log = logging.getLogger("ferry.cache")
T = TypeVar("T")

LOCK_POLL = 0.005
LOCK_POLL_MAX = 0.05


class CacheBase:
    """The collaborators and state of one process's read cache. Every collaborator is required:
    the composition root (app/bootstrap.py) always has them, and tests pass real ones or fakes
    (but ``sizing``, the per-process curves, which the cache makes itself when not given)."""

    if TYPE_CHECKING:
        # The parts ``ReadCache`` builds around this state, each holding it (readcache.py): one
        # part reaches another through them (serving and discovery start fills, a fill settles
        # its discovery and schedules eviction), and the facade's warm serves the prefetcher.
        serving: Serving
        filling: Filling
        discovery: Discovery
        eviction: Eviction
        copies: PeerCopies
        owned: OwnedReads

        async def warm(self, bucket: str, key: str, policy: Policy, tenant_id: int | None,
                       known: Any = ...) -> int: ...

    def __init__(self, index: CacheIndex, store: BlockStore, remote: RemotePort, policies: PolicyBook, *,
                 source: BlockSource, disk: DiskReserve, dirty_bytes: Callable[[], int],
                 block_size: int = 8 * 1024 * 1024, fetch_concurrency: int = 16, budget_bytes: int = 0,
                 revalidate_interval: float = 60.0, sizing: SizingRecorder | None = None,
                 prefetch_bytes: int = 0, prefetch_parallel: int = 16, copy_reads: int = 3) -> None:
        self.index = index
        self.store = store
        self.remote = remote  # discovery GETs, revalidation HEADs and LISTs
        self.source = source  # where a fill's block bytes come from (the remote, or a peer)
        self.policies = policies
        self.disk = disk  # the data dir's free space: fills stop before its reserve
        self.dirty_bytes = dirty_bytes  # the journal's dirty bytes count against the budget
        self.block_size = block_size
        self.fetch_concurrency = fetch_concurrency
        self.budget_bytes = budget_bytes
        self.revalidate_interval = revalidate_interval
        self.copy_reads = copy_reads  # reads of a peer's object before this node keeps a copy (copies.py)
        self.threads = ThreadHops(64, "ferry-cache")
        self.fetch_limiter = anyio.CapacityLimiter(fetch_concurrency)
        self.inflight: dict[str, Fill] = {}
        self.discovering: dict[tuple[str, str], asyncio.Future[Entry | None]] = {}
        # When each running discovery began: a reader may share it only if no write came since.
        self.discovery_began: weakref.WeakKeyDictionary[asyncio.Future[Entry | None], float] = (
            weakref.WeakKeyDictionary())
        # Keys whose invalidated row the janitor is dropping (readcache._drop_invalid): the key's
        # file lock is the process's, so a discovery in this same process waits on this instead.
        self.sweeping: set[tuple[str, str]] = set()
        self._touches: dict[int, tuple[float, int]] = {}
        self.added_since_check = 0
        self.evicting = False
        self.tasks: list[asyncio.Task[Any]] = []
        # Conditional HEADs in flight per entry id: serve-stale readers share one, and may leave it.
        self.revalidating: dict[int, asyncio.Future[tuple[Entry | None, str]]] = {}
        self.scrub = Scrub(store)  # checks block bytes in the background; hits check only headers
        # Every object read's key and size, for the miss-ratio curves (None: one of its own).
        self.sizing = sizing if sizing is not None else SizingRecorder(budget_bytes, dirty_bytes)
        # Whether a miss that needs room is cached (admission.py): counts of every read.
        self.admission = FrequencyAdmission(index, policies, dirty_bytes, budget_bytes, self.drop_now)
        # What reads predict, fetched ahead (prefetch.py); ``prefetch_bytes`` 0: nothing is.
        self.prefetch = Prefetcher(self.remote.list_objects, self._prefetch_verdict, self._warm_ahead, self.run,
                                   self.spawn, ahead_bytes=prefetch_bytes, parallel=prefetch_parallel)
        self._build_parts()

    def _build_parts(self) -> None:
        """The parts around this state: ``ReadCache`` builds them (they import this module)."""

    def _prefetch_verdict(self, bucket: str, obj: ObjectSummary, policy: Policy) -> bool | None:
        """Whether to fetch a listed object ahead of its reader (in a thread): None when this
        version is cached or being discovered; False when the cache would not keep it."""
        entry = self.index.get(bucket, obj.key)
        if entry is not None and entry.state == CacheState.READY and entry.etag == obj.etag:
            return None
        if (bucket, obj.key) in self.discovering:
            return None
        if policy.admission == "second-hit" or self.eviction.disk_low():
            return False
        return self.admission.decide(bucket, obj.key, obj.size, policy)

    async def _warm_ahead(self, bucket: str, key: str, policy: Policy, tenant_id: int | None) -> int:
        """A prefetch of an object its verdict found not cached (this version)."""
        return await self.warm(bucket, key, policy, tenant_id, None)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        return await self.threads.run(fn, *args)

    def spawn(self, work: Awaitable[Any]) -> None:
        """Run ``work`` on the loop without anyone awaiting it; ``stop`` cancels what is left."""
        task = asyncio.ensure_future(work)
        self.tasks.append(task)
        task.add_done_callback(lambda t: self.tasks.remove(t) if t in self.tasks else None)

    def background(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run ``fn`` in a thread without anyone waiting for it (on the event loop)."""
        async def run() -> None:
            try:
                await self.run(fn, *args)
            except Exception:
                log.exception("cache background task %s failed", getattr(fn, "__name__", fn))

        self.spawn(run())

    @staticmethod
    def block_file(entry: Entry, index: int) -> str:
        return block_name(entry.bucket, entry.key, entry.etag, index, entry.block_size)

    def _touch(self, entry: Entry) -> None:
        self.touch_id(entry.id)

    def touch_id(self, entry_id: int) -> None:
        """Buffer an access (time, hits) of this node's row ``entry_id``; ``flush_touches`` writes
        them in batches."""
        _, hits = self._touches.get(entry_id, (0.0, 0))
        self._touches[entry_id] = (time.time(), hits + 1)

    async def drop(self, entry: Entry) -> None:
        await self.run(self.drop_now, entry)

    def drop_now(self, entry: Entry) -> int:
        if not self.index.remove(entry):
            return 0
        return self.delete_blocks(entry)

    def delete_blocks(self, entry: Entry) -> int:
        if not entry.size:
            return 0
        return sum(self.store.delete(self.block_file(entry, i)) for i in range(entry.blocks))

    def flush_touches(self) -> None:
        """Write the buffered access times (eviction reads them: flushed before it runs)."""
        touches, self._touches = self._touches, {}
        if touches:
            try:
                self.index.touch(touches)
            except Exception:
                log.exception("recording cache access times failed")
