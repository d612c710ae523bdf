"""Background work as tasks: the in-process ChoreLoop runs each chore on its interval, with no
request in sight, over a real SQLite catalog, a real cache directory and blob store, and the
in-memory remote. One chore of each kind: the journal's outbox sweep (a lost submission is
destaged), cache eviction (an over-budget cache shrinks), revalidation (a changed object is
dropped) and the scrub (a corrupt block is unlinked). Also: where each chore is routed."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import threading
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

from app.adapters.catalog.cache.index import CacheIndex
from app.adapters.catalog.control.policies import PolicyRepo
from app.adapters.catalog.engine import make_engine
from app.adapters.catalog.journal.journal import Journal
from app.adapters.catalog.migrate import upgrade
from app.adapters.catalog.repo import Catalog
from app.adapters.local.blobstore import BlobStore
from app.adapters.local.blockformat import DATA_OFFSET
from app.adapters.local.cachestore import CacheStore
from app.bootstrap import make_chores
from app.config import Settings
from app.domain.cache import block_name
from app.domain.objects import ObjectMeta
from app.domain.policy import Policy
from app.services.cache import ReadCache
from app.services.cache.fill import RemoteBlockSource
from app.services.control.chores import ChoreLoop, ChoreParts, Intervals, run_chore
from app.services.control.policies import PolicyBook
from app.services.destage.executor import EmbeddedExecutor
from app.services.multipart.expiry import UploadExpiry
from app.services.writes.budget import DiskReserve
from app.taskqueue import SHARED_QUEUE, beat_schedule
from tests.fakes.harness import build
from tests.fakes.remote import InMemoryRemote

BLOCK = 1000
FAST = Intervals(sweep=0.1, janitor=0.1, eviction=0.2, scrub=0.2, revalidate=0.2, orphans_first=3600.0)


def _parts(tmp_path: Path, remote: InMemoryRemote, *, submit: Callable[[int], None] = lambda seq: None,
           journal: Journal | None = None, intervals: Intervals = FAST) -> ChoreParts:
    tmp_path.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{tmp_path / 'ferry.db'}"
    upgrade(url)
    engine = make_engine(url)
    policies = PolicyBook(PolicyRepo(engine), Policy())
    cache = ReadCache(CacheIndex(make_engine(url, synchronous="NORMAL"), "unit"), CacheStore(tmp_path / "data"),
                      remote, policies, source=RemoteBlockSource(remote), disk=DiskReserve(tmp_path, 0, 0.0),  # type: ignore[arg-type]
                      dirty_bytes=lambda: 0, block_size=BLOCK)
    expiry = UploadExpiry(Catalog(engine, "unit"), BlobStore(tmp_path / "data", fsync=False), remote,  # type: ignore[arg-type]
                          3600.0)
    return ChoreParts(journal or Journal(engine, "unit"), cache, expiry, submit, intervals)


def _cached(cache: ReadCache, key: str, data: bytes) -> list[str]:
    """An entry holding ``data`` with every block published (header and CRC as a fill writes them)."""
    meta = ObjectMeta(key=key, size=len(data), etag=hashlib.md5(data).hexdigest(),
                      last_modified=datetime.now(UTC), content_headers={}, metadata={}, checksums={})
    assert cache.index.put_ready(meta, "bkt", BLOCK, None, False, time.time() - 1, len(data))
    names = []
    for index in range(max(1, -(-len(data) // BLOCK))):
        name = block_name("bkt", key, meta.etag, index, BLOCK)
        fill = cache.store.open_fill(name, index)
        fill.write(data[index * BLOCK:(index + 1) * BLOCK])
        fill.seal()
        cache.store.publish(fill)
        names.append(name)
    return names


async def _until(check: Callable[[], bool], timeout: float = 5.0) -> float:
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout, "the chore did not run in time"
        await asyncio.sleep(0.05)
    return time.monotonic() - started


async def _with_loop(parts: ChoreParts, body: Callable[[ChoreLoop], Awaitable[None]]) -> ChoreLoop:
    loop = ChoreLoop(parts, ("node", "shared", "process"))
    await loop.start()
    try:
        await body(loop)
    finally:
        await loop.stop()
    return loop


def test_a_lost_submission_is_destaged_by_the_sweep_chore(tmp_path: Path) -> None:
    """A write whose submission never reached an executor lands on the remote through the sweep
    chore alone."""
    remote = InMemoryRemote()
    remote.create_bucket("bkt", None)
    services = build(tmp_path, remote)

    async def run() -> None:
        await services.put("bkt", "k", b"lost submission")
        services.executor.queued.clear()  # the submission is lost
        executor = EmbeddedExecutor(services.destager, services.journal, workers=1)
        await executor.start()
        parts = _parts(tmp_path / "cache", remote, submit=executor.submit, journal=services.journal)
        try:
            await _with_loop(parts, lambda _: _until(lambda: remote.current_etag("bkt", "k") is not None))
        finally:
            await executor.stop()

    asyncio.run(run())
    assert remote.buckets["bkt"]["k"].data == b"lost submission"


def test_eviction_of_an_over_budget_cache_needs_no_request(tmp_path: Path) -> None:
    remote = InMemoryRemote()
    parts = _parts(tmp_path, remote)
    cache = parts.cache
    assert isinstance(cache, ReadCache)
    for i in range(10):
        _cached(cache, f"k{i}", bytes([i]) * 2500)
    assert cache.index.total_bytes() == 25_000
    cache.budget_bytes = 10_000  # the budget shrank (a restart with a smaller FERRY_CACHE_BYTES)

    async def body(loop: ChoreLoop) -> None:  # the count moves when the chore returns, after its evictions
        await _until(lambda: cache.index.total_bytes() <= 9_500 and loop.runs.get("cache-eviction", 0) >= 1)

    loop = asyncio.run(_with_loop(parts, body))
    assert loop.runs.get("cache-eviction", 0) >= 1
    assert cache.index.total_bytes() > 0  # down to 95 % of the budget, not empty


def test_revalidation_drops_a_changed_object_and_keeps_the_rest(tmp_path: Path) -> None:
    remote = InMemoryRemote()
    remote.create_bucket("bkt", None)
    parts = _parts(tmp_path, remote)
    cache = parts.cache
    assert isinstance(cache, ReadCache)
    for key in ("same", "changed"):
        data = key.encode()
        remote.put_object("bkt", key, io.BytesIO(data), len(data),
                          base64.b64encode(hashlib.md5(data).digest()).decode(), {}, {}, {})
        _cached(cache, key, data)
    new = b"changed behind the cache"
    remote.put_object("bkt", "changed", io.BytesIO(new), len(new),
                      base64.b64encode(hashlib.md5(new).digest()).decode(), {}, {}, {})
    changed_blocks = [block_name("bkt", "changed", hashlib.md5(b"changed").hexdigest(), 0, BLOCK)]

    async def body(_: ChoreLoop) -> None:
        # The entry leaves the index first and its blocks after (one drop, in a thread): wait for both.
        await _until(lambda: cache.index.get("bkt", "changed") is None
                     and not cache.store.path(changed_blocks[0]).exists())

    asyncio.run(_with_loop(parts, body))
    kept = cache.index.get("bkt", "same")
    assert kept is not None and kept.etag == hashlib.md5(b"same").hexdigest()
    assert not cache.store.path(changed_blocks[0]).exists()


def test_the_scrub_chore_unlinks_a_corrupt_block(tmp_path: Path) -> None:
    remote = InMemoryRemote()
    parts = _parts(tmp_path, remote)
    cache = parts.cache
    assert isinstance(cache, ReadCache)
    good = _cached(cache, "good", b"g" * 1500)
    bad = _cached(cache, "bad", b"b" * 800)[0]
    with open(cache.store.path(bad), "r+b") as fh:  # one byte flips on disk
        fh.seek(DATA_OFFSET + 10)
        fh.write(b"X")

    async def body(_: ChoreLoop) -> None:
        await _until(lambda: not cache.store.path(bad).exists())

    asyncio.run(_with_loop(parts, body))
    assert all(cache.store.path(name).exists() for name in good)


def test_a_slow_pass_is_skipped_not_stacked(tmp_path: Path) -> None:
    """A chore still running in this process is not started again beside itself (a Celery
    worker's threads could otherwise run two scrubs over the same shard cursor)."""
    parts = _parts(tmp_path, InMemoryRemote())
    lock = parts._running.setdefault("cache-scrub", threading.Lock())
    with lock:
        assert run_chore("cache-scrub", parts) is None
    assert run_chore("cache-scrub", parts) == 0


def test_a_chore_sharing_a_guard_waits_for_the_other_instead_of_skipping(tmp_path: Path) -> None:
    """Eviction shares the janitor's guard: a turn of it that falls in a janitor pass runs once
    that pass ends (skipped, a quota waited several eviction intervals on a loaded machine)."""
    parts = _parts(tmp_path, InMemoryRemote())
    guard = parts._running.setdefault("guard:janitor", threading.Lock())
    passes: list[bool] = []
    parts.cache.janitor_pass = passes.append  # type: ignore[method-assign]  # records each pass's enforce flag
    with guard:  # a janitor pass under way
        waiter = threading.Thread(target=run_chore, args=("cache-eviction", parts))
        waiter.start()
        waiter.join(0.3)
        assert waiter.is_alive() and passes == [], "it waits for the pass, it does not skip"
    waiter.join(10)
    assert not waiter.is_alive() and passes == [True], "then it runs: an eviction pass"


def test_fleet_mode_routes_node_chores_to_the_node_and_shared_ones_to_the_shared_queue() -> None:
    settings = Settings(broker_url="redis://127.0.0.1:6379/15", node_id="n-1",
                        database_url="postgresql+psycopg://u@h/db", journal_retention_seconds=60)
    schedule = beat_schedule(settings)
    queues = {entry["task"]: entry["options"]["queue"] for entry in schedule.values()}
    assert queues == {"ferry.sweep": "ferry.n-1", "ferry.upload-expiry": "ferry.n-1", "ferry.replica-takeover": "ferry.n-1",
                      "ferry.cache-janitor": "ferry.n-1", "ferry.cache-eviction": "ferry.n-1",
                      "ferry.cache-orphans": "ferry.n-1", "ferry.cache-retired": "ferry.n-1", "ferry.cache-scrub": "ferry.n-1",
                      "ferry.cache-revalidation": "ferry.n-1", "ferry.compact": SHARED_QUEUE,
                      "ferry.remote-uploads": SHARED_QUEUE,
                      "ferry.staging-recovery": "ferry.n-1", "ferry.heartbeat": "ferry.n-1"}
    assert schedule["ferry-compact"]["schedule"] == 6.0  # a tenth of the retention
    no_history = beat_schedule(settings.model_copy(update={"journal_retention_seconds": 0,
                                                           "cache_revalidate_interval": 0}))
    assert "ferry-compact" not in no_history and "ferry-cache-revalidation" not in no_history


def test_the_serving_process_runs_only_its_own_chores_in_fleet_mode(tmp_path: Path) -> None:
    parts = _parts(tmp_path, InMemoryRemote())
    embedded = Settings(data_dir=tmp_path)
    fleet = Settings(data_dir=tmp_path, broker_url="redis://127.0.0.1:6379/15", node_id="n-1")
    for settings, names in ((embedded, {"sweep", "replica-takeover", "upload-expiry", "cache-janitor",
                                        "cache-eviction", "cache-orphans", "cache-retired",
                                        "cache-scrub", "cache-revalidation", "compact", "remote-uploads", "cache-touches",
                                        "staging-recovery", "sizing-gauges"}),
                            (fleet, {"cache-touches", "sizing-gauges"})):
        _, loop = make_chores(settings, parts.journal, parts.cache, parts.upload_expiry,  # type: ignore[arg-type]
                              EmbeddedExecutor(None, None))  # type: ignore[arg-type]
        assert {c.name for c in loop.chores} == names


def test_a_row_handed_to_celery_is_not_sent_again_until_the_resend_time(tmp_path: Path) -> None:
    """The sweep in fleet mode: a row whose message may still be queued is not sent again on every
    pass (the queue grew faster than workers drained it after kill -9 rounds); a lost message is
    sent again once ``resend`` has passed, and a freed lease makes the row due at once."""
    remote = InMemoryRemote()
    remote.create_bucket("bkt", None)
    services = build(tmp_path, remote)
    asyncio.run(services.put("bkt", "k", b"queued"))
    sent: list[int] = []
    parts = _parts(tmp_path / "cache", remote, submit=sent.append, journal=services.journal,
                   intervals=Intervals(resend=0.3))
    run_chore("sweep", parts)
    run_chore("sweep", parts)
    assert len(sent) == 1  # the second pass found it not due yet
    time.sleep(0.35)
    run_chore("sweep", parts)
    assert len(sent) == 2 and len(set(sent)) == 1  # the message may have been lost: once more
    assert services.destager.destage(sent[0]) == "durable"
    run_chore("sweep", parts)
    assert len(sent) == 2  # durable rows are never sent


def test_the_sweep_resends_at_once_in_embedded_mode_and_after_a_pause_in_fleet_mode() -> None:
    from app.schedule import RESEND_AFTER, chore_intervals

    assert chore_intervals(Settings()).resend == 0.0  # the in-process queue drops duplicates itself
    fleet = Settings(broker_url="redis://127.0.0.1:6379/15", node_id="n-1")
    assert chore_intervals(fleet).resend == RESEND_AFTER > 0
