"""Frequency admission: whether a miss is cached when caching it would push something else out.

LRU admits every miss. A dataset larger than the cache, read in epochs (every sample once, in a
fresh order or in key order), then keeps about r²/2 of each epoch as hits where r is the part of
the dataset the cache holds (0 in key order): each miss evicts an entry the epoch is about to
read. ``admission: frequency`` (the default) caches a miss that needs room only if the frequency
sketch (app/domain/frequency.py) counts it more often, by more than ``MARGIN``, than every
least-recently-used entry it would push out; then exactly those entries go. A tie refuses: the
miss is served from its discovery GET and not kept (no second remote request), so an epoch's
misses leave the cache's part of the dataset in place and each epoch hits about r. The choice,
and what it costs on other traces, comes from the side-by-side simulation in bench/cachesim.py
(policy ``tinylfu-prior+1``); docs/read-cache.md says what an operator sees.

A miss that does not fit and does not outrank its victims may still take the room that is free:
it is admitted *in part* (``partial``), and its fills keep blocks only while that allowance lasts
(``keep_block``); later blocks are served and not kept. Without it, objects large against the
budget (Parquet files of an eighth of the dataset) leave up to one object's bytes idle: a cache
of half the dataset kept 3 files of 8 and hit 0.38 instead of about r (bench/analysis.md).

What is never gated: a miss that fits under the budget, a pinned key, staging (``ferry stage``
asked for it by name). Victims are never pinned and never dirty (dirty bytes are not cache
entries: they only count against the budget). Quotas stay with eviction.py, which also remains
the backstop when concurrent admissions overshoot.

Counts are this process's: with ``FERRY_WORKERS`` above 1, each worker's sketch sees its share
of the reads (an epoch still ties; a key's count is then a sample of its reads). So are
allowances: another worker fills such an object whole, and eviction.py corrects the overshoot.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from app import metrics
from app.domain.cache import Entry
from app.domain.frequency import FrequencySketch
from app.domain.policy import Policy
from app.services.control.policies import PolicyBook
from app.services.ports import CacheIndex

MARGIN = 1  # a candidate must be counted more than one above each victim (bench/cachesim.py)
SKETCH_ENTRY_BYTES = 64 * 1024  # the sketch tells apart budget / this many keys (4x a 256 KiB sample's)
SKETCH_ENTRIES_MIN, SKETCH_ENTRIES_MAX = 4096, 1 << 22  # 16 KiB .. 16 MiB of counters
REPEAT_SECONDS = 5.0  # a read not from byte 0 counts only if the key was not counted this recently
RECENT_KEYS_MAX = 65536  # keys remembered for that (the oldest half goes when it is full)
USAGE_REFRESH_SECONDS = 1.0  # the budget's use is measured at most this often (a SUM per node)
VICTIMS_LOOKED_AT = 256  # LRU-end entries a decision may look through for room
BATCH = 128  # reads buffered before they are counted (every count is read after a replay)
LANDING_SECONDS = 10.0  # an admitted object's bytes not landed this long after its last block are let go
MEASURED_KEYS_MAX = 1000  # landing objects whose rows a measurement reads (the rest by their own count)


V = TypeVar("V")


def remember(table: dict[str, V], name: str, value: V) -> None:
    """Set ``name`` as the newest entry of a bounded table: a full one drops its oldest half
    (dicts keep insertion order), so memory stays bounded whatever the key count."""
    if len(table) >= RECENT_KEYS_MAX:
        for old in list(table)[: RECENT_KEYS_MAX // 2]:
            table.pop(old, None)
    table.pop(name, None)
    table[name] = value


@dataclass(slots=True)
class Landing:
    """An admitted object whose bytes are still landing: ``admitted`` promised, ``landed`` so far
    (as its fills said), ``since`` the admission or the last block that landed."""

    bucket: str
    key: str
    admitted: int
    landed: int
    since: float


def sketch_for(budget_bytes: int) -> FrequencySketch:
    """A sketch sized to the number of entries a budget of small objects holds (4x, as simulated)."""
    entries = min(max(budget_bytes // SKETCH_ENTRY_BYTES, SKETCH_ENTRIES_MIN), SKETCH_ENTRIES_MAX)
    return FrequencySketch(entries)


def sketch_key(bucket: str, key: str) -> str:
    return f"{bucket}/{key}"


class FrequencyAdmission:
    """The gate one process's read cache asks before caching a miss (``decide``, in a thread),
    and the access counts it judges by (``record``, on every read)."""

    def __init__(self, index: CacheIndex, policies: PolicyBook, dirty_bytes: Callable[[], int], budget_bytes: int,
                 drop: Callable[[Entry], int], *, sketch: FrequencySketch | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.index = index
        self.policies = policies
        self.dirty_bytes = dirty_bytes
        self.budget_bytes = budget_bytes
        self.drop = drop  # removes an entry's row and blocks, returning the bytes freed
        self.sketch = sketch if sketch is not None else sketch_for(budget_bytes)
        self.clock = clock
        self._lock = threading.Lock()
        self._measured = 0
        self._measured_at: float | None = None
        self._since = 0  # bytes admitted (less bytes evicted) since the last measurement
        self._landing: dict[str, Landing] = {}  # key -> its admitted bytes still landing
        self._recent: dict[str, float] = {}  # key -> when it was last counted
        self._refused: dict[str, tuple[int, float]] = {}  # key -> (size, when) of a recent refusal
        self._allowed: dict[str, int] = {}  # key admitted in part -> bytes its fills may still keep
        self._pending: list[tuple[str, str, bool, float]] = []  # reads not yet counted
        self._replaying = threading.Lock()  # one replay at a time: counted in the order read

    def record(self, bucket: str, key: str, from_start: bool = True) -> None:
        """One read of the key, after any decision about it (so a miss is judged by its history).
        A pass over an object counts once: a read from byte 0 (or of it all) counts; a ranged read
        further in (the next range of a shard, a Parquet row group after its footer) counts only
        if the key was not counted in the last ``REPEAT_SECONDS``. Counted per range, a shard
        refused at its first range would outrank its victims by its third and be admitted with
        most of its bytes already read.

        Buffered (a list append on the read path) and counted ``BATCH`` at a time, in order, with
        the time of the read; whatever reads the counts (``estimate``, a decision) replays the
        buffer first, so every decision still sees every read before it."""
        pending = self._pending
        pending.append((bucket, key, from_start, self.clock()))
        if len(pending) >= BATCH:
            self.replay()

    def replay(self) -> None:
        """Count the buffered reads."""
        with self._replaying:
            batch, self._pending = self._pending, []
            for bucket, key, from_start, now in batch:
                self._count(bucket, key, from_start, now)

    def estimate(self, bucket: str, key: str) -> int:
        """How often the sketch has counted the key (every read recorded so far)."""
        self.replay()
        return self.sketch.estimate(sketch_key(bucket, key))

    def _count(self, bucket: str, key: str, from_start: bool, now: float) -> None:
        name = sketch_key(bucket, key)
        if not from_start and now - self._recent.get(name, -REPEAT_SECONDS) < REPEAT_SECONDS:
            return
        remember(self._recent, name, now)
        self.sketch.record(name)

    def refused_size(self, bucket: str, key: str) -> int | None:
        """The size of a key refused in the last ``REPEAT_SECONDS``: its next read (the next range
        of a shard, a Parquet row group after its footer) is judged again without a discovery
        GET, and read through with exactly its range when refused again. A discovery fetches a
        whole block: once per refused object, not once per range."""
        found = self._refused.get(sketch_key(bucket, key))
        if found is None or self.clock() - found[1] >= REPEAT_SECONDS:
            return None
        return found[0]

    def remember_refused(self, bucket: str, key: str, size: int) -> None:
        remember(self._refused, sketch_key(bucket, key), (size, self.clock()))

    def gated(self, policy: Policy) -> bool:
        return policy.admission == "frequency" and bool(self.budget_bytes) and not policy.pinned

    def decide(self, bucket: str, key: str, size: int, policy: Policy, first_block: int | None = None) -> bool:
        """Whether to cache this miss of ``size`` bytes (blocking: SQL when the cache is full).
        ``first_block``: the length of the block the caller fetches first; given, a miss refused
        whole is admitted in part when at least that much room is free (``keep_block``). An
        object larger than the whole budget is never kept, in part or whole."""
        if not self.gated(policy):
            self.forget_allowance(bucket, key)
            return True
        name = sketch_key(bucket, key)
        with self._lock:
            used = self._used()
            need = used + size - self.budget_bytes
            if need <= 0:
                self._take_room(name, size)
                metrics.admission_decided("room")
                return True
            if size <= self.budget_bytes and self._replace(bucket, key, size, need):
                self._expect(name, size)
                self._allowed.pop(name, None)
                metrics.admission_decided("admitted")
                return True
            room = self.budget_bytes - used
            if first_block is not None and 0 < first_block <= room and size <= self.budget_bytes:
                remember(self._allowed, name, room)  # forgotten ones fill whole; eviction.py corrects it
                self._since += room
                self._expect(name, room)
                metrics.admission_decided("partial")
                return True
            metrics.admission_decided("refused")
            return False

    def decide_at_once(self, bucket: str, key: str, size: int, policy: Policy) -> bool | None:
        """``decide`` where it needs no SQL: a miss that is not gated, or that fits under the
        budget as last measured (True); None when only ``decide`` can tell (a measurement is due,
        or the miss needs room, or a thread holds the gate). Called on the event loop: a cold
        epoch's misses into a cache with room then cost no thread hop for their verdict, and the
        loop never waits behind ``decide``'s SQL (the lock is only tried)."""
        if not self.gated(policy):
            self.forget_allowance(bucket, key)
            return True
        if not self._lock.acquire(blocking=False):
            return None
        try:
            if self._measured_at is None or self.clock() - self._measured_at >= USAGE_REFRESH_SECONDS:
                return None
            if self._measured + self._since + size > self.budget_bytes:
                return None
            self._take_room(sketch_key(bucket, key), size)
        finally:
            self._lock.release()
        metrics.admission_decided("room")
        return True

    def has_room(self, size: int, policy: Policy) -> bool:
        """Whether a miss of ``size`` bytes would be kept without pushing anything out, as last
        measured (no lock, no SQL); True too when it is not gated or the measurement is due
        (only ``decide`` can tell then)."""
        if not self.gated(policy) or self._measured_at is None \
                or self.clock() - self._measured_at >= USAGE_REFRESH_SECONDS:
            return True
        return self._measured + self._since + size <= self.budget_bytes

    def keep_block(self, bucket: str, key: str, length: int) -> bool:
        """Whether a fill of this object may keep a block of ``length`` bytes: always, unless the
        object was admitted in part and its allowance is spent (then it is served, not kept)."""
        name = sketch_key(bucket, key)
        if name not in self._allowed:
            return True
        with self._lock:
            left = self._allowed.get(name)
            if left is None:
                return True
            if length > left:
                return False
            self._allowed[name] = left - length
            return True

    def allowance(self, bucket: str, key: str) -> int | None:
        """The bytes an object admitted in part may still keep (None: not admitted in part).
        A read that needs a block larger than this is read through with exactly its range
        (readcache.py): fetched as a block and not kept, each range would cost a whole block."""
        return self._allowed.get(sketch_key(bucket, key)) if self._allowed else None

    def forget_allowance(self, bucket: str, key: str) -> None:
        """The object is to be kept whole (staged, pinned, another version)."""
        if self._allowed:
            with self._lock:
                self._allowed.pop(sketch_key(bucket, key), None)

    def landed(self, bucket: str, key: str, length: int) -> None:
        """A fill kept ``length`` bytes of the object (its row counts them now)."""
        if not self._landing:
            return
        name = sketch_key(bucket, key)
        with self._lock:
            found = self._landing.get(name)
            if found is None:
                return
            found.landed += length
            found.since = self.clock()
            if found.landed >= found.admitted:
                del self._landing[name]

    def _take_room(self, name: str, size: int) -> None:
        """A miss admitted into free room (the lock held): counted, expected to land, kept whole."""
        self._since += size
        self._expect(name, size)
        self._allowed.pop(name, None)

    def _expect(self, name: str, size: int) -> None:
        """Admitted bytes that land later, block by block: a measurement taken before they do
        must still count them, or the next decision sees room that is promised (the cache then
        overshoots and eviction.py pushes out an entry the epoch is about to read)."""
        bucket, key = name.split("/", 1)  # a bucket name holds no '/'
        remember(self._landing, name, Landing(bucket, key, size, 0, self.clock()))

    def _measure(self, now: float) -> tuple[int, int]:
        """The cached bytes, and the admitted bytes not landed yet, from one snapshot of the
        index: a landing object's promise is what its row does not hold yet. (Counted from the
        fills' own reports instead, a block whose row was written before a measurement and
        reported after it was counted twice until the next one: a shard admitted then got only
        part of the room that was free, and an epoch in key order hit 7 shards of 8.) Promises of
        a fill that stopped (a shard's tail never read, a failed fetch) are let go
        ``LANDING_SECONDS`` after the last block that did land."""
        stale = [name for name, found in self._landing.items() if now - found.since >= LANDING_SECONDS]
        for name in stale:
            del self._landing[name]
        landing = list(self._landing.values())
        looked = landing[:MEASURED_KEYS_MAX]
        total, held = self.index.bytes_with([(found.bucket, found.key) for found in looked])
        promised = sum(max(0, found.admitted - held.get((found.bucket, found.key), 0)) for found in looked)
        promised += sum(max(0, found.admitted - found.landed) for found in landing[MEASURED_KEYS_MAX:])
        return total, promised

    def _replace(self, bucket: str, key: str, size: int, need: int) -> bool:
        """Evict the LRU-end entries covering ``need`` if the candidate outranks every one of them."""
        victims = self._victims(bucket, key, need)
        if victims is None:
            return False
        self.replay()
        estimate = self.sketch.estimate(sketch_key(bucket, key))
        if any(estimate <= self.sketch.estimate(sketch_key(v.bucket, v.key)) + MARGIN for v in victims):
            return False
        freed = sum(max(self.drop(v), 0) for v in victims)
        metrics.evicted("admission", len(victims), freed)
        self._since += size - freed
        return True

    def _victims(self, bucket: str, key: str, need: int) -> list[Entry] | None:
        """The least recently used unpinned entries whose bytes cover ``need``; None if there are
        not enough of them within ``VICTIMS_LOOKED_AT`` (the rest is pinned, or too little is
        cached: the miss is read through)."""
        victims: list[Entry] = []
        covered = 0
        for entry in self.index.lru(VICTIMS_LOOKED_AT):
            if (entry.bucket, entry.key) == (bucket, key) or self.policies.for_key(entry.bucket, entry.key).pinned:
                continue
            victims.append(entry)
            covered += entry.cached_bytes
            if covered >= need:
                return victims
        return None

    def _used(self) -> int:
        """Cached plus dirty bytes: measured at most every ``USAGE_REFRESH_SECONDS``, plus what
        this process admitted since. Fills land after their decision, block by block: a fresh
        measurement starts from the admitted bytes still to land (``_measure``)."""
        now = self.clock()
        if self._measured_at is None or now - self._measured_at >= USAGE_REFRESH_SECONDS:
            cached, self._since = self._measure(now)
            self._measured = cached + self.dirty_bytes()
            self._measured_at = now
        return self._measured + self._since
