"""Background work as task functions: one registry that both executors run.

Each chore is a name, a scope (where it must run), an interval and one function of the parts it
needs. In embedded mode ``ChoreLoop`` runs every chore in the serving process; in fleet mode the
serving process runs only the ``process`` chores, and each node's Celery worker runs the others
from its own beat (``workers/tasks.py`` registers one task per chore, ``app/taskqueue.py``
schedules and routes them):

- ``node``: touches this node's data directory (blobs, cache blocks) or this node's rows, so it
  runs on the node's own queue ``ferry.<node id>``, consumed only by workers that share the
  node's data directory;
- ``shared``: touches only the shared catalog, so any node's worker may run it (``ferry.shared``);
- ``process``: state held in one process's memory (the cache's buffered access times, its
  sizing curves), so every serving process runs it itself, in both modes.

Chores are idempotent and guarded by the same data-directory locks as before (janitor, scrub and
orphan sweep each take their lock in ``cache/locks``), so a duplicate run, a lost beat message
or two processes running the same chore are harmless.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, Protocol

import anyio.to_thread

from app.services.control.staging import StagingParts, recover_stale

log = logging.getLogger("ferry.chores")

Scope = Literal["node", "shared", "process"]



class JournalChores(Protocol):
    """What the journal's chores need of it."""

    def release_expired_leases(self) -> int: ...
    def due(self, limit: int = ..., now: float | None = ..., node_id: str | None = ...,
            resend_after: float = ...) -> list[int]: ...
    def compact(self, retention_seconds: float) -> int: ...


class ScrubPass(Protocol):
    def run(self) -> int: ...


class CacheChores(Protocol):
    """The read cache's public upkeep methods."""

    @property
    def scrub(self) -> ScrubPass: ...

    def janitor_pass(self, enforce: bool = True) -> None: ...
    def revalidate_all(self) -> dict[str, int]: ...
    def sweep_orphans(self) -> tuple[int, int]: ...
    def sweep_retired(self) -> tuple[int, int]: ...
    def flush_touches(self) -> None: ...
    def publish_sizing(self) -> None: ...


class Expiry(Protocol):
    def sweep(self) -> int: ...


class Sweep(Protocol):
    def sweep(self) -> int: ...


class RemoteUploads(Protocol):
    def sweep_now(self) -> int: ...


@dataclass(frozen=True)
class Intervals:
    """The settings chores run by (seconds; 0 turns a chore off)."""

    sweep: float = 2.0  # FERRY_SWEEP_INTERVAL: the outbox sweep and upload expiry
    retention: float = 0.0  # FERRY_JOURNAL_RETENTION_SECONDS; 0 keeps history (no compaction)
    revalidate: float = 60.0  # FERRY_CACHE_REVALIDATE_INTERVAL; 0 turns bulk revalidation off
    janitor: float = 1.0  # this node's invalid cache entries and old tombstones
    eviction: float = 3.0  # limits are summed over the whole index; fills also trigger a check
    scrub: float = 10.0  # at most ~3 MiB/s of reads (SCRUB_BYTES_PER_PASS every 10 s)
    orphans: float = 86400.0  # the orphan sweep walks every block file: daily ...
    orphans_first: float = 60.0  # ... and a minute after start
    retired: float = 60.0  # retired blocks past their grace (cachestore.RETIRED_GRACE_SECONDS)
    touches: float = 1.0  # access times buffered in each serving process
    sizing: float = 30.0  # each serving process's predicted and measured hit ratio gauges (sizing)
    staging_recovery: float = 10.0  # running staging jobs whose heartbeat stopped (staging.STALE_AFTER)
    remote_uploads: float = 3600.0  # FERRY_REMOTE_UPLOAD_SWEEP_INTERVAL: remote uploads nothing owns
    # A row the sweep handed to Celery is not sent again for this long (the in-process queue drops
    # duplicates itself: 0). Without it, a backlog grew by every sweep faster than workers drained it.
    resend: float = 0.0


def compaction_interval(retention_seconds: float, sweep_interval: float) -> float:
    """How often history is compacted: a tenth of the retention, between one sweep and an hour
    (the query scans the journal's history; its rows age by the hour, not by the second)."""
    return max(sweep_interval, min(retention_seconds / 10, 3600.0))


@dataclass
class ChoreParts:
    """The services chores run on, built by the composition root."""

    journal: JournalChores
    cache: CacheChores
    upload_expiry: Expiry
    submit: Callable[[int], None]  # hand a due journal row to the executor
    intervals: Intervals
    sweep_node: str | None = None  # None: every row (a catalog that only this data dir uses)
    replicas: Sweep | None = None  # fleet: take over lost nodes' writes this node holds copies of
    remote_uploads: RemoteUploads | None = None  # remote multipart uploads no catalog row owns
    staging: StagingParts | None = None  # warm-up jobs: those whose runner stopped are failed
    _running: dict[str, threading.Lock] = field(default_factory=dict, repr=False)


def sweep_journal(journal: JournalChores, submit: Callable[[int], None], node_id: str | None,
                  resend_after: float = 0.0) -> int:
    """The outbox sweep: free leases of dead workers, hand every due row of this node on again
    (another node's bytes are in its own data directory). A row handed on is not due again for
    ``resend_after`` seconds (Celery: its message may still be queued; see ``Journal.due``)."""
    journal.release_expired_leases()
    due = journal.due(node_id=node_id, resend_after=resend_after)
    for seq in due:
        submit(seq)
    return len(due)


def _sweep(p: ChoreParts) -> object:
    return sweep_journal(p.journal, p.submit, p.sweep_node, p.intervals.resend)


def _compact(p: ChoreParts) -> object:
    removed = p.journal.compact(p.intervals.retention) if p.intervals.retention else 0
    if removed:
        log.info("journal compaction removed %d rows past the retention", removed)
    return removed


def _scrub(p: ChoreParts) -> object:
    return p.cache.scrub.run()


@dataclass(frozen=True)
class Chore:
    name: str
    scope: Scope
    run: Callable[[ChoreParts], object]
    interval: Callable[[Intervals], float]
    first_after: Callable[[Intervals], float] | None = None  # None: one interval after start
    guard: str | None = None  # chores sharing a guard never run side by side in one process


CHORES: tuple[Chore, ...] = (
    Chore("sweep", "node", _sweep, lambda i: i.sweep, lambda i: 0.0),
    Chore("replica-takeover", "node", lambda p: p.replicas.sweep() if p.replicas else 0, lambda i: i.sweep),
    Chore("upload-expiry", "node", lambda p: p.upload_expiry.sweep(), lambda i: i.sweep, lambda i: 0.0),
    # Both hold the janitor lock, a lock of the process: a thread of the same process would get it too.
    Chore("cache-janitor", "node", lambda p: p.cache.janitor_pass(False), lambda i: i.janitor, guard="janitor"),
    Chore("cache-eviction", "node", lambda p: p.cache.janitor_pass(True), lambda i: i.eviction, guard="janitor"),
    Chore("cache-orphans", "node", lambda p: p.cache.sweep_orphans(), lambda i: i.orphans,
          lambda i: i.orphans_first),
    Chore("cache-retired", "node", lambda p: p.cache.sweep_retired(), lambda i: i.retired),
    Chore("cache-scrub", "node", _scrub, lambda i: i.scrub),
    # The entries and blocks it compares are this node's (CacheIndex rows carry the node id).
    Chore("cache-revalidation", "node", lambda p: p.cache.revalidate_all(), lambda i: i.revalidate),
    # Every bucket of the remote against the shared catalog's uploads and rows: once for the fleet.
    Chore("remote-uploads", "shared", lambda p: p.remote_uploads.sweep_now() if p.remote_uploads else 0,
          lambda i: i.remote_uploads),
    Chore("compact", "shared", _compact,
          lambda i: compaction_interval(i.retention, i.sweep) if i.retention else 0.0, lambda i: 0.0),
    # The jobs it judges are this node's (its serving process or its worker ran them).
    Chore("staging-recovery", "node", lambda p: recover_stale(p.staging) if p.staging else 0,
          lambda i: i.staging_recovery),
    Chore("cache-touches", "process", lambda p: p.cache.flush_touches(), lambda i: i.touches),
    Chore("sizing-gauges", "process", lambda p: p.cache.publish_sizing(), lambda i: i.sizing),
)
BY_NAME = {chore.name: chore for chore in CHORES}


def run_chore(name: str, parts: ChoreParts) -> object:
    """The one entry point of every chore (both executors call it). A run of a chore still busy
    in this process is skipped: a slow pass never piles up behind itself. A chore that shares a
    guard with another (janitor and eviction) waits for the other's pass instead of skipping:
    skipped, eviction (every 3 s) lost every turn that fell in a janitor pass (every 1 s), and a
    loaded machine enforced a quota only after several of its intervals."""
    chore = BY_NAME[name]
    own = parts._running.setdefault(name, threading.Lock())
    if not own.acquire(blocking=False):
        return None
    try:
        if chore.guard is None:
            return chore.run(parts)
        with parts._running.setdefault(f"guard:{chore.guard}", threading.Lock()):
            return chore.run(parts)
    finally:
        own.release()


class ChoreLoop:
    """The in-process executor of chores: one asyncio task per chore, each on its interval."""

    def __init__(self, parts: ChoreParts, scopes: tuple[Scope, ...]) -> None:
        self.parts = parts
        self.chores = [c for c in CHORES if c.scope in scopes and c.interval(parts.intervals) > 0]
        self.runs: dict[str, int] = {}
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(self._every(c), name=f"chore-{c.name}") for c in self.chores]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(BaseException):
                await task
        self._tasks = []

    async def _every(self, chore: Chore) -> None:
        interval = chore.interval(self.parts.intervals)
        first = chore.first_after(self.parts.intervals) if chore.first_after else interval
        next_at = time.monotonic() + first
        while True:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            next_at = time.monotonic() + interval
            try:
                await anyio.to_thread.run_sync(run_chore, chore.name, self.parts)
            except Exception:  # one failing pass must not stop the chore (or any other)
                log.exception("chore %s failed", chore.name)
            self.runs[chore.name] = self.runs.get(chore.name, 0) + 1
