"""The sample behind a miss-ratio curve (app/domain/sizing.py): stable key hashes, size classes,
the log-linear buckets of byte stack distances and what a histogram of them says at a budget, and
one size class's sampled keys in read order (``Stratum``: a Fenwick tree of their sizes).

A key is sampled when its 64-bit hash is below its size class's threshold (fixed-size SHARDS,
Waldspurger et al., FAST 2015); ``Stratum.evict_largest`` is the step that lowers a threshold.
The curve module owns the recording and the answers; this one owns the data structures.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Iterable
from itertools import accumulate

HASH_SPACE = 1 << 64
_SUB_BITS = 4
_SUB = 1 << _SUB_BITS  # 16 buckets per power of two: a bucket spans at most 1/16 (6.25%) of its distance
BUCKETS = 61 * _SUB  # distances up to 2**64 bytes; beyond, the last bucket
CLASS_BITS = 4  # size classes 16x wide
CLASSES = 11  # the last one: 1 TiB and more
MINUTE = 60
HOUR = 3600
DAY = 86400
_RETAIN_MINUTES = DAY // MINUTE + 1  # a day-long window starting mid-minute spans 1441 minutes
_PRUNE_SLACK = 60  # prune a class's minute counts once an hour's worth of extra ones has piled up
MIN_CAPACITY = 64


def key_hash(key: str) -> int:
    """A stable 64-bit hash: the same keys are sampled in every process (Python's hash() is salted)."""
    return int.from_bytes(hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


def size_class(size: int) -> int:
    """The sampling stratum of an object size: 0-15 B, 16-255 B, ..., 64 KiB-1 MiB, 1-16 MiB, ..."""
    return min(size.bit_length() >> 2, CLASSES - 1)


def class_range(cls: int) -> tuple[int, int | None]:
    """(smallest, largest or None) object size of a size class."""
    return (0 if cls == 0 else 1 << (cls * CLASS_BITS),
            None if cls == CLASSES - 1 else (1 << ((cls + 1) * CLASS_BITS)) - 1)


def distance_bucket(distance: int) -> int:
    """The log-linear bucket of a distance: exact below 32, then 16 buckets per power of two."""
    if distance < 2 * _SUB:
        return distance
    shift = distance.bit_length() - _SUB_BITS - 1
    return min((shift << _SUB_BITS) + (distance >> shift), BUCKETS - 1)


def _bounds(index: int) -> tuple[int, int]:
    """[lower, upper) of the distances in a bucket."""
    if index < 2 * _SUB:
        return index, index + 1
    shift = (index >> _SUB_BITS) - 1
    mantissa = index - (shift << _SUB_BITS)
    return mantissa << shift, (mantissa + 1) << shift


LOWER, UPPER = zip(*(_bounds(i) for i in range(BUCKETS)), strict=True)


def hit_ratios(hist: list[float], cold: float, total: float, budgets: Iterable[int]) -> list[tuple[int, float]]:
    """(budget, hit ratio) of a histogram of reuse distances (estimated reads per bucket), ``cold``
    first reads and ``total`` reads: a read hits a cache of C bytes when its distance is at most C,
    spread evenly over the bucket C falls in. The reads the sample does not account for (``total``
    minus the histogram and the cold reads) count at the smallest distance (SHARDS_adj). One pass
    over the buckets, then O(1) a budget."""
    budgets = list(budgets)
    if total <= 0:
        return [(c, 0.0) for c in budgets]
    prefix = [0.0, *accumulate(hist)]  # prefix[i]: reads in buckets below i
    adj = total - (prefix[-1] + cold)
    out = []
    for c in budgets:
        if c < 0:
            out.append((c, 0.0))
            continue
        k = distance_bucket(c)
        lo, hi = LOWER[k], UPPER[k]
        hits = (adj if c > 0 else 0.0) + prefix[k]
        hits += hist[k] if hi - 1 <= c else hist[k] * (c - lo + 1) / (hi - lo)
        out.append((c, min(1.0, max(0.0, hits / total))))
    return out


class Stratum:
    """The sampled keys of one size class, at the class's own rate, ordered by last read.

    A Fenwick tree over local timestamps holds the size of the key last read at each; ``seqs``
    maps a local timestamp to the curve-wide read sequence number (rising), so "bytes read in this
    class since read #g" is a bisect plus a prefix sum (``MissRatioCurve._sample``, inlined there).
    Timestamps are renumbered when they run out.
    """

    __slots__ = ("capacity", "heap", "keys", "live_bytes", "minutes", "next_ts", "seqs", "slots", "threshold", "tree")

    def __init__(self, threshold: int) -> None:
        self.threshold = threshold  # sampled when hash < threshold
        self.keys: dict[int, list[int]] = {}  # hash -> [local timestamp, size, minute of the last read]
        self.heap: list[int] = []  # negated hashes of the tracked keys: the largest hash on top
        self.capacity = MIN_CAPACITY
        self.tree = [0] * (self.capacity + 1)
        self.slots = [-1] * (self.capacity + 1)  # the hash last read at a timestamp, -1 if read since
        self.seqs = [-1] * (self.capacity + 1)
        self.next_ts = 1
        self.live_bytes = 0  # what the tree holds: the tracked keys' sizes
        self.minutes: dict[int, int] = {}  # minute -> sizes of the tracked keys last read in it

    @property
    def weight(self) -> float:
        """How many keys of the class one sampled key stands for (1 / the sampling rate)."""
        return HASH_SPACE / self.threshold

    def add(self, i: int, delta: int) -> None:
        tree, n = self.tree, self.capacity
        while i <= n:
            tree[i] += delta
            i += i & -i

    def unlink(self, rec: list[int]) -> None:
        """Take a key's last read out of the tree and its minute."""
        ts, size, minute = rec
        self.add(ts, -size)
        self.slots[ts] = -1
        self.live_bytes -= size
        left = self.minutes.get(minute)
        if left is None:  # pruned: older than a day
            return
        if left > size:
            self.minutes[minute] = left - size
        else:
            del self.minutes[minute]

    def link(self, h: int, rec: list[int], size: int, minute: int, seq: int, newest_minute: int) -> None:
        """Put a key's new read at the next timestamp."""
        ts = self.next_ts
        if ts > self.capacity:
            ts = self.renumber()
        self.next_ts = ts + 1
        self.add(ts, size)
        self.slots[ts] = h
        self.seqs[ts] = seq
        self.live_bytes += size
        rec[0], rec[1], rec[2] = ts, size, minute
        minutes = self.minutes
        minutes[minute] = minutes.get(minute, 0) + size
        if len(minutes) > _RETAIN_MINUTES + _PRUNE_SLACK:
            cutoff = newest_minute - _RETAIN_MINUTES
            for m in [m for m in minutes if m <= cutoff]:
                del minutes[m]

    def track(self, h: int) -> list[int]:
        """A new key's record (filled in by ``link``)."""
        rec = [0, 0, 0]
        self.keys[h] = rec
        heapq.heappush(self.heap, -h)
        return rec

    def largest_hash(self) -> int:
        return -self.heap[0] if self.heap else -1

    def evict_largest(self) -> None:
        """Fixed-size SHARDS: drop the key with the largest hash and lower the rate to exclude it."""
        victim = -heapq.heappop(self.heap)
        self.unlink(self.keys.pop(victim))
        self.threshold = victim
        if self.capacity > max(MIN_CAPACITY, 8 * (len(self.keys) + 1)):  # drained by other classes: shrink
            self.next_ts = self.renumber()

    def renumber(self) -> int:
        """Renumber the tracked keys 1..n in read order into twice to four times their number of
        timestamps and rebuild the tree in O(capacity). Returns the next timestamp."""
        capacity = MIN_CAPACITY
        while 2 * (len(self.keys) + 1) > capacity:
            capacity *= 2
        values = [0] * (capacity + 1)
        slots = [-1] * (capacity + 1)
        seqs = [-1] * (capacity + 1)
        n = 0
        for ts in range(1, self.next_ts):
            h = self.slots[ts]
            if h >= 0:
                n += 1
                rec = self.keys[h]
                rec[0] = n
                values[n] = rec[1]
                slots[n] = h
                seqs[n] = self.seqs[ts]
        for i in range(1, capacity + 1):  # linear Fenwick build
            parent = i + (i & -i)
            if parent <= capacity:
                values[parent] += values[i]
        self.tree, self.slots, self.seqs, self.capacity = values, slots, seqs, capacity
        return n + 1

    def touched(self, first_minute: int, last_minute: int) -> float:
        """Estimated bytes of the class's distinct objects last read in [first, last] minute."""
        return sum(v for m, v in self.minutes.items() if first_minute <= m <= last_minute) * self.weight
