"""Whole-object cache policies side by side on generated traces (issue 28: datasets at GPU speed).

    .venv/bin/python -m bench.cachesim                       # the tables, plain text
    .venv/bin/python -m bench.cachesim --markdown --seed 7   # markdown, another seed
    .venv/bin/python -m bench.cachesim --objects 2000 --epochs 4 --accesses 10000 --fractions 0.5
    .venv/bin/python -m bench.cachesim --costs               # also CPU per access (timeit)

Ferry's read cache evicts whole objects by LRU. A training epoch reads every sample once in a
fresh order (or shards in key order), and under LRU a cache holding a fraction r of the dataset
hits about r²/2 of an epoch (0 in key order). The requirement for a new default: epochs over a
dataset larger than the cache hit at least 0.9 r from epoch 2 on, shuffled or in key order, while
Zipf and a one-off scan over a working set lose at most 2 points of hit ratio to LRU.

Policies (capacities in bytes, objects of any size; a miss that is not admitted is read through):

- ``lru``: Ferry today.
- ``w-tinylfu``: Caffeine's design: a 1 % window LRU, then a main SLRU (20 % probation, 80 %
  protected); a window victim enters the main space only if the sketch counts it more often than
  each probation victim it would push out (every access is recorded first, as Caffeine does).
- ``tinylfu``: one LRU behind TinyLFU admission, in Caffeine's order: record the access, then
  compare the miss with the LRU-end entries it would push out.
- ``tinylfu-prior``: the same, but the miss is compared *before* its access is recorded, so both
  sides' counts are their histories. In an epoch the miss and the unread entry it would replace
  were both read once per epoch: a tie, refused, and the cache keeps a fixed part. (Recording
  first puts the miss one ahead of every entry not yet read in this epoch: ``tinylfu`` and
  ``w-tinylfu`` churn.)
- ``tinylfu-prior+1`` (the recommended default): ``tinylfu-prior`` admitting a miss only when its
  count beats each victim's by 2 or more. The sketch's errors are off-by-ones (a collision in
  every row; an aging that halves the keys an epoch has read and spares those it has yet to
  read), and each such false admission evicts an entry the epoch was about to read.
- ``keep``: "keep what you have": a miss is not cached when that would push out an entry read
  within the current scan, taken as the last ``KEEP_HORIZON`` x (entries cached) requests.
- ``gw-budget`` and ``gw-lowwater``: the default's rule fitted to Ferry's eviction as it is (one
  LRU-end victim compared; an admitted overflow evicts by LRU down to the 95 % low-water mark),
  gating the fills above the budget or above the low-water mark. The evictions no comparison
  chose cost an epoch's hits: ``gw-lowwater`` keeps 0.95 r, ``gw-budget`` (whose freed room is
  refilled ungated) falls far below 0.9 r for a dataset 10 x the cache (the sizing table).
- ``tinylfu-stale`` (the sizing table only): the default plus a recency override, a victim older
  than 1.5 x the longest reuse a hit has shown lately is evicted whatever its count.

Every trace is generated here from ``--seed`` (same seed, same tables). Hit ratio is per request;
the mixed-size traces also give the byte hit ratio (remote bytes saved; r is a share of bytes, so
this is the ratio the 0.9 r requirement is checked on for them). For epoch traces the cache is r
of the dataset's bytes; for Zipf r of the bytes of the keys read; for the scan trace r of the
working set's (the scan's keys are read once and never again).
"""

from __future__ import annotations

import argparse
import bisect
import random
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol

from app.domain.frequency import FrequencySketch

WINDOW_SHARE = 0.01  # W-TinyLFU: the window's share of the capacity
PROTECTED_SHARE = 0.8  # W-TinyLFU: the protected segment's share of the main space
KEEP_HORIZON = 4  # keep: "the current scan" is the last 4 x (entries cached) requests
LOW_WATER = 0.95  # gw-*: Ferry's eviction frees down to 95 % of the budget
STALE_MULT = 1.5  # tinylfu-stale: a victim older than 1.5 x the longest recent hit reuse is dead
STALE_FLOOR = 4  # tinylfu-stale: ... and older than 4 x (entries cached) requests
# The sketch is sized for 4 x the entries the cache can hold (16 bytes an entry before the width
# is rounded up to a power of two); the sizing table shows what more and less do.
SKETCH_FACTOR = 4
DEFAULT_POLICY = "tinylfu-prior+1"
DEFAULT_MARGIN = 1  # the default admits a miss read at least 2 times more than each victim
FRACTIONS = (0.25, 0.5, 0.75)
KiB = 1024


# --- policies ---------------------------------------------------------------------------------------


class LRU:
    """Ferry today: every miss is cached, the least recently used entries make room."""

    def __init__(self, capacity: int, entries: int) -> None:
        self.capacity = capacity
        self.used = 0
        self.cache: OrderedDict[str, int] = OrderedDict()

    def access(self, key: str, size: int) -> bool:
        cache = self.cache
        if key in cache:
            cache.move_to_end(key)
            return True
        if size <= self.capacity:
            cache[key] = size
            self.used += size
            while self.used > self.capacity:
                self.used -= cache.popitem(last=False)[1]
        return False


def _victims(cache: OrderedDict[str, int], need: int) -> list[str]:
    """The LRU-end keys whose bytes add up to ``need`` (all of them when they do not)."""
    out: list[str] = []
    freed = 0
    for key, size in cache.items():
        if freed >= need:
            break
        out.append(key)
        freed += size
    return out


class TinyLFU:
    """One LRU behind TinyLFU admission: a miss that needs room is cached only if the sketch
    counts it more often (by more than ``margin``) than every LRU-end entry it would push out (a
    tie refuses), and then exactly those are evicted. ``prior``: compare before recording the
    miss's own access, so both sides' counts are their history (``tinylfu-prior``); else record
    first (``tinylfu``)."""

    def __init__(self, capacity: int, entries: int, *, prior: bool = True, margin: int = 0,
                 sketch_factor: int = SKETCH_FACTOR, doorkeeper: bool = False, sample_size: int | None = None) -> None:
        self.capacity = capacity
        self.used = 0
        self.cache: OrderedDict[str, int] = OrderedDict()
        self.sketch = FrequencySketch(max(1, sketch_factor * entries), doorkeeper=doorkeeper, sample_size=sample_size)
        self.prior = prior
        self.margin = margin

    def access(self, key: str, size: int) -> bool:
        cache = self.cache
        if key in cache:
            cache.move_to_end(key)
            self.hit(key)
            return True
        if not self.prior:
            self.sketch.record(key)
        if self.used + size <= self.capacity or self.admit(key, size):
            cache[key] = size
            self.used += size
            self.filled(key)
        if self.prior:
            self.sketch.record(key)
        return False

    def hit(self, key: str) -> None:
        self.sketch.record(key)

    def filled(self, key: str) -> None:
        """A miss was cached (subclasses stamp it)."""

    def refuses(self, key: str, victim: str, estimate: int) -> bool:
        """Whether ``victim`` keeps its place against a candidate counted ``estimate``."""
        return estimate <= self.sketch.estimate(victim) + self.margin

    def admit(self, key: str, size: int) -> bool:
        if size > self.capacity:
            return False
        victims = _victims(self.cache, self.used + size - self.capacity)
        estimate = self.sketch.estimate(key)
        if any(self.refuses(key, v, estimate) for v in victims):
            return False
        for victim in victims:
            self.used -= self.cache.pop(victim)
            self.evicted(victim)
        return True

    def evicted(self, key: str) -> None:
        """An entry left to make room (subclasses forget its stamp)."""


class StaleTinyLFU(TinyLFU):
    """``tinylfu-prior+1``, except that a victim not read for longer than the reuse the cache has
    seen lately (``STALE_MULT`` x the oldest entry a hit found in this window or the last, at
    least ``STALE_FLOOR`` x entries requests) is pushed out whatever its count: a dataset that is
    no longer read stops blocking the next one."""

    def __init__(self, capacity: int, entries: int) -> None:
        super().__init__(capacity, entries, margin=DEFAULT_MARGIN)
        self.last: dict[str, int] = {}
        self.now = 0
        self.window = max(1, STALE_FLOOR * entries)
        self.window_end = self.window
        self.oldest_hit = [0, 0]  # this window's, the last window's

    def access(self, key: str, size: int) -> bool:
        self.now += 1
        if self.now >= self.window_end:
            self.oldest_hit = [0, self.oldest_hit[0]]
            self.window_end += self.window
        return super().access(key, size)

    def hit(self, key: str) -> None:
        self.oldest_hit[0] = max(self.oldest_hit[0], self.now - self.last[key])
        self.last[key] = self.now
        super().hit(key)

    def filled(self, key: str) -> None:
        self.last[key] = self.now

    def evicted(self, key: str) -> None:
        del self.last[key]

    def refuses(self, key: str, victim: str, estimate: int) -> bool:
        horizon = max(STALE_FLOOR * len(self.cache), STALE_MULT * max(self.oldest_hit))
        return self.now - self.last[victim] <= horizon and super().refuses(key, victim, estimate)


class GatewayBudget(TinyLFU):
    """``tinylfu-prior+1`` dropped into Ferry's fill path as it is: a fill that fits under the
    budget is never gated, one that does not is compared with the one LRU-end entry, and an
    admitted overflow starts Ferry's eviction by LRU down to the 95 % low-water mark
    (app/services/cache/eviction.py), whose room the next misses refill ungated."""

    def __init__(self, capacity: int, entries: int) -> None:
        super().__init__(capacity, entries, margin=DEFAULT_MARGIN)

    def admit(self, key: str, size: int) -> bool:
        if size > self.capacity or not self.cache or not self.sketch.admit(key, next(iter(self.cache)), self.margin):
            return False
        while self.cache and self.used > int(self.capacity * LOW_WATER) - size:
            self.used -= self.cache.popitem(last=False)[1]
        return True


class GatewayLowWater(TinyLFU):
    """As ``gw-budget``, but every fill above the low-water mark is gated (against the one
    LRU-end entry) and an admitted fill that overflows the budget evicts down to the mark: the
    band between mark and budget only takes admitted entries."""

    def __init__(self, capacity: int, entries: int) -> None:
        super().__init__(capacity, entries, margin=DEFAULT_MARGIN)

    def access(self, key: str, size: int) -> bool:
        cache = self.cache
        if key in cache:
            cache.move_to_end(key)
            self.sketch.record(key)
            return True
        low = int(self.capacity * LOW_WATER)
        if size <= self.capacity and (self.used + size <= low or
                                      (bool(cache) and self.sketch.admit(key, next(iter(cache)), self.margin))):
            cache[key] = size
            self.used += size
            if self.used > self.capacity:
                while cache and self.used > low:
                    self.used -= cache.popitem(last=False)[1]
        self.sketch.record(key)
        return False


class Keep:
    """Keep what you have: a miss is cached only if every entry it would push out was last read
    more than ``KEEP_HORIZON`` x (entries cached) requests ago, i.e. before the current scan."""

    def __init__(self, capacity: int, entries: int, *, horizon: float = KEEP_HORIZON) -> None:
        self.capacity = capacity
        self.used = 0
        self.cache: OrderedDict[str, int] = OrderedDict()
        self.last: dict[str, int] = {}
        self.horizon = horizon
        self.now = 0

    def access(self, key: str, size: int) -> bool:
        self.now += 1
        cache = self.cache
        if key in cache:
            cache.move_to_end(key)
            self.last[key] = self.now
            return True
        if size > self.capacity:
            return False
        victims = _victims(cache, self.used + size - self.capacity)
        since = self.now - self.horizon * len(cache)
        if any(self.last[v] > since for v in victims):
            return False
        for victim in victims:
            self.used -= cache.pop(victim)
            del self.last[victim]
        cache[key] = size
        self.used += size
        self.last[key] = self.now
        return False


class WTinyLFU:
    """Caffeine's W-TinyLFU (without its hill climber and random admission of warm candidates):
    window LRU, then TinyLFU admission into a segmented LRU."""

    def __init__(self, capacity: int, entries: int, *, sketch_factor: int = SKETCH_FACTOR) -> None:
        self.window_cap = max(1, int(capacity * WINDOW_SHARE))
        self.main_cap = capacity - self.window_cap
        self.protected_cap = int(self.main_cap * PROTECTED_SHARE)
        self.window: OrderedDict[str, int] = OrderedDict()
        self.probation: OrderedDict[str, int] = OrderedDict()
        self.protected: OrderedDict[str, int] = OrderedDict()
        self.window_used = self.main_used = self.protected_used = 0
        self.sketch = FrequencySketch(max(1, sketch_factor * entries))

    def access(self, key: str, size: int) -> bool:
        self.sketch.record(key)
        if key in self.window:
            self.window.move_to_end(key)
            return True
        if key in self.protected:
            self.protected.move_to_end(key)
            return True
        if key in self.probation:
            self.protected[key] = self.probation.pop(key)
            self.protected_used += size
            while self.protected_used > self.protected_cap:  # demoted: back to probation's MRU end
                demoted, dsize = self.protected.popitem(last=False)
                self.protected_used -= dsize
                self.probation[demoted] = dsize
            return True
        if size > self.window_cap + self.main_cap:
            return False
        self.window[key] = size
        self.window_used += size
        while self.window_used > self.window_cap:
            candidate, csize = self.window.popitem(last=False)
            self.window_used -= csize
            self._to_main(candidate, csize)
        return False

    def _to_main(self, candidate: str, size: int) -> None:
        if size > self.main_cap:
            return
        while self.main_used + size > self.main_cap:
            segment = self.probation or self.protected
            victim, vsize = next(iter(segment.items()))
            if not self.sketch.admit(candidate, victim):
                return
            del segment[victim]
            self.main_used -= vsize
            if segment is self.protected:
                self.protected_used -= vsize
        self.probation[candidate] = size
        self.main_used += size


class Policy(Protocol):
    def access(self, key: str, size: int) -> bool: ...


PolicyFactory = Callable[[int, int], Policy]  # (capacity bytes, expected entries) -> policy
POLICIES: dict[str, PolicyFactory] = {
    "lru": LRU,
    "w-tinylfu": WTinyLFU,
    "tinylfu": partial(TinyLFU, prior=False),
    "tinylfu-prior": TinyLFU,
    "tinylfu-prior+1": partial(TinyLFU, margin=DEFAULT_MARGIN),
    "keep": Keep,
    "gw-budget": GatewayBudget,
    "gw-lowwater": GatewayLowWater,
}


# --- traces -----------------------------------------------------------------------------------------


@dataclass
class Segment:
    """A reported part of a trace: an epoch, or the whole trace."""

    label: str
    start: int
    end: int
    epoch: bool = False  # an epoch from the second on of a dataset larger than the cache: checked against 0.9 r


@dataclass
class Trace:
    name: str
    title: str
    keys: list[str]
    sizes: dict[str, int]
    basis_bytes: int  # the cache holds r x these bytes
    segments: list[Segment]
    epochs: bool = False  # report each segment's hit ratio as a multiple of r
    mixed: bool = False  # sizes differ: report the byte hit ratio too
    entries_basis: int = 0  # objects in the basis (the cache's expected entries are r x these)
    meta: dict[str, str] = field(default_factory=dict)


def _rng(seed: int, name: str) -> random.Random:
    return random.Random(f"{seed}:{name}")


def _mixed_sizes(rng: random.Random, keys: Iterable[str]) -> dict[str, int]:
    """Lognormal object sizes, median 512 KiB, clipped to 16 KiB .. 32 MiB (a few large shards
    among many samples)."""
    return {k: min(32 * 1024 * KiB, max(16 * KiB, int(rng.lognormvariate(0.0, 1.2) * 512 * KiB))) for k in keys}


def _epoch_trace(name: str, title: str, datasets: Sequence[tuple[str, list[str], int]], sizes: dict[str, int],
                 rng: random.Random, shuffle: bool, mixed: bool = False) -> Trace:
    """Epochs over one or more datasets in turn: (label, keys, epochs) each, a fresh permutation
    per epoch when ``shuffle``, else key order. Epochs after each dataset's first are checked."""
    keys: list[str] = []
    segments: list[Segment] = []
    for label, dataset, epochs in datasets:
        for e in range(1, epochs + 1):
            order = list(dataset)
            if shuffle:
                rng.shuffle(order)
            segments.append(Segment(f"{label}{e}", len(keys), len(keys) + len(order), epoch=e >= 2))
            keys.extend(order)
    basis = datasets[-1][1]
    return Trace(name, title, keys, sizes, sum(sizes[k] for k in basis), segments, epochs=True, mixed=mixed,
                 entries_basis=len(basis))


def _zipf(rng: random.Random, keys: list[str], s: float, n: int) -> list[str]:
    """``n`` draws from ``keys`` with P(rank i) ∝ 1 / i^s, ranks shuffled over the keys."""
    ranked = list(keys)
    rng.shuffle(ranked)
    cum: list[float] = []
    total = 0.0
    for i in range(1, len(ranked) + 1):
        total += 1.0 / i**s
        cum.append(total)
    return [ranked[min(len(ranked) - 1, bisect.bisect_left(cum, rng.random() * total))] for _ in range(n)]


@dataclass
class Params:
    seed: int = 1
    objects: int = 4000  # objects per epoch dataset
    epochs: int = 4
    keys: int = 10000  # Zipf key universe
    accesses: int = 20000  # Zipf and scan trace lengths
    zipf_s: float = 1.0
    working_set: int = 2000  # scan trace: hot keys
    scan: int = 6000  # scan trace: keys read once, in one run
    object_bytes: int = 256 * KiB  # size of every object in the equal-size traces


def _epoch_traces(p: Params) -> list[Trace]:
    names = [f"train/sample-{i:06d}" for i in range(p.objects)]
    equal = dict.fromkeys(names, p.object_bytes)
    mixed = _mixed_sizes(_rng(p.seed, "sizes"), names)
    other = [f"eval/sample-{i:06d}" for i in range(p.objects)]
    both = {**equal, **dict.fromkeys(other, p.object_bytes)}
    first, then = max(2, p.epochs - 1), p.epochs + 2
    return [
        _epoch_trace("shuffled", f"shuffled epochs: {p.objects} objects x {p.epochs} epochs, a new permutation each",
                     [("e", names, p.epochs)], equal, _rng(p.seed, "shuffled"), shuffle=True),
        _epoch_trace("key-order", f"key-order epochs: {p.objects} objects x {p.epochs} epochs, sorted keys",
                     [("e", names, p.epochs)], equal, _rng(p.seed, "key-order"), shuffle=False),
        _epoch_trace("mixed-epochs", f"shuffled epochs, mixed sizes (lognormal, median 512 KiB): {p.objects} objects"
                     f" x {p.epochs} epochs", [("e", names, p.epochs)], mixed, _rng(p.seed, "mixed"),
                     shuffle=True, mixed=True),
        _epoch_trace("switch", f"dataset switch: {first} shuffled epochs of A, then {then} of B (B's size, not"
                     " checked)", [("A", names, first), ("B", other, then)], both, _rng(p.seed, "switch"),
                     shuffle=True),
    ]


def _zipf_traces(p: Params) -> list[Trace]:
    universe = [f"obj/{i:06d}" for i in range(p.keys)]
    equal = dict.fromkeys(universe, p.object_bytes)
    whole = [Segment("all", 0, p.accesses)]
    hot = [f"hot/{i:05d}" for i in range(p.working_set)]
    scan = [f"scan/{i:06d}" for i in range(p.scan)]
    rng = _rng(p.seed, "scan")
    reads = _zipf(rng, hot, 0.9, p.accesses)
    at = int(p.accesses * 0.4)
    scan_keys = reads[:at] + scan + reads[at:]
    mixed = _mixed_sizes(_rng(p.seed, "zipf-mixed-sizes"), universe)
    # popularity moves: the second half draws from another ranking of the same keys
    shift = _zipf(_rng(p.seed, "shift1"), universe, p.zipf_s, p.accesses // 2) + \
        _zipf(_rng(p.seed, "shift2"), universe, p.zipf_s, p.accesses - p.accesses // 2)
    return [
        Trace("zipf", f"Zipf s={p.zipf_s}: {p.accesses} reads over {p.keys} keys", _zipf(_rng(p.seed, "zipf"), universe,
              p.zipf_s, p.accesses), equal, p.keys * p.object_bytes, whole, entries_basis=p.keys),
        Trace("zipf-0.8", f"Zipf s=0.8: {p.accesses} reads over {p.keys} keys", _zipf(_rng(p.seed, "zipf08"), universe,
              0.8, p.accesses), equal, p.keys * p.object_bytes, whole, entries_basis=p.keys),
        Trace("scan", f"one-off scan: Zipf s=0.9 over a {p.working_set}-key working set, {p.accesses} reads, a scan of"
              f" {p.scan} new keys after 40 % (r of the working set)", scan_keys,
              {**dict.fromkeys(hot, p.object_bytes), **dict.fromkeys(scan, p.object_bytes)},
              p.working_set * p.object_bytes, [Segment("all", 0, len(scan_keys))], entries_basis=p.working_set),
        Trace("zipf-mixed", f"Zipf s={p.zipf_s}, mixed sizes: {p.accesses} reads over {p.keys} keys",
              _zipf(_rng(p.seed, "zipf-mixed"), universe, p.zipf_s, p.accesses), mixed, sum(mixed.values()), whole,
              mixed=True, entries_basis=p.keys),
        Trace("zipf-shift", f"Zipf s={p.zipf_s}, popularity reshuffled halfway: {p.accesses} reads over {p.keys} keys",
              shift, equal, p.keys * p.object_bytes, [Segment("all", 0, p.accesses),
                                                      Segment("2nd half", p.accesses // 2, p.accesses)],
              entries_basis=p.keys),
    ]


def _footprint(t: Trace) -> Trace:
    """A Zipf trace's cache is r of the keys it reads, not of its universe (most of which it never reads)."""
    seen = set(t.keys)
    t.basis_bytes, t.entries_basis = sum(t.sizes[k] for k in seen), len(seen)
    return t


def traces(p: Params) -> list[Trace]:
    """Every trace, generated from ``p.seed``."""
    return _epoch_traces(p) + [t if t.name == "scan" else _footprint(t) for t in _zipf_traces(p)]


# --- running ----------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """Hit ratios of one policy on one trace at one fraction, per segment."""

    hits: list[float]
    byte_hits: list[float]


def simulate(trace: Trace, fraction: float, make: PolicyFactory) -> Outcome:
    """Run ``trace`` through a cache of ``fraction`` x its basis bytes."""
    capacity = int(trace.basis_bytes * fraction)
    policy = make(capacity, max(1, int(trace.entries_basis * fraction)))
    access, sizes, keys = policy.access, trace.sizes, trace.keys
    hit = bytearray(len(keys))
    for i, key in enumerate(keys):
        if access(key, sizes[key]):
            hit[i] = 1
    hits: list[float] = []
    byte_hits: list[float] = []
    for seg in trace.segments:
        span = range(seg.start, seg.end)
        hits.append(sum(hit[seg.start:seg.end]) / max(1, len(span)))
        total = sum(sizes[keys[i]] for i in span)
        byte_hits.append(sum(sizes[keys[i]] for i in span if hit[i]) / max(1, total))
    return Outcome(hits, byte_hits)


Results = dict[tuple[str, float, str], Outcome]  # (trace, fraction, policy)


def run_all(all_traces: list[Trace], fractions: Sequence[float], policies: Sequence[str]) -> Results:
    return {(t.name, r, name): simulate(t, r, POLICIES[name]) for t in all_traces for r in fractions for name in policies}


# --- checks and tables ------------------------------------------------------------------------------

EPOCH_CHECKED = ("shuffled", "key-order")  # the requirement: hit ratio >= 0.9 r from epoch 2
BYTES_CHECKED = ("mixed-epochs",)  # the same on the byte hit ratio (r is a share of the bytes)
LRU_CHECKED = ("zipf", "scan")  # the requirement: at most 2 points below LRU
LRU_ALSO = ("zipf-0.8", "zipf-mixed", "zipf-shift")  # reported, not required


def epoch_floor(results: Results, all_traces: list[Trace], policy: str, names: Sequence[str],
                byte: bool = False, fractions: Sequence[float] | None = None) -> tuple[float, str]:
    """The lowest hit ratio / r over the checked epochs of ``names``, and where it was."""
    worst = (float("inf"), "")
    for t in all_traces:
        if t.name not in names:
            continue
        for (name, r, p), out in results.items():
            if name != t.name or p != policy or (fractions is not None and r not in fractions):
                continue
            for seg, h in zip(t.segments, out.byte_hits if byte else out.hits, strict=True):
                if seg.epoch and h / r < worst[0]:
                    worst = (h / r, f"{t.name} r={r} {seg.label}")
    return worst


def requirement_floor(results: Results, all_traces: list[Trace], policy: str,
                      fractions: Sequence[float] | None = None) -> tuple[float, str]:
    """The worst epoch, as a multiple of r: hit ratio of the equal-size traces, byte hit ratio of
    the mixed-size one."""
    return min(epoch_floor(results, all_traces, policy, EPOCH_CHECKED, fractions=fractions),
               epoch_floor(results, all_traces, policy, BYTES_CHECKED, byte=True, fractions=fractions))


def lru_loss(results: Results, policy: str, names: Sequence[str], fractions: Sequence[float] | None = None,
             part: int = 0) -> tuple[float, str]:
    """The largest loss to LRU, in points of hit ratio, over part ``part`` (0: the whole) of each
    trace of ``names``."""
    worst = (-float("inf"), "")
    for (name, r, p), out in results.items():
        if name in names and p == policy and (name, r, "lru") in results and (fractions is None or r in fractions):
            loss = 100 * (results[name, r, "lru"].hits[part] - out.hits[part])
            if loss > worst[0]:
                worst = (loss, f"{name} r={r}")
    return worst


def meets(results: Results, all_traces: list[Trace], policy: str) -> bool:
    """Issue 28's requirement for a default policy."""
    return requirement_floor(results, all_traces, policy)[0] >= 0.9 and lru_loss(results, policy, LRU_CHECKED)[0] <= 2.0


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
    return "\n".join("  ".join(x.ljust(w) for x, w in zip(row, widths, strict=True)) for row in [head, *rows])


def _trace_rows(t: Trace, results: Results, fractions: Sequence[float], policies: Sequence[str],
                byte: bool) -> list[list[str]]:
    rows = []
    for r in fractions:
        shown = t.segments[1:] if t.epochs else t.segments
        for i, seg in enumerate(shown, start=len(t.segments) - len(shown)):
            row = [f"{r:g}", seg.label]
            base = results.get((t.name, r, "lru"))
            for p in policies:
                h = (results[t.name, r, p].byte_hits if byte else results[t.name, r, p].hits)[i]
                if t.epochs:
                    row.append(f"{h:.3f} ({h / r:.2f}r)")
                elif base is not None and p != "lru":
                    row.append(f"{h:.3f} ({100 * (h - (base.byte_hits if byte else base.hits)[i]):+.1f})")
                else:
                    row.append(f"{h:.3f}")
            rows.append(row)
    return rows


def render(all_traces: list[Trace], results: Results, fractions: Sequence[float], policies: Sequence[str],
           markdown: bool) -> str:
    """Per trace a table of hit ratios (epoch traces: as a multiple of r; others: points against
    LRU in brackets), then the requirement summary."""
    out: list[str] = []
    for t in all_traces:
        for byte in (False, True) if t.mixed else (False,):
            what = "byte hit ratio" if byte else "hit ratio"
            out.append(_heading(f"{t.title} - {what}", markdown))
            seg = "epoch" if t.epochs else "part"
            out.append(_table(["r", seg, *policies], _trace_rows(t, results, fractions, policies, byte), markdown))
            out.append("")
    out.append(_heading("the requirement: >= 0.9 r per epoch from epoch 2 (equal sizes: hit ratio; mixed sizes: byte hit"
                        " ratio), <= 2 points below LRU on Zipf and scan", markdown))
    rows = []
    for p in policies:
        floor, at = epoch_floor(results, all_traces, p, EPOCH_CHECKED)
        bfloor, bat = epoch_floor(results, all_traces, p, BYTES_CHECKED, byte=True)
        mfloor, _ = epoch_floor(results, all_traces, p, BYTES_CHECKED)
        loss, lat = lru_loss(results, p, LRU_CHECKED)
        also, aat = lru_loss(results, p, LRU_ALSO)
        rows.append([p, f"{floor:.2f}r ({at})", f"{bfloor:.2f}r ({bat})", f"{mfloor:.2f}r", f"{loss:+.1f} ({lat})",
                     f"{also:+.1f} ({aat})", "yes" if meets(results, all_traces, p) else "no"])
    out.append(_table(["policy", "worst epoch hit/r", "worst epoch byte hit/r, mixed", "(its hit/r)",
                       "worst loss to LRU, pts", "also Zipf 0.8/mixed/shift, pts", "meets it"], rows, markdown))
    return "\n".join(out) + "\n"


def _heading(text: str, markdown: bool) -> str:
    return f"### {text}\n" if markdown else f"{text}\n"


def _variants() -> dict[str, PolicyFactory]:
    """The two rules with their sketch sized and aged otherwise, ``gw-budget`` and the stale override."""
    out: dict[str, PolicyFactory] = {}
    for factor in (4, 16, 32):
        out[f"tinylfu-prior, {factor}x"] = partial(TinyLFU, sketch_factor=factor)
    for factor in (1, 4):
        out[f"{DEFAULT_POLICY}, {factor}x"] = partial(TinyLFU, margin=DEFAULT_MARGIN, sketch_factor=factor)
    out[f"{DEFAULT_POLICY}, {SKETCH_FACTOR}x + doorkeeper"] = partial(TinyLFU, margin=DEFAULT_MARGIN, doorkeeper=True)

    def caffeine_aging(capacity: int, entries: int) -> Policy:
        return TinyLFU(capacity, entries, margin=DEFAULT_MARGIN, sample_size=10 * max(1, entries))

    out[f"{DEFAULT_POLICY}, {SKETCH_FACTOR}x, aged every 10 x entries"] = caffeine_aging
    out["gw-budget"] = GatewayBudget
    out["tinylfu-stale"] = StaleTinyLFU
    return out


SIZING_TRACES = ("shuffled", "key-order", "mixed-epochs", "switch", "zipf", "scan", "zipf-shift")


def sensitivity(p: Params, markdown: bool) -> str:
    """The sketch's size and aging, at r = 0.25 and 0.1 (a dataset 4 and 10 x the cache: the
    counts of 4 and 10 x the cache's entries to tell apart). Bytes per entry: the sketch's memory
    over the cache's entries at r = 0.25 (the width is rounded up to a power of two)."""
    chosen = [t for t in traces(p) if t.name in SIZING_TRACES]
    entries = max(1, int(p.objects * 0.25))
    runs = [(t, r) for t in chosen for r in (0.1, 0.25) if r == 0.25 or t.name not in ("switch", "zipf-shift")]
    res: Results = {(t.name, r, "lru"): simulate(t, r, LRU) for t, r in runs}
    rows = []
    for label, make in _variants().items():
        res.update({(t.name, r, label): simulate(t, r, make) for t, r in runs})
        sketch = getattr(make(p.objects * p.object_bytes, entries), "sketch", None)
        memory = f"{sketch.memory_bytes / entries:.0f}" if isinstance(sketch, FrequencySketch) else "-"
        quarter, quarter_at = requirement_floor(res, chosen, label, fractions=(0.25,))
        tenth, tenth_at = requirement_floor(res, chosen, label, fractions=(0.1,))
        loss, lat = lru_loss(res, label, LRU_CHECKED)
        shift, _ = lru_loss(res, label, ("zipf-shift",), fractions=(0.25,))
        switch = res["switch", 0.25, label].hits
        first_b = next(i for i, seg in enumerate(next(t for t in chosen if t.name == "switch").segments)
                       if seg.label.startswith("B"))
        rows.append([label, memory, f"{quarter:.2f}r ({quarter_at})", f"{tenth:.2f}r ({tenth_at})",
                     f"{loss:+.1f} ({lat})", f"{shift:+.1f}", " ".join(f"{h / 0.25:.2f}" for h in switch[first_b + 1:])])
    head = ["variant", "sketch B/entry", "worst epoch /r, r=0.25", "worst epoch /r, r=0.1", "Zipf+scan loss to LRU, pts",
            "zipf-shift loss, r=0.25", "switch B2.. hit/r, r=0.25"]
    return _heading("sketch sizing and aging of the two rules, gw-budget and the stale override (r = 0.1 and 0.25)",
                    markdown) + "\n" + _table(head, rows, markdown) + "\n"


def costs(p: Params) -> str:
    """CPU per access, timed: the sketch's operations and each policy on the Zipf trace."""
    import timeit

    keys = [f"datasets/imagenet/train/shard-{i:06d}.tar" for i in range(20000)]
    lines = []
    for door in (False, True):
        sketch = FrequencySketch(SKETCH_FACTOR * 5000, doorkeeper=door)
        for k in keys:
            sketch.record(k)
        for stmt in ("sketch.record(k)", "sketch.estimate(k)", "sketch.admit(k, v)"):
            n = 50000
            best = min(timeit.repeat(stmt, globals={"sketch": sketch, "k": keys[7], "v": keys[9]}, number=n, repeat=5))
            lines.append(f"  {stmt:<22}{' (doorkeeper)' if door else '':<13} {best / n * 1e6:.2f} µs")
    zipf = next(t for t in traces(p) if t.name == "zipf")
    for name, make in POLICIES.items():
        best = min(timeit.repeat(partial(simulate, zipf, 0.25, make), number=1, repeat=3))
        lines.append(f"  {name:<35} {best / len(zipf.keys) * 1e6:.2f} µs per access (Zipf, r=0.25, with the loop)")
    return "CPU, best of repeats:\n" + "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.cachesim", description=__doc__.split("\n\n")[0])
    d = Params()
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--objects", type=int, default=d.objects, help="objects per epoch dataset")
    ap.add_argument("--epochs", type=int, default=d.epochs)
    ap.add_argument("--keys", type=int, default=d.keys, help="Zipf key universe")
    ap.add_argument("--accesses", type=int, default=d.accesses, help="reads per Zipf or scan trace")
    ap.add_argument("--zipf-s", type=float, default=d.zipf_s)
    ap.add_argument("--object-bytes", type=int, default=d.object_bytes, help="size of each object of the equal-size traces")
    ap.add_argument("--working-set", type=int, default=d.working_set, help="scan trace: hot keys")
    ap.add_argument("--scan", type=int, default=d.scan, help="scan trace: keys read once")
    ap.add_argument("--fractions", default=",".join(f"{r:g}" for r in FRACTIONS), help="cache sizes, as fractions")
    ap.add_argument("--policies", default=",".join(POLICIES), help=f"of: {', '.join(POLICIES)}")
    ap.add_argument("--markdown", action="store_true", help="markdown tables")
    ap.add_argument("--no-sensitivity", action="store_true", help="leave out the sketch sizing table")
    ap.add_argument("--costs", action="store_true", help="also time the sketch and the policies (timeit)")
    a = ap.parse_args(argv)
    p = Params(a.seed, a.objects, a.epochs, a.keys, a.accesses, a.zipf_s, a.working_set, a.scan, a.object_bytes)
    fractions = [float(x) for x in a.fractions.split(",")]
    policies = [x for x in a.policies.split(",") if x]
    if unknown := [x for x in policies if x not in POLICIES]:
        ap.error(f"unknown policies: {', '.join(unknown)}")
    if "lru" not in policies:
        policies.insert(0, "lru")
    started = time.perf_counter()
    all_traces = traces(p)
    results = run_all(all_traces, fractions, policies)
    sys.stdout.write(render(all_traces, results, fractions, policies, a.markdown))
    if not a.no_sensitivity:
        sys.stdout.write("\n" + sensitivity(p, a.markdown))
    accesses = sum(len(t.keys) for t in all_traces) * len(fractions) * len(policies)
    sys.stdout.write(f"\nseed {p.seed}; {accesses} simulated accesses in the policy tables; {time.perf_counter() - started:.1f} s"
                     f" in all; recommended default: {DEFAULT_POLICY}\n")
    if a.costs:
        sys.stdout.write("\n" + costs(p))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
