"""Lifecycle of a journaled write, as an explicit state machine.

    BUFFERED ──claim──▶ DESTAGING ──remote verified──▶ DURABLE
       ▲  │                 │ │
       │  └──newer write────┼─┼──────────────────────▶ SUPERSEDED
       └──retry / lease lost┘ └──attempts exhausted──▶ FAILED ──operator retry──▶ BUFFERED

Workers change a row with a compare-and-swap on (state, generation); ``ALLOWED`` is the only
place that says which moves are legal, and the journal refuses any other.
"""

from __future__ import annotations

from enum import StrEnum


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


def check_transition(current: VersionState, target: VersionState) -> None:
    if target not in ALLOWED[current]:
        raise ValueError(f"illegal transition {current} -> {target}")


def backoff_seconds(attempt: int, base: float = 1.0, cap: float = 300.0) -> float:
    """Exponential backoff (full jitter is applied by the caller)."""
    return min(cap, base * (2 ** max(0, attempt - 1)))
