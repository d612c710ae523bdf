"""Lifecycle of a journaled write, as an explicit state machine.

    BUFFERED ──claim──▶ DESTAGING ──remote verified──▶ DURABLE
       ▲  │                 │ │
       │  └──newer write────┼─┼──────────────────────▶ SUPERSEDED
       └──retry / lease lost┘ └──attempts exhausted──▶ FAILED ──operator retry──▶ BUFFERED

Workers change a row with a compare-and-swap on (state, generation); ``ALLOWED`` is the only
place that says which moves are legal. Every write of a row's state, bulk moves included, goes
through ``adapters.catalog.journal.moves.move_rows``, which raises ``IllegalTransition`` for any
other move before a statement runs. Staying in a state is not a move: an update that keeps the
state (a lease renewal, "due now") does not write ``state`` at all.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import TypeVar


class VersionState(StrEnum):
    BUFFERED = "buffered"
    DESTAGING = "destaging"
    DURABLE = "durable"
    SUPERSEDED = "superseded"
    FAILED = "failed"


ALLOWED: dict[VersionState, frozenset[VersionState]] = {
    VersionState.BUFFERED: frozenset({VersionState.DESTAGING, VersionState.SUPERSEDED}),
    VersionState.DESTAGING: frozenset({VersionState.DURABLE, VersionState.BUFFERED, VersionState.FAILED,
                                       VersionState.SUPERSEDED}),
    VersionState.FAILED: frozenset({VersionState.BUFFERED, VersionState.SUPERSEDED}),
    VersionState.DURABLE: frozenset(),
    VersionState.SUPERSEDED: frozenset(),
}

# Not yet on the remote: served locally, counted against the write buffer, never evicted.
DIRTY = (VersionState.BUFFERED, VersionState.DESTAGING, VersionState.FAILED)

# The admin API's words for the dirty states (``status`` and ``?state=`` of /admin/journal, the
# summary's counters), kept for API compatibility. This is the one place the two vocabularies
# meet: everything else (journal, metrics labels, logs, docs) says the domain's words.
API_WORDS: dict[VersionState, str] = {
    VersionState.BUFFERED: "pending",
    VersionState.DESTAGING: "inflight",
    VersionState.FAILED: "failed",
}


# Final: no move leaves them, so compaction may delete such rows without a transition.
TERMINAL = frozenset(s for s, nxt in ALLOWED.items() if not nxt)


class IllegalTransition(ValueError):
    """A move the state table does not allow (a bug in the caller, never a client error)."""


S = TypeVar("S", bound=StrEnum)


def check_move(table: Mapping[S, frozenset[S]], current: S, target: S) -> None:
    """Raise ``IllegalTransition`` unless ``table`` allows ``current -> target``."""
    if target not in table[current]:
        raise IllegalTransition(f"illegal transition {current} -> {target}")


def check_transition(current: VersionState, target: VersionState) -> None:
    check_move(ALLOWED, current, target)


class CacheState(StrEnum):
    """A cache_entries row: seen once (second-hit admission), ready to serve, or invalid (a write
    replaced the key; the shared tombstone row is born invalid). A row is born in any of them."""

    SEEN = "seen"
    READY = "ready"
    INVALID = "invalid"


# Invalidation is the only update of an entry's state; INVALID -> INVALID moves a tombstone's
# time. Re-discovery replaces the row (delete + insert), it does not move it.
CACHE_ALLOWED: dict[CacheState, frozenset[CacheState]] = {
    CacheState.SEEN: frozenset({CacheState.INVALID}),
    CacheState.READY: frozenset({CacheState.INVALID}),
    CacheState.INVALID: frozenset({CacheState.INVALID}),
}


class UploadState(StrEnum):
    """A multipart upload: open for parts, claimed by one Complete, or completed (its result kept
    so a retried Complete gets the same answer). Born OPEN."""

    OPEN = "open"
    COMPLETING = "completing"
    COMPLETED = "completed"


# COMPLETING -> OPEN: the Complete failed, died (its claim ran out) or its node restarted. A
# takeover of a run-out claim rewrites the claim, not the state.
UPLOAD_ALLOWED: dict[UploadState, frozenset[UploadState]] = {
    UploadState.OPEN: frozenset({UploadState.COMPLETING}),
    UploadState.COMPLETING: frozenset({UploadState.OPEN, UploadState.COMPLETED}),
    UploadState.COMPLETED: frozenset(),
}


def backoff_seconds(attempt: int, base: float = 1.0, cap: float = 300.0) -> float:
    """Exponential backoff (full jitter is applied by the caller)."""
    return min(cap, base * (2 ** max(0, attempt - 1)))
