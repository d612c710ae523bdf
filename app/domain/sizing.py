"""Sizing: an online miss-ratio curve, in bytes, per bucket and per tenant (issue 28).

Why: "what would a bigger (or smaller) cache buy?" should be answered from live traffic, not by
running a second cache. For a whole-object LRU cache with a byte budget the answer comes from one
number per access, its byte stack distance: the bytes of the distinct objects read since the
object's previous read, plus its own size. The read hits an LRU cache of C bytes exactly when that
distance is at most C (evicting from the tail until the newcomer fits, the cache always holds the
longest prefix of the LRU stack that fits C), so one histogram of distances gives the hit ratio at
every budget at once.

Memory stays bounded whatever the key count by fixed-size SHARDS (Waldspurger et al., FAST 2015):
a key is sampled when its 64-bit hash is below a threshold T (rate R = T / 2**64), so a sampled key
is sampled on every read and its reuse is seen whole. When ``max_keys`` keys are tracked and a new
one comes, a key with the largest hash is dropped and T falls to that hash: the sample shrinks to
the keys a lower rate would have picked. Distances are measured among the sampled keys and scaled by
1/R; each sampled read counts as 1/R reads (the rate at that time), which is the paper's rescaling
without touching the histogram. SHARDS_adj puts the difference between the reads seen and the reads
the sample stands for at the smallest distance (a hot key in or out of the sample is what skews the
count, and a hot key's reuses are short).

One change for byte sizes: the sample is stratified by size class (16x wide: 4-64 KiB, 64 KiB-1 MiB,
...), each class with its own threshold, the ``max_keys`` shared by dropping from the class that
tracks the most keys. With one rate for all, a byte distance is a sum dominated by the few large
objects the sample happens to hold (a 10% sample of a working set with 5% of 1-16 MiB objects put
the curve's knee 10 points off); per class, a rare large object is sampled at a high rate.

Parts: a read may name parts of the stream it belongs to (its bucket, its tenant). Each part
keeps its own histogram of the distances the whole stream measured, so a part's curve is its hit
ratio in a cache the whole stream shares (what a node's cache gives one bucket), not in a cache of
its own (a ``SizingBook`` curve per bucket answers that).

The data structures (hashes, size classes, distance buckets, a class's Fenwick tree) live in
app/domain/sizing_sample.py. Keys are kept as their hashes only: no object name is held or reported.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_right
from collections.abc import Iterable
from typing import Any

from app.domain.sizing_sample import (
    BUCKETS,
    CLASSES,
    DAY,
    HASH_SPACE,
    HOUR,
    MINUTE,
    Stratum,
    class_range,
    distance_bucket,
    hit_ratios,
    key_hash,
)

__all__ = ["DAY", "HOUR", "POINT_FACTORS", "MissRatioCurve", "SizingBook", "key_hash", "point_sizes"]

_LAST_CLASS = CLASSES - 1
POINT_FACTORS = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 4.0)  # points_around: budget/4 .. 4 x budget


def point_sizes(budget: int) -> list[int]:
    """The cache sizes of ``points_around``: budget/4 .. 4 x budget, the budget itself among them."""
    if budget <= 0:
        raise ValueError("budget must be positive")
    return sorted({max(1, int(budget * f)) for f in POINT_FACTORS})


class _Part:
    """The reads of one part of the stream (a bucket, a tenant), by the whole stream's distances."""

    __slots__ = ("accesses", "cold", "hist")

    def __init__(self) -> None:
        self.hist = [0.0] * BUCKETS
        self.cold = 0.0
        self.accesses = 0


class MissRatioCurve:
    """The online byte-LRU miss-ratio curve of one stream of reads (a node, a bucket, a tenant).

    Thread-safe with one lock (``_lock``) around all state: ``access`` hashes the key outside it,
    then holds it for O(classes x log max_keys) work; readers hold it only to copy the histogram
    (about a thousand floats) and compute outside it.

    Memory is O(max_keys) whatever the number of keys: the tracked keys (hash, timestamp, size,
    minute), a heap of their hashes, per size class a Fenwick tree over at most 8x its keys (and 64)
    timestamps, a fixed histogram, and per class at most a day and an hour of per-minute counts.
    Measured (tracemalloc): about 4.6 MB at 8192 keys in four size classes with a day of minutes.
    Each part adds one histogram (at most about 31 KB), ``max_parts`` of them at most.
    CPU: about 2 us for a read the sample skips (mostly the hash), 10-15 us for a sampled one.
    """

    def __init__(self, max_keys: int = 8192, sample_rate: float = 1.0, max_parts: int = 64) -> None:
        """``sample_rate`` is each class's starting rate: it only falls, once ``max_keys`` keys are
        tracked. Starting at 1 makes small buckets exact; a large one settles near max_keys over
        its distinct keys, per size class. Past ``max_parts`` parts, a new part is not kept."""
        if max_keys < 1:
            raise ValueError("max_keys must be at least 1")
        if not 0.0 < sample_rate <= 1.0:
            raise ValueError("sample_rate must be in (0, 1]")
        self.max_keys = max_keys
        self.max_parts = max_parts
        self._lock = threading.Lock()
        self._initial = max(1, min(HASH_SPACE, int(sample_rate * HASH_SPACE)))
        self._strata: dict[int, Stratum] = {}
        self._tracked = 0
        self._seq = 0  # sampled reads so far: what the strata's ``seqs`` count
        self._newest_minute = -(1 << 62)
        self._hist = [0.0] * BUCKETS  # estimated reads by byte stack distance
        self._hist_bytes = [0.0] * BUCKETS  # the same, weighted by the object's size
        self._cold = 0.0  # estimated first reads (misses at every size)
        self._cold_bytes = 0.0
        self._accesses = 0  # all reads, sampled or not (SHARDS_adj)
        self._access_bytes = 0
        self._sampled = 0
        self._parts: dict[str, _Part] = {}

    # -- recording -------------------------------------------------------------------------

    def access(self, key: str, size: int, now: float | None = None, parts: tuple[str, ...] = ()) -> None:
        """Record a read of a whole object of ``size`` bytes (a new version should be a new key)."""
        self.access_hash(key_hash(key), size, now, parts)

    def access_hash(self, h: int, size: int, now: float | None = None, parts: tuple[str, ...] = ()) -> None:
        """``access`` with the key already hashed (``key_hash``): several curves, one hash."""
        if size < 0:
            raise ValueError("size must not be negative")
        minute = int((time.time() if now is None else now) // MINUTE)
        cls = min(size.bit_length() >> 2, _LAST_CLASS)  # size_class, inlined: this runs on every read
        with self._lock:
            self._accesses += 1
            self._access_bytes += size
            held = self._parts
            for name in parts:
                part = held.get(name) or self._part(name)
                if part is not None:
                    part.accesses += 1
            st = self._strata.get(cls)
            if st is None:
                st = self._strata[cls] = Stratum(self._initial)
            if h < st.threshold:
                weight = HASH_SPACE / st.threshold
                b = self._sample(st, h, size, minute, weight)
                for name in parts:
                    part = held.get(name)
                    if part is None:
                        continue
                    if b < 0:
                        part.cold += weight
                    else:
                        part.hist[b] += weight

    def _part(self, name: str) -> _Part | None:
        part = self._parts.get(name)
        if part is None and len(self._parts) < self.max_parts:
            part = self._parts[name] = _Part()
        return part

    def _sample(self, st: Stratum, h: int, size: int, minute: int, weight: float) -> int:
        """A sampled read: its byte stack distance into the histogram (returns its bucket), or a
        cold miss (returns -1); then it becomes its key's last read."""
        self._sampled += 1
        rec = st.keys.get(h)
        if rec is not None and st.seqs[rec[0]] == self._seq and rec[1] == size and rec[2] == minute:
            # The curve's last sampled read, again, in the same minute (a hot object read over and
            # over): nothing was read between, so its distance is its own size and its place in
            # the order stays. Exact, and none of the tree walk below.
            b = distance_bucket(size)
            self._hist[b] += weight
            self._hist_bytes[b] += weight * size
            return b
        self._newest_minute = max(self._newest_minute, minute)
        seq = self._seq = self._seq + 1
        if rec is not None:
            last = st.seqs[rec[0]]
            between = 0.0
            for other in self._strata.values():  # each class's bytes read since: bisect, Fenwick prefix
                if other.live_bytes:
                    i = bisect_right(other.seqs, last, 1, other.next_ts) - 1
                    tree = other.tree
                    before = 0
                    while i > 0:
                        before += tree[i]
                        i &= i - 1
                    between += (other.live_bytes - before) * (HASH_SPACE / other.threshold)
            b = distance_bucket(int(between) + size)
            self._hist[b] += weight
            self._hist_bytes[b] += weight * size
            st.unlink(rec)
        else:
            b = -1
            self._cold += weight
            self._cold_bytes += weight * size
            if self._tracked >= self.max_keys:
                fullest = max(self._strata.values(), key=lambda s: len(s.keys))
                if len(st.keys) == len(fullest.keys):
                    fullest = st  # on a tie, the newcomer's class gives
                if fullest is st and h > st.largest_hash():
                    st.threshold = h  # the newcomer has the largest hash: it is the one to go
                    return b
                fullest.evict_largest()
                self._tracked -= 1
            rec = st.track(h)
            self._tracked += 1
        st.link(h, rec, size, minute, seq, self._newest_minute)
        return b

    # -- reading ---------------------------------------------------------------------------

    def _copy(self, by_bytes: bool) -> tuple[list[float], float, int]:
        with self._lock:
            if by_bytes:
                return list(self._hist_bytes), self._cold_bytes, self._access_bytes
            return list(self._hist), self._cold, self._accesses

    def curve(self, budgets: Iterable[int], *, by_bytes: bool = False) -> list[tuple[int, float]]:
        """(cache bytes, estimated hit ratio) for each budget: of reads, or of bytes read."""
        hist, cold, total = self._copy(by_bytes)
        return hit_ratios(hist, cold, total, budgets)

    def part_curve(self, part: str, budgets: Iterable[int]) -> list[tuple[int, float]]:
        """(cache bytes, estimated hit ratio of ``part``'s reads) when the whole stream shares
        a cache of that size; zeros for a part never seen."""
        with self._lock:
            held = self._parts.get(part)
            hist, cold, total = (list(held.hist), held.cold, held.accesses) if held else ([], 0.0, 0)
        return hit_ratios(hist, cold, total, budgets)

    def part_accesses(self) -> dict[str, int]:
        """Each part's reads so far."""
        with self._lock:
            return {name: p.accesses for name, p in self._parts.items()}

    def points_around(self, budget: int) -> list[dict[str, Any]]:
        """Seven points from budget/4 to 4 x budget, the budget itself among them, for the admin API."""
        sizes = point_sizes(budget)
        reads = self.curve(sizes)
        byts = self.curve(sizes, by_bytes=True)
        return [
            {"cache_bytes": c, "hit_ratio": round(h, 4), "byte_hit_ratio": round(b, 4)}
            for (c, h), (_, b) in zip(reads, byts, strict=True)
        ]

    def touched_bytes(self, window_seconds: float, now: float | None = None) -> int:
        """Estimated bytes of the distinct objects read in the last ``window_seconds`` (at most a
        day): per class, the sampled keys whose last read falls in the window, scaled by 1/R.
        Minute granularity: the window's first minute counts whole (up to a minute more than asked)."""
        if not 0 <= window_seconds <= DAY:
            raise ValueError("window_seconds must be between 0 and a day")
        t = time.time() if now is None else now
        first, last = int((t - window_seconds) // MINUTE), int(t // MINUTE)
        with self._lock:
            return int(sum(st.touched(first, last) for st in self._strata.values()))

    @property
    def tracked_keys(self) -> int:
        return self._tracked

    @property
    def accesses(self) -> int:
        return self._accesses

    def sample_rates(self) -> dict[int, float]:
        """Size class -> its current sampling rate."""
        with self._lock:
            return {cls: st.threshold / HASH_SPACE for cls, st in sorted(self._strata.items())}

    def footprint_bytes(self) -> int:
        """Estimated bytes of all distinct objects ever read (each at its last size)."""
        with self._lock:
            return int(sum(st.live_bytes * st.weight for st in self._strata.values()))

    def snapshot(self, budget: int | None = None, now: float | None = None) -> dict[str, Any]:
        """A JSON-ready summary; with a budget, the points around it."""
        with self._lock:
            out: dict[str, Any] = {
                "accesses": self._accesses,
                "accessed_bytes": self._access_bytes,
                "sampled_accesses": self._sampled,
                "tracked_keys": self._tracked,
                "max_keys": self.max_keys,
                "estimated_cold_misses": int(self._cold),
                "size_classes": [
                    {
                        "min_size": class_range(cls)[0],
                        "max_size": class_range(cls)[1],
                        "sample_rate": st.threshold / HASH_SPACE,
                        "tracked_keys": len(st.keys),
                    }
                    for cls, st in sorted(self._strata.items())
                ],
            }
        out["footprint_bytes"] = self.footprint_bytes()
        out["touched_bytes"] = {"last_hour": self.touched_bytes(HOUR, now), "last_day": self.touched_bytes(DAY, now)}
        if budget is not None and budget > 0:
            out["budget_bytes"] = budget
            out["points"] = self.points_around(budget)
        return out


class SizingBook:
    """One ``MissRatioCurve`` per name ("bucket:photos", "tenant:7"), at most ``max_names`` of them.

    Past the cap a new name is refused (counted in ``refused_accesses``), not made room for by
    dropping another: with more names than room, evicting would thrash and every curve would keep
    restarting from nothing. ``forget`` frees a name (a deleted bucket). One lock (``_lock``)
    guards the name table; each curve has its own. At the defaults a full book holds at most about
    32 x 2.5 MB.
    """

    def __init__(self, max_names: int = 32, max_keys: int = 4096, sample_rate: float = 1.0) -> None:
        if max_names < 1:
            raise ValueError("max_names must be at least 1")
        MissRatioCurve(max_keys, sample_rate)  # validate the arguments now, not at the first access
        self.max_names = max_names
        self.max_keys = max_keys
        self.sample_rate = sample_rate
        self._lock = threading.Lock()
        self._curves: dict[str, MissRatioCurve] = {}
        self.refused_accesses = 0

    def _curve_for(self, name: str) -> MissRatioCurve | None:
        with self._lock:
            curve = self._curves.get(name)
            if curve is None:
                if len(self._curves) >= self.max_names:
                    self.refused_accesses += 1
                    return None
                curve = self._curves[name] = MissRatioCurve(self.max_keys, self.sample_rate, max_parts=0)
            return curve

    def access(self, name: str, key: str, size: int, now: float | None = None) -> bool:
        """Record a read in ``name``'s curve; False when the book is full and ``name`` is new."""
        return self.access_all((name,), key, size, now) == 1

    def access_all(self, names: Iterable[str], key: str, size: int, now: float | None = None) -> int:
        """Record one read in several curves (its bucket's and its tenant's), hashing the key once.
        Give a key unique across the names' scope (e.g. "bucket/key" for a tenant). Returns how
        many curves took it."""
        return self.access_hash_all(names, key_hash(key), size, time.time() if now is None else now)

    def access_hash_all(self, names: Iterable[str], h: int, size: int, now: float) -> int:
        """``access_all`` with the key hashed (``key_hash``) and the time read by the caller."""
        taken = 0
        for name in names:
            curve = self._curves.get(name) or self._curve_for(name)  # the lock only for a new name
            if curve is not None:
                curve.access_hash(h, size, now)
                taken += 1
        return taken

    def get(self, name: str) -> MissRatioCurve | None:
        with self._lock:
            return self._curves.get(name)

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._curves)

    def forget(self, name: str) -> bool:
        with self._lock:
            return self._curves.pop(name, None) is not None

    def snapshot(self, budget: int | None = None, now: float | None = None) -> dict[str, Any]:
        """Every curve's snapshot (points around ``budget`` when given), JSON-ready."""
        with self._lock:
            curves = sorted(self._curves.items())
            refused = self.refused_accesses
        return {
            "max_names": self.max_names,
            "refused_accesses": refused,
            "curves": {name: curve.snapshot(budget, now) for name, curve in curves},
        }
