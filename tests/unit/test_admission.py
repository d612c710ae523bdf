"""Frequency admission's decisions (app/services/cache/admission.py) over a small in-memory index:
room is never gated, a tie refuses, a candidate counted more than MARGIN above every victim
replaces exactly those, pinned entries are never victims, and a pass over an object counts once."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from app.domain.cache import Entry
from app.domain.objects import ObjectMeta
from app.domain.policy import Policy
from app.domain.states import CacheState
from app.services.cache.admission import (
    LANDING_SECONDS,
    MARGIN,
    RECENT_KEYS_MAX,
    REPEAT_SECONDS,
    FrequencyAdmission,
    remember,
)

KiB = 1024
FREQUENCY, PINNED, ALWAYS = Policy(), Policy(pinned=True), Policy(admission="always")


def entry(key: str, size: int, last_access: float, id_: int) -> Entry:
    meta = ObjectMeta(key=key, size=size, etag=f"e-{key}", last_modified=datetime(2026, 1, 1, tzinfo=UTC))
    return Entry(id_, "b", key, meta.etag, size, 8 * 1024 * KiB, meta, None, CacheState.READY, size, 0.0, last_access)


@dataclass
class Index:
    entries: list[Entry] = field(default_factory=list)

    def lru(self, limit: int, **_: object) -> list[Entry]:
        return sorted(self.entries, key=lambda e: (e.last_access, e.id))[:limit]

    def total_bytes(self, **_: object) -> int:
        return sum(e.cached_bytes for e in self.entries)

    def bytes_with(self, keys: list[tuple[str, str]]) -> tuple[int, dict[tuple[str, str], int]]:
        held: dict[tuple[str, str], int] = {}
        for e in self.entries:
            if (e.bucket, e.key) in keys:
                held[(e.bucket, e.key)] = held.get((e.bucket, e.key), 0) + e.cached_bytes
        return self.total_bytes(), held

    def drop(self, victim: Entry) -> int:
        self.entries.remove(victim)
        return victim.cached_bytes


@dataclass
class Policies:
    pinned_prefix: str = "pin/"

    def for_key(self, bucket: str, key: str) -> Policy:
        return PINNED if key.startswith(self.pinned_prefix) else FREQUENCY


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def gate(index: Index, budget: int = 4 * 256 * KiB, clock: Clock | None = None) -> FrequencyAdmission:
    return FrequencyAdmission(index, Policies(), lambda: 0, budget, index.drop,  # type: ignore[arg-type]
                              clock=clock or Clock())


def full_index(prefix: str = "k") -> Index:
    return Index([entry(f"{prefix}{i}", 256 * KiB, float(i), i + 1) for i in range(4)])


def test_room_is_never_gated_and_a_full_cache_refuses_a_tie() -> None:
    index = Index()
    admission = gate(index)
    assert admission.decide("b", "new", 256 * KiB, FREQUENCY)  # empty: room
    admission = gate(full_index())
    assert not admission.decide("b", "new", 256 * KiB, FREQUENCY)  # both counted 0: a tie refuses


def test_a_candidate_counted_above_the_margin_replaces_exactly_its_victims() -> None:
    index = full_index()
    clock = Clock()
    admission = gate(index, clock=clock)
    for _ in range(MARGIN + 1):
        admission.record("b", "hot")
    assert admission.decide("b", "hot", 512 * KiB, FREQUENCY)
    assert [e.key for e in index.entries] == ["k2", "k3"]  # the two least recently used went
    index.entries.append(entry("hot", 512 * KiB, 10.0, 9))  # its fill landed
    clock.now += 5  # a fresh measurement of the use
    assert not admission.decide("b", "cold", 256 * KiB, FREQUENCY)


def test_pinned_entries_are_never_victims_and_pinned_misses_are_never_gated() -> None:
    index = Index([entry(f"pin/{i}", 256 * KiB, float(i), i + 1) for i in range(4)])
    admission = gate(index)
    for _ in range(5):
        admission.record("b", "hot")
    assert not admission.decide("b", "hot", 256 * KiB, FREQUENCY)  # nothing unpinned to push out
    assert len(index.entries) == 4
    assert admission.decide("b", "pin/new", 256 * KiB, PINNED)
    assert admission.decide("b", "lru", 256 * KiB, ALWAYS)


def test_an_object_larger_than_the_budget_is_refused() -> None:
    admission = gate(full_index())
    for _ in range(5):
        admission.record("b", "huge")
    assert not admission.decide("b", "huge", 8 * 256 * KiB, FREQUENCY)


def test_a_pass_over_an_object_counts_once() -> None:
    clock = Clock()
    admission = gate(Index(), clock=clock)
    admission.record("b", "shard", from_start=True)
    for _ in range(7):  # the shard's next ranges
        admission.record("b", "shard", from_start=False)
    assert admission.estimate("b", "shard") == 1
    clock.now += REPEAT_SECONDS
    admission.record("b", "shard", from_start=False)  # a later read further in counts again
    admission.record("b", "shard", from_start=True)  # and so does every new pass from byte 0
    assert admission.estimate("b", "shard") == 3


def test_a_miss_refused_whole_takes_the_free_room_in_part() -> None:
    """Three 300 KiB entries in a 1 MiB budget leave 124 KiB free: a tied 300 KiB miss whose
    first block fits is admitted in part, keeps blocks while the room lasts, and evicts nothing."""
    index = Index([entry(f"k{i}", 300 * KiB, float(i), i + 1) for i in range(3)])
    admission = gate(index)
    assert not admission.decide("b", "late", 300 * KiB, FREQUENCY)  # no first block: whole or nothing
    assert admission.allowance("b", "late") is None
    assert not admission.decide("b", "late", 300 * KiB, FREQUENCY, first_block=128 * KiB)  # does not fit
    assert admission.decide("b", "late", 300 * KiB, FREQUENCY, first_block=64 * KiB)
    assert len(index.entries) == 3  # nothing pushed out
    assert admission.allowance("b", "late") == 124 * KiB
    assert admission.keep_block("b", "late", 64 * KiB)
    assert admission.keep_block("b", "late", 32 * KiB)
    assert not admission.keep_block("b", "late", 64 * KiB)  # 28 KiB left: served, not kept
    assert admission.keep_block("b", "late", 28 * KiB)
    assert admission.keep_block("b", "other", 64 * KiB)  # not admitted in part: always kept
    # The room is spoken for until the next measurement: another miss finds none.
    assert not admission.decide("b", "next", 300 * KiB, FREQUENCY, first_block=4 * KiB)


def test_an_allowance_goes_when_the_key_is_admitted_whole_or_asked_for_by_name() -> None:
    index = Index([entry(f"k{i}", 300 * KiB, float(i), i + 1) for i in range(3)])
    clock = Clock()
    admission = gate(index, clock=clock)
    assert admission.decide("b", "late", 300 * KiB, FREQUENCY, first_block=64 * KiB)
    admission.forget_allowance("b", "late")  # staged: kept whole
    assert admission.allowance("b", "late") is None
    assert admission.keep_block("b", "late", 300 * KiB)
    for _ in range(MARGIN + 2):
        admission.record("b", "late")
    clock.now += 5  # a fresh measurement: the room is free again, the key now outranks k0
    assert admission.decide("b", "late", 300 * KiB, FREQUENCY, first_block=64 * KiB)
    assert admission.allowance("b", "late") is None  # admitted whole, in place of k0
    assert [e.key for e in index.entries] == ["k1", "k2"]


def test_a_measurement_taken_mid_fill_still_counts_the_bytes_to_land() -> None:
    """A two-block object admitted into the last room has one block landed when the use is next
    measured: the other block is promised, so the next tied miss finds no room (not even in part),
    and nothing is left for eviction to correct. Bytes that never land are let go."""
    index = Index([entry(f"k{i}", 256 * KiB, float(i), i + 1) for i in range(2)])
    clock = Clock()
    admission = gate(index, clock=clock)
    assert admission.decide("b", "shard", 512 * KiB, FREQUENCY, first_block=256 * KiB)  # room: 512 KiB free
    shard = entry("shard", 512 * KiB, 10.0, 9)
    index.entries.append(shard)
    shard.cached_bytes = 256 * KiB  # its first block is in the row
    admission.landed("b", "shard", 256 * KiB)
    clock.now += 2  # a fresh measurement, before the second block lands
    assert not admission.decide("b", "next", 512 * KiB, FREQUENCY, first_block=256 * KiB)
    shard.cached_bytes = 512 * KiB
    admission.landed("b", "shard", 256 * KiB)
    clock.now += 2
    assert not admission.decide("b", "next", 512 * KiB, FREQUENCY, first_block=256 * KiB)  # truly full
    index.entries.remove(shard)  # evicted whole; an admission that never lands is let go in time
    clock.now += 2
    assert admission.decide("b", "gone", 512 * KiB, FREQUENCY)
    clock.now += 2
    assert not admission.decide("b", "next", 512 * KiB, FREQUENCY, first_block=256 * KiB)  # "gone" promised
    clock.now += LANDING_SECONDS
    assert admission.decide("b", "next", 512 * KiB, FREQUENCY, first_block=256 * KiB)


def test_a_block_in_its_row_before_its_fill_reports_it_is_counted_once() -> None:
    """A fill writes a block into its row, then reports it (``landed``); a measurement taken in
    between sees the block in the total and must not count it as still promised too. (Counted
    twice, the last shard of an epoch that exactly fills the budget was admitted in part, and a
    key-order epoch hit 7 shards of 8: tests/integration/test_epochs.py under CI's load.)"""
    index = Index([entry("k0", 256 * KiB, 0.0, 1)])
    clock = Clock()
    admission = gate(index, clock=clock)
    assert admission.decide("b", "shard", 512 * KiB, FREQUENCY, first_block=256 * KiB)  # room: 768 of 1024
    shard = entry("shard", 512 * KiB, 10.0, 9)
    shard.cached_bytes = 256 * KiB  # its first block is in the row; the fill has not said so yet
    index.entries.append(shard)
    clock.now += 2  # a fresh measurement in that moment: 512 cached, 256 still to land
    assert admission.decide("b", "last", 256 * KiB, FREQUENCY, first_block=256 * KiB)  # exactly full
    assert admission.allowance("b", "last") is None  # admitted whole, not in part
    admission.landed("b", "shard", 256 * KiB)
    shard.cached_bytes = 512 * KiB
    admission.landed("b", "shard", 256 * KiB)
    index.entries.append(entry("last", 256 * KiB, 11.0, 10))
    admission.landed("b", "last", 256 * KiB)
    clock.now += 2
    assert not admission.decide("b", "more", 256 * KiB, FREQUENCY, first_block=256 * KiB)  # truly full now


def test_a_verdict_at_once_only_where_no_sql_is_needed() -> None:
    """``decide_at_once`` (on the event loop) admits a miss that fits under the last measurement
    and counts it as ``decide`` would; anything else is left to ``decide`` (None)."""
    index = Index([entry("k0", 256 * KiB, 0.0, 1)])
    clock = Clock()
    admission = gate(index, clock=clock)
    assert admission.decide_at_once("b", "a", 256 * KiB, ALWAYS) is True  # not gated: nothing to ask
    assert admission.decide_at_once("b", "a", 256 * KiB, FREQUENCY) is None  # never measured
    assert admission.decide("b", "a", 256 * KiB, FREQUENCY)  # measures: 256 KiB used, now 512
    assert admission.decide_at_once("b", "b2", 256 * KiB, FREQUENCY) is True  # 768 of 1024
    assert admission.decide_at_once("b", "c", 512 * KiB, FREQUENCY) is None  # needs room: decide's
    assert admission.decide_at_once("b", "d", 256 * KiB, FREQUENCY) is True  # exactly full
    assert not admission.decide("b", "e", 256 * KiB, FREQUENCY)  # the promised bytes are counted
    clock.now += 2
    assert admission.decide_at_once("b", "f", 1, FREQUENCY) is None  # a measurement is due


def test_a_verdict_at_once_never_waits_for_a_thread_holding_the_gate() -> None:
    """The event loop asks ``decide_at_once``; a thread in ``decide`` holds the gate across its SQL
    (a measurement, an eviction). The loop must not wait behind it: a busy gate answers None
    (left to ``decide``), and the same question is answered once the gate is free."""
    admission = gate(Index([entry("k0", 256 * KiB, 0.0, 1)]))
    assert admission.decide("b", "a", 256 * KiB, FREQUENCY)  # measured: room for two more
    with admission._lock:  # what a thread deciding in SQL holds
        assert admission.decide_at_once("b", "b2", 256 * KiB, FREQUENCY) is None
    assert admission.decide_at_once("b", "b2", 256 * KiB, FREQUENCY) is True


def test_the_bounded_tables_drop_their_oldest_half_when_full() -> None:
    table: dict[str, int] = {}
    for n in range(RECENT_KEYS_MAX):
        remember(table, f"k{n}", n)
    assert len(table) == RECENT_KEYS_MAX
    remember(table, "k1", -1)  # full: the oldest half goes first, then the name is the newest
    assert len(table) == RECENT_KEYS_MAX // 2 + 1
    assert "k0" not in table and "k2" not in table and table["k1"] == -1
    assert list(table)[-1] == "k1" and f"k{RECENT_KEYS_MAX - 1}" in table
