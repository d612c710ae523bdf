"""Sizing (issue 28): every object read the cache serves goes into this process's miss-ratio
curves (app/domain/sizing.py), next to what the cache measured on the same read, so the admin API
can answer "what would a bigger or smaller cache buy" and the gauges can compare expected with
actual.

Three kinds of curve, all fed by one hash of "bucket/key@etag" (a new version is a new object):

- the node's: every read, each attributed to its bucket and tenant (``parts``), so a bucket's
  prediction is its hit ratio in the cache it actually shares with the others;
- one per bucket and one per tenant (a ``SizingBook``, at most ``max_names``): each stream alone,
  for the question "what would a quota of C give this bucket";
- the measured side: reads and hits (hit or stale) per name, counted here on the same reads.

Per process: each serving worker keeps its own curves of the reads it served (uvicorn spreads
connections over workers), and curves of different processes cannot be merged (a reuse distance
needs the one ordered stream). With FERRY_WORKERS > 1 a worker's curve sees a share of the node's
reads and predicts for a cache that share had to itself: the answer says ``scope: process``.

What the model leaves out: a read the cache did not look up an entry for (second-hit admission's
first miss, a full disk, a discovery raced by a write) is not recorded; HEADs and staging warm-ups
are not reads; a ranged read counts as a read of the whole object (the cache keeps blocks).
``record`` runs on the event loop (the read path); the reading methods may run in threads.

Replayed in batches, as Caffeine records reads into a buffer and replays them against its policy:
``record`` appends the read (with its time) to a buffer, and the buffer is replayed into the curves
in order once ``BATCH`` reads wait or before anything reads the curves. A read pays a list append;
the curves' work runs in a tight loop, at about half its cost read by read, and the answers are the
same as if each read had been recorded at once.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Collection
from typing import Any

from app import metrics
from app.domain.sizing import DAY, HOUR, MissRatioCurve, SizingBook, key_hash, point_sizes

NODE = "node"
# The curves of a bucket or tenant alone start at this rate (the node's at 1): a read of a key
# they sample costs about 12 us a curve, one they skip about 1.5 us, and these two curves run on
# every read. The node's curve, which the predictions come from, is exact up to 8192 keys.
ALONE_RATE = 0.25
_NAMES_CACHE = 1024  # (bucket, tenant) -> curve names, formatted once
BATCH = 128  # reads buffered before they are replayed into the curves


def _ratio(counts: list[int] | None) -> float | None:
    return round(counts[1] / counts[0], 4) if counts and counts[0] else None


def _points(pairs: list[tuple[int, float]]) -> list[dict[str, Any]]:
    return [{"cache_bytes": c, "hit_ratio": round(h, 4)} for c, h in pairs]

log = logging.getLogger("ferry.cache")


class SizingRecorder:
    """This process's curves and measured counts, and the answers built from them."""

    def __init__(self, budget_bytes: int = 0, dirty_bytes: Callable[[], int] | None = None, *,
                 max_names: int = 32, max_keys: int = 2048, alone_rate: float = ALONE_RATE,
                 node_keys: int = 8192) -> None:
        self.budget_bytes = budget_bytes  # the node's cache budget (FERRY_CACHE_BYTES; 0: none)
        self.dirty_bytes = dirty_bytes or (lambda: 0)  # dirty bytes share that budget
        self.node = MissRatioCurve(node_keys, max_parts=2 * max_names)
        self.book = SizingBook(max_names, max_keys, alone_rate)
        self.started = time.time()
        self._measured: dict[str, list[int]] = {NODE: [0, 0]}  # name -> [reads, hits]
        self._failed = False
        self._names: dict[tuple[str, int | None], tuple[str, ...]] = {}
        self._last_hash: tuple[str, str, str, int] = ("", "", "", 0)  # the last object read, hashed
        self._pending: list[tuple[str, str, str, int, int | None, bool, float]] = []  # not yet replayed
        self._replaying = threading.Lock()  # one replay at a time: the curves see the reads in order

    # ---- the read path ------------------------------------------------------------------------
    def record(self, bucket: str, key: str, etag: str, size: int, tenant_id: int | None, hit: bool) -> None:
        """One object read the cache answered (``hit``: from the cache, fresh or stale), buffered;
        replayed with the others once ``BATCH`` wait. A figure never fails a read: an error here
        is logged once and the read goes on."""
        pending = self._pending
        pending.append((bucket, key, etag, size, tenant_id, hit, time.time()))
        if len(pending) >= BATCH:
            self.replay()

    def replay(self) -> None:
        """Record the buffered reads into the curves, in the order they were read (every reading
        method calls this first, so an answer counts every read recorded before it)."""
        with self._replaying:
            batch, self._pending = self._pending, []
            try:
                for read in batch:
                    self._record(*read)
            except Exception:
                if not self._failed:
                    self._failed = True
                    log.exception("sizing: recording a read failed (reads go on; the curves may be off)")

    def _record(self, bucket: str, key: str, etag: str, size: int, tenant_id: int | None, hit: bool,
                now: float) -> None:
        names = self._names.get((bucket, tenant_id))
        if names is None:
            names = (f"bucket:{bucket}",) if tenant_id is None else (f"bucket:{bucket}", f"tenant:{tenant_id}")
            if len(self._names) < _NAMES_CACHE:
                self._names[(bucket, tenant_id)] = names
        last = self._last_hash
        if last[0] == bucket and last[1] == key and last[2] == etag:  # the same object again
            h = last[3]
        else:
            h = key_hash(f"{bucket}/{key}@{etag}")
            self._last_hash = (bucket, key, etag, h)
        self.node.access_hash(h, size, now, names)
        self.book.access_hash_all(names, h, size, now)
        measured = self._measured
        node = measured[NODE]
        node[0] += 1
        node[1] += hit
        for name in names:
            counts = measured.get(name)
            if counts is None:
                if len(measured) > 2 * self.book.max_names:
                    continue
                counts = measured[name] = [0, 0]
            counts[0] += 1
            counts[1] += hit

    # ---- answers ------------------------------------------------------------------------------
    def centre(self) -> tuple[int, str]:
        """The size the points are around: the budget, or without one the estimated footprint."""
        self.replay()
        if self.budget_bytes > 0:
            return self.budget_bytes, "budget"
        return self.node.footprint_bytes(), "footprint"

    def effective_budget(self, dirty: int | None = None) -> tuple[int, int]:
        """(dirty bytes, what the budget leaves the read cache); ``dirty`` when the caller has it."""
        if dirty is None:
            try:
                dirty = int(self.dirty_bytes())
            except Exception:  # the catalog is away: predict at the whole budget
                dirty = 0
        return dirty, max(0, self.budget_bytes - dirty)

    def summary(self, dirty: int | None = None) -> dict[str, Any]:
        """The node's curve and figures only (the status page polls it, with the dirty bytes)."""
        self.replay()
        centre, basis = self.centre()
        dirty, effective = self.effective_budget(dirty)
        return {
            "scope": "process", "pid": os.getpid(), "since": self.started,
            "budget_bytes": self.budget_bytes, "centred_on": basis,
            "dirty_bytes": dirty, "effective_budget_bytes": effective,
            "points": self.node.points_around(centre) if centre > 0 else [],
            "predicted_hit_ratio": (round(self.node.curve([effective])[0][1], 4)
                                    if self.budget_bytes > 0 and self.node.accesses else None),
            "measured_hit_ratio": _ratio(self._measured[NODE]),
            "reads": self._measured[NODE][0],
        }

    def report(self, *, buckets: Collection[str] | None = None, tenant_id: int | None = None,
               now: float | None = None) -> dict[str, Any]:
        """The admin API's answer. ``buckets``: only these buckets (None: all); ``tenant_id``: a
        token bound to that tenant, which sees its own tenant's curve (its share of the node's
        cache) at the top instead of the node's, and no other tenant."""
        out = self.summary()
        centre = self.centre()[0]
        effective = out["effective_budget_bytes"]
        names = self.node.part_accesses()
        wanted_buckets = [n for n in sorted(names) if n.startswith("bucket:")
                          and (buckets is None or n[len("bucket:"):] in buckets)]
        wanted_tenants = [n for n in sorted(names) if n.startswith("tenant:")
                          and (tenant_id is None or n == f"tenant:{tenant_id}")]
        t = time.time() if now is None else now
        out["buckets"] = {n[len("bucket:"):]: self._entry(n, centre, effective, t) for n in wanted_buckets}
        out["tenants"] = {n[len("tenant:"):]: self._entry(n, centre, effective, t) for n in wanted_tenants}
        if tenant_id is not None:
            mine = out["tenants"].get(str(tenant_id))
            for node_wide in ("dirty_bytes", "effective_budget_bytes"):  # other tenants' writes
                out.pop(node_wide)
            out.update(scope="process, tenant", points=mine["points"] if mine else [],
                       predicted_hit_ratio=mine["predicted_hit_ratio"] if mine else None,
                       measured_hit_ratio=mine["measured_hit_ratio"] if mine else None,
                       reads=mine["reads"] if mine else 0,
                       touched_bytes=mine["touched_bytes"] if mine else {"hour": 0, "day": 0})
            return out
        out["touched_bytes"] = {"hour": self.node.touched_bytes(HOUR, t), "day": self.node.touched_bytes(DAY, t)}
        out["footprint_bytes"] = self.node.footprint_bytes()
        out["sample"] = {"tracked_keys": self.node.tracked_keys, "max_keys": self.node.max_keys,
                         "sample_rates": {str(k): v for k, v in self.node.sample_rates().items()},
                         "names": len(self.book.names()), "max_names": self.book.max_names,
                         "refused_reads": self.book.refused_accesses}
        return out

    def _entry(self, name: str, centre: int, effective: int, now: float) -> dict[str, Any]:
        """One bucket's or tenant's figures: its share of the node's cache at each size, and its
        own curve (a cache of that size to itself)."""
        sizes = point_sizes(centre) if centre > 0 else []
        shared = self.node.part_curve(name, [*sizes, effective])
        alone = self.book.get(name)
        entry: dict[str, Any] = {
            "reads": (self._measured.get(name) or [0, 0])[0],
            "measured_hit_ratio": _ratio(self._measured.get(name)),
            "predicted_hit_ratio": round(shared[-1][1], 4) if self.budget_bytes > 0 else None,
            "points": _points(shared[:-1]),
        }
        if alone is not None:
            entry["points_alone"] = alone.points_around(centre) if centre > 0 else []
            entry["touched_bytes"] = {"hour": alone.touched_bytes(HOUR, now), "day": alone.touched_bytes(DAY, now)}
            entry["footprint_bytes"] = alone.footprint_bytes()
        else:  # the book was full when this name came: the node's curve alone knows it
            entry.update(points_alone=None, touched_bytes={"hour": 0, "day": 0}, footprint_bytes=None)
        return entry

    # ---- gauges ---------------------------------------------------------------------------------
    def publish(self) -> int:
        """Set the per-bucket predicted and measured gauges (a chore, every 30 s); returns how many."""
        self.replay()
        if self.budget_bytes <= 0:
            return 0
        _, effective = self.effective_budget()
        rows: dict[str, tuple[float, float]] = {}
        for name in self.node.part_accesses():
            counts = self._measured.get(name)
            if name.startswith("bucket:") and counts and counts[0]:
                predicted = self.node.part_curve(name, [effective])[0][1]
                rows[name[len("bucket:"):]] = (round(predicted, 4), round(counts[1] / counts[0], 4))
        metrics.sizing_ratios(rows)
        return len(rows)
